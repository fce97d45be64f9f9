// NvrtcMemo.cpp — compileCuda's memo on disk (NvrtcMemo.h).
#include "NvrtcMemo.h"

#include "flashtile/runtime/CacheTrust.h"
#include "flashtile/runtime/FileIo.h"
#include "flashtile/runtime/Log.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

using namespace flashtile;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "flashtile-nvrtc-memo 1\n";
/// An entry larger than this is not read (a cubin of a generated kernel is well under a megabyte).
constexpr uint64_t kMaxEntryBytes = uint64_t{256} << 20;

/// Two 64-bit FNV-1a hashes of `text` (different offset bases): the entry's file name. A collision costs a miss and
/// a rewrite, never a wrong hit (the key is compared whole).
std::string fileNameOf(const std::string &key) {
  auto fnv = [&](uint64_t hash) {
    for (unsigned char c : key)
      hash = (hash ^ c) * 0x100000001b3ULL;
    return hash;
  };
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx%016llx.nvrtc", static_cast<unsigned long long>(fnv(0xcbf29ce484222325ULL)),
                static_cast<unsigned long long>(fnv(0x84222325cbf29ce4ULL)));
  return name;
}

void warnOnce(const std::string &message) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    logWarning(message);
}

} // namespace

std::string flashtile::nvrtcMemoDirectory() {
  const char *dir = std::getenv(kNvrtcMemoVariable);
  return dir ? std::string(dir) : std::string();
}

std::string flashtile::nvrtcMemoKey(const std::string &nvrtcVersion, const std::string &name,
                                    const std::vector<std::string> &options, bool cubin, const std::string &source) {
  std::string key = "nvrtc " + nvrtcVersion + "\noutput " + (cubin ? "cubin" : "ptx") + "\nname " + name + "\n";
  for (const std::string &option : options)
    key += "option " + option + "\n";
  return key + "source\n" + source;
}

std::optional<NvrtcMemoEntry> flashtile::findNvrtcMemo(const std::string &dir, const std::string &key) {
  const std::string path = (fs::path(dir) / fileNameOf(key)).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || !checkCacheFileTrusted(path, dir).ok())
    return std::nullopt;
  StatusOr<std::string> bytes = readInputFile(path, kMaxEntryBytes);
  if (!bytes.ok() || !std::string_view(*bytes).starts_with(kMagic))
    return std::nullopt;
  std::istringstream header(bytes->substr(kMagic.size(), 80));
  uint64_t keySize = 0, logSize = 0, outputSize = 0;
  if (!(header >> keySize >> logSize >> outputSize))
    return std::nullopt;
  const size_t start = bytes->find('\n', kMagic.size());
  if (start == std::string::npos || bytes->size() - (start + 1) != keySize + logSize + outputSize ||
      bytes->compare(start + 1, keySize, key) != 0 || keySize != key.size())
    return std::nullopt;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec); // used: kept by a pruning by age
  return NvrtcMemoEntry{.output = bytes->substr(start + 1 + keySize + logSize),
                        .log = bytes->substr(start + 1 + keySize, logSize)};
}

void flashtile::keepNvrtcMemo(const std::string &dir, const std::string &key, const NvrtcMemoEntry &entry) {
  const bool shared = sharedCacheAccepted();
  Status status = createCacheDirectories(dir, shared);
  if (status.ok())
    status = replaceFileAtomically((fs::path(dir) / fileNameOf(key)).string(),
                                   std::string(kMagic) + std::to_string(key.size()) + " " +
                                       std::to_string(entry.log.size()) + " " + std::to_string(entry.output.size()) +
                                       "\n" + key + entry.log + entry.output,
                                   cacheFileMode(shared));
  if (!status.ok())
    warnOnce(std::string(kNvrtcMemoVariable) + ": a compile could not be kept (" + status.message() +
             "); compiles go on without the memo's help");
}
