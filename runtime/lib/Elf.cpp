// Elf.cpp — a bounds-checked reader of the few ELF structures a cubin check needs (header, program headers, section
// table, symbol table). Offsets and sizes come from an untrusted file: every one is checked against the image before
// use, with arithmetic that cannot wrap.
#include "flashtile/runtime/Elf.h"

#include <charconv>
#include <cstdint>

using namespace flashtile;

namespace {

constexpr std::string_view kElfMagic = "\x7f"
                                       "ELF";
// ELF64 layout (the System V gABI); only the fields read here.
constexpr size_t kClassOffset = 4, kDataOffset = 5, kAbiVersionOffset = 8;
constexpr uint8_t kClass64 = 2, kLittleEndian = 1;
constexpr size_t kHeaderBytes = 64;
constexpr size_t kMachineOffset = 18, kProgramTableOffset = 32, kSectionTableOffset = 40, kFlagsOffset = 48,
                 kProgramEntrySizeOffset = 54, kProgramCountOffset = 56, kSectionEntrySizeOffset = 58,
                 kSectionCountOffset = 60, kSectionNamesIndexOffset = 62;
constexpr uint16_t kMachineCuda = 190; // EM_CUDA
constexpr size_t kProgramHeaderBytes = 56;
constexpr size_t kSegmentDataOffset = 8, kSegmentFileSizeOffset = 32;
// e_phnum's escape to a count stored elsewhere (sh_info of section 0); no cubin has that many segments.
constexpr uint16_t kExtendedCount = 0xffff;
constexpr size_t kSectionHeaderBytes = 64;
constexpr size_t kSectionTypeOffset = 4, kSectionDataOffset = 24, kSectionSizeOffset = 32, kSectionLinkOffset = 40,
                 kSectionEntsizeOffset = 56;
constexpr uint32_t kSectionSymtab = 2, kSectionStrtab = 3, kSectionNobits = 8;
constexpr size_t kSymbolBytes = 24;
constexpr size_t kSymbolInfoOffset = 4, kSymbolSectionOffset = 6;
constexpr uint8_t kSymbolFunc = 2, kBindGlobal = 1, kBindWeak = 2;
// CUDA's e_flags: the SM number sits in bits 0-7 up to ELF ABI version 7 and in bits 8-15 from version 8 on.
constexpr uint8_t kCudaAbiVersionV2 = 8;

template <class T> T readLittleEndian(std::string_view bytes, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

/// Whether [offset, offset + size) lies inside an image of `total` bytes, without overflow.
bool inside(uint64_t offset, uint64_t size, size_t total) { return offset <= total && size <= total - offset; }

/// A table of `count` headers of `entrySize` bytes at `offset` (program or section headers): entries of at least
/// ELF64's `minEntrySize`, all inside the image. `headers` and `table` name them in the error.
Status checkTable(std::string_view bytes, uint64_t offset, uint16_t entrySize, uint16_t count, size_t minEntrySize,
                  const char *headers, const char *table) {
  if (entrySize < minEntrySize)
    return Status::error(std::string(headers) + " of " + std::to_string(entrySize) + " bytes; ELF64 has " +
                         std::to_string(minEntrySize));
  if (!inside(offset, uint64_t(entrySize) * count, bytes.size()))
    return Status::error(std::string("truncated: the ") + table + " ends past the file's " +
                         std::to_string(bytes.size()) + " bytes");
  return Status();
}

struct Section {
  uint32_t type = 0;
  uint64_t offset = 0, size = 0, entsize = 0;
  uint32_t link = 0;
};

} // namespace

std::optional<int> flashtile::smVersionOfArch(std::string_view arch) {
  if (!arch.starts_with("sm_"))
    return std::nullopt;
  arch.remove_prefix(3);
  if (arch.ends_with("a") || arch.ends_with("f"))
    arch.remove_suffix(1);
  int version = 0;
  auto [end, ec] = std::from_chars(arch.data(), arch.data() + arch.size(), version);
  if (arch.empty() || ec != std::errc() || end != arch.data() + arch.size() || version < 10 || version > 255)
    return std::nullopt;
  return version;
}

StatusOr<CubinInfo> flashtile::readCubin(std::string_view bytes) {
  if (!bytes.starts_with(kElfMagic))
    return Status::error("not an ELF image (no \\x7fELF magic)");
  if (bytes.size() < kHeaderBytes)
    return Status::error("truncated: " + std::to_string(bytes.size()) + " bytes, shorter than an ELF header");
  if (static_cast<uint8_t>(bytes[kClassOffset]) != kClass64 ||
      static_cast<uint8_t>(bytes[kDataOffset]) != kLittleEndian)
    return Status::error("not a 64-bit little-endian ELF image, as cubins are");
  uint16_t machine = readLittleEndian<uint16_t>(bytes, kMachineOffset);
  if (machine != kMachineCuda)
    return Status::error("an ELF image for machine " + std::to_string(machine) + ", not a cubin (EM_CUDA, " +
                         std::to_string(kMachineCuda) + ")");
  CubinInfo info;
  uint32_t flags = readLittleEndian<uint32_t>(bytes, kFlagsOffset);
  uint8_t abiVersion = static_cast<uint8_t>(bytes[kAbiVersionOffset]);
  info.smVersion = static_cast<int>(abiVersion >= kCudaAbiVersionV2 ? (flags >> 8) & 0xff : flags & 0xff);

  // The program headers are what the driver loads: a cubin cut anywhere, even in its last bytes (where NVRTC
  // puts this table), must not pass.
  uint64_t programOffset = readLittleEndian<uint64_t>(bytes, kProgramTableOffset);
  uint16_t programEntrySize = readLittleEndian<uint16_t>(bytes, kProgramEntrySizeOffset);
  uint16_t programCount = readLittleEndian<uint16_t>(bytes, kProgramCountOffset);
  if (programCount == 0)
    return Status::error("no program headers; a cubin's segments are what the driver loads");
  if (programCount == kExtendedCount)
    return Status::error("an extended program header count (e_phnum 0xffff); no cubin has that many segments");
  if (Status s = checkTable(bytes, programOffset, programEntrySize, programCount, kProgramHeaderBytes,
                            "program headers", "program header table");
      !s.ok())
    return s;
  for (uint16_t i = 0; i < programCount; ++i) {
    size_t at = static_cast<size_t>(programOffset + uint64_t(i) * programEntrySize);
    uint64_t offset = readLittleEndian<uint64_t>(bytes, at + kSegmentDataOffset);
    uint64_t fileSize = readLittleEndian<uint64_t>(bytes, at + kSegmentFileSizeOffset);
    if (!inside(offset, fileSize, bytes.size()))
      return Status::error("truncated: segment " + std::to_string(i) + " ends past the file's " +
                           std::to_string(bytes.size()) + " bytes");
  }

  uint64_t tableOffset = readLittleEndian<uint64_t>(bytes, kSectionTableOffset);
  uint16_t entrySize = readLittleEndian<uint16_t>(bytes, kSectionEntrySizeOffset);
  uint16_t count = readLittleEndian<uint16_t>(bytes, kSectionCountOffset);
  if (count == 0)
    return Status::error("no section table");
  if (Status s =
          checkTable(bytes, tableOffset, entrySize, count, kSectionHeaderBytes, "section headers", "section table");
      !s.ok())
    return s;
  std::vector<Section> sections(count);
  for (uint16_t i = 0; i < count; ++i) {
    size_t at = static_cast<size_t>(tableOffset + uint64_t(i) * entrySize);
    Section &s = sections[i];
    s.type = readLittleEndian<uint32_t>(bytes, at + kSectionTypeOffset);
    s.offset = readLittleEndian<uint64_t>(bytes, at + kSectionDataOffset);
    s.size = readLittleEndian<uint64_t>(bytes, at + kSectionSizeOffset);
    s.link = readLittleEndian<uint32_t>(bytes, at + kSectionLinkOffset);
    s.entsize = readLittleEndian<uint64_t>(bytes, at + kSectionEntsizeOffset);
    if (s.type != kSectionNobits && !inside(s.offset, s.size, bytes.size()))
      return Status::error("truncated: section " + std::to_string(i) + " ends past the file's " +
                           std::to_string(bytes.size()) + " bytes");
  }

  // e_shstrndx: the section holding the sections' names. Tools (and the driver) index the table with it.
  uint16_t namesIndex = readLittleEndian<uint16_t>(bytes, kSectionNamesIndexOffset);
  if (namesIndex == kExtendedCount)
    return Status::error("an extended section name index (e_shstrndx 0xffff); no cubin has that many sections");
  if (namesIndex >= count)
    return Status::error("e_shstrndx " + std::to_string(namesIndex) + " is past the section table's " +
                         std::to_string(count) + " sections");
  if (sections[namesIndex].type != kSectionStrtab)
    return Status::error("e_shstrndx " + std::to_string(namesIndex) + " names section " + std::to_string(namesIndex) +
                         " of type " + std::to_string(sections[namesIndex].type) + ", not a string table (SHT_STRTAB)");

  bool sawSymbols = false;
  for (const Section &symtab : sections) {
    if (symtab.type != kSectionSymtab)
      continue;
    sawSymbols = true;
    if (symtab.entsize < kSymbolBytes)
      return Status::error("symbol table entries of " + std::to_string(symtab.entsize) + " bytes; ELF64 has " +
                           std::to_string(kSymbolBytes));
    if (symtab.link >= sections.size() || sections[symtab.link].type != kSectionStrtab)
      return Status::error("the symbol table names no string table");
    const Section &strtab = sections[symtab.link];
    std::string_view names = bytes.substr(strtab.offset, strtab.size);
    // i * entsize + kSymbolBytes <= size for every i below: no symbol is read past its section.
    uint64_t symbols = symtab.size < kSymbolBytes ? 0 : (symtab.size - kSymbolBytes) / symtab.entsize + 1;
    for (uint64_t i = 0; i < symbols; ++i) {
      size_t symbol = static_cast<size_t>(symtab.offset + i * symtab.entsize);
      uint32_t nameOffset = readLittleEndian<uint32_t>(bytes, symbol);
      uint8_t symbolInfo = static_cast<uint8_t>(bytes[symbol + kSymbolInfoOffset]);
      uint16_t sectionIndex = readLittleEndian<uint16_t>(bytes, symbol + kSymbolSectionOffset);
      uint8_t type = symbolInfo & 0xf, binding = symbolInfo >> 4;
      if (type != kSymbolFunc || (binding != kBindGlobal && binding != kBindWeak) || sectionIndex == 0)
        continue;
      if (nameOffset >= names.size())
        return Status::error("a symbol's name lies outside the string table");
      std::string_view name = names.substr(nameOffset);
      size_t end = name.find('\0');
      if (end == std::string_view::npos)
        return Status::error("a symbol's name runs past the end of the string table");
      info.functions.emplace_back(name.substr(0, end));
    }
  }
  if (!sawSymbols)
    return Status::error("no symbol table");
  return info;
}

Status flashtile::checkCubin(std::string_view bytes, std::string_view arch, std::string_view entry) {
  StatusOr<CubinInfo> cubin = readCubin(bytes);
  if (!cubin.ok())
    return cubin.status();
  std::optional<int> expected = smVersionOfArch(arch);
  if (!expected)
    return Status::error("arch '" + std::string(arch) + "' names no SM version");
  if (cubin->smVersion != *expected)
    return Status::error("compiled for sm_" + std::to_string(cubin->smVersion) + " (ELF e_flags), but its manifest says " +
                         std::string(arch));
  for (const std::string &function : cubin->functions)
    if (function == entry)
      return Status();
  // The kernels it does define, for the message; '$'-named functions are the compiler's internal helpers.
  std::string defined;
  size_t listed = 0;
  for (const std::string &function : cubin->functions)
    if (!function.starts_with("$") && listed++ < 8)
      defined += (defined.empty() ? "" : ", ") + function;
  return Status::error("defines no kernel '" + std::string(entry) +
                       "' (the manifest's entry); its functions: " + (defined.empty() ? "none" : defined));
}
