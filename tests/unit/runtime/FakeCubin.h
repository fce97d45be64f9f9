// FakeCubin.h — cubin-shaped ELF images for tests, with no runtime dependency (the C ABI tests use it too).
#ifndef FLASHTILE_TESTS_UNIT_RUNTIME_FAKECUBIN_H
#define FLASHTILE_TESTS_UNIT_RUNTIME_FAKECUBIN_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flashtile::test {

/// Little-endian bytes of `value` appended to `out`.
template <class T> void appendLe(std::string &out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<unsigned long long>(value) >> (8 * i)) & 0xff));
}

/// A minimal cubin: a 64-bit ELF image for EM_CUDA with CUDA's ELF ABI version 8 e_flags for `smVersion`
/// (or version 7 with `abiV1`), a string table and a symbol table defining the global functions `functions`, and
/// at the end, as NVRTC places them, program headers (PT_PHDR and a PT_LOAD over the symbol table).
inline std::string fakeCubin(int smVersion, const std::vector<std::string> &functions, bool abiV1 = false) {
  constexpr size_t kHeader = 64, kSection = 64, kSymbol = 24, kSegment = 56, kSegments = 2;
  std::string strtab(1, '\0');
  std::vector<uint32_t> nameOffsets;
  for (const std::string &f : functions) {
    nameOffsets.push_back(static_cast<uint32_t>(strtab.size()));
    strtab += f;
    strtab.push_back('\0');
  }
  std::string symtab(kSymbol, '\0'); // symbol 0 is the null symbol
  for (uint32_t name : nameOffsets) {
    appendLe<uint32_t>(symtab, name);
    symtab.push_back(static_cast<char>((1 << 4) | 2)); // STB_GLOBAL, STT_FUNC
    symtab.push_back(0);
    appendLe<uint16_t>(symtab, 3); // defined in section 3 (any non-zero index)
    appendLe<uint64_t>(symtab, 0);
    appendLe<uint64_t>(symtab, 16);
  }
  std::string image(kHeader, '\0');
  size_t strtabOffset = image.size();
  image += strtab;
  while (image.size() % 8)
    image.push_back('\0');
  size_t symtabOffset = image.size();
  image += symtab;
  size_t sectionsOffset = image.size();
  auto section = [&](uint32_t type, uint64_t offset, uint64_t size, uint32_t link, uint64_t entsize) {
    appendLe<uint32_t>(image, 0);
    appendLe<uint32_t>(image, type);
    appendLe<uint64_t>(image, 0);
    appendLe<uint64_t>(image, 0);
    appendLe<uint64_t>(image, offset);
    appendLe<uint64_t>(image, size);
    appendLe<uint32_t>(image, link);
    appendLe<uint32_t>(image, 0);
    appendLe<uint64_t>(image, 1);
    appendLe<uint64_t>(image, entsize);
  };
  section(0, 0, 0, 0, 0);                                // null section
  section(3, strtabOffset, strtab.size(), 0, 0);         // SHT_STRTAB
  section(2, symtabOffset, symtab.size(), 1, kSymbol);   // SHT_SYMTAB, names in section 1
  section(1, 0, 0, 0, 0);                                // SHT_PROGBITS standing in for the code
  size_t segmentsOffset = image.size();
  auto segment = [&](uint32_t type, uint64_t offset, uint64_t size) {
    appendLe<uint32_t>(image, type);
    appendLe<uint32_t>(image, 4); // PF_R
    appendLe<uint64_t>(image, offset);
    appendLe<uint64_t>(image, 0);
    appendLe<uint64_t>(image, 0);
    appendLe<uint64_t>(image, size); // p_filesz
    appendLe<uint64_t>(image, size); // p_memsz
    appendLe<uint64_t>(image, 8);
  };
  segment(6, segmentsOffset, kSegment * kSegments); // PT_PHDR
  segment(1, symtabOffset, symtab.size());          // PT_LOAD
  std::string header = "\x7f"
                       "ELF";
  header += '\x02'; // ELFCLASS64
  header += '\x01'; // little endian
  header += '\x01'; // EV_CURRENT
  header += '\x41'; // CUDA's OS ABI
  header += static_cast<char>(abiV1 ? 7 : 8);
  header.resize(16, '\0');
  appendLe<uint16_t>(header, 2);   // ET_EXEC
  appendLe<uint16_t>(header, 190); // EM_CUDA
  appendLe<uint32_t>(header, 1);
  appendLe<uint64_t>(header, 0);
  appendLe<uint64_t>(header, segmentsOffset);
  appendLe<uint64_t>(header, sectionsOffset);
  uint32_t flags = abiV1 ? (0x500 | smVersion | (smVersion << 16)) : (0x6000004 | (smVersion << 8));
  appendLe<uint32_t>(header, flags);
  appendLe<uint16_t>(header, kHeader);
  appendLe<uint16_t>(header, kSegment);
  appendLe<uint16_t>(header, kSegments);
  appendLe<uint16_t>(header, kSection);
  appendLe<uint16_t>(header, 4);
  appendLe<uint16_t>(header, 1);
  image.replace(0, kHeader, header);
  return image;
}

} // namespace flashtile::test

#endif // FLASHTILE_TESTS_UNIT_RUNTIME_FAKECUBIN_H
