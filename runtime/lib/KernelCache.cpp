// KernelCache.cpp — single-flight memory layer and the checked, atomically written disk layer.
//
// Disk entry layout (integers little-endian):
//   magic "FTKCACHE" | u32 format version | u64 key length | u64 info length | u64 payload length |
//   key text | KernelInfo::serialize() text | cubin | u64 FNV-1a of every preceding byte
// Note layout (`<hash>.ftn`, a short text such as the compiler's shape-class answer):
//   magic "FTKCNOTE" | u32 format version | u64 key length | u64 value length | key text | value | u64 FNV-1a
#include "flashtile/runtime/KernelCache.h"

#include "RegularFile.h"
#include "flashtile/runtime/FileIo.h"
#include "flashtile/runtime/Log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

using namespace flashtile;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kMagic = "FTKCACHE";
/// Bump when the layout above changes; old entries then read as misses and are rewritten.
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderBytes = kMagic.size() + sizeof(uint32_t) + 3 * sizeof(uint64_t);
constexpr size_t kChecksumBytes = sizeof(uint64_t);
constexpr std::string_view kEntrySuffix = ".ftk";
constexpr std::string_view kNoteMagic = "FTKCNOTE";
constexpr size_t kNoteHeaderBytes = kNoteMagic.size() + sizeof(uint32_t) + 2 * sizeof(uint64_t);
constexpr std::string_view kNoteSuffix = ".ftn";
/// Larger than any note; a bigger file is damage.
constexpr size_t kMaxNoteBytes = 64 * 1024;
constexpr std::string_view kTempPrefix = ".tmp-";

constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = kFnvOffsetBasis;
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= kFnvPrime;
  }
  return hash;
}

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

template <class T> void appendLittleEndian(std::string &out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

template <class T> T readLittleEndian(std::string_view bytes, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return value;
}

std::string encodeEntry(const std::string &key, const CachedKernel &kernel) {
  std::string info = kernel.info.serialize();
  std::string bytes(kMagic);
  appendLittleEndian<uint32_t>(bytes, kFormatVersion);
  appendLittleEndian<uint64_t>(bytes, key.size());
  appendLittleEndian<uint64_t>(bytes, info.size());
  appendLittleEndian<uint64_t>(bytes, kernel.cubin.size());
  bytes += key;
  bytes += info;
  bytes += kernel.cubin;
  appendLittleEndian<uint64_t>(bytes, fnv1a64(bytes));
  return bytes;
}

/// The entry's kernel, or nothing when `bytes` is not a complete, intact entry for exactly `key`.
std::optional<CachedKernel> decodeEntry(std::string_view bytes, const std::string &key) {
  if (bytes.size() < kHeaderBytes + kChecksumBytes || bytes.substr(0, kMagic.size()) != kMagic ||
      readLittleEndian<uint32_t>(bytes, kMagic.size()) != kFormatVersion)
    return std::nullopt;
  size_t offset = kMagic.size() + sizeof(uint32_t);
  uint64_t lengths[3];
  uint64_t remaining = bytes.size() - kHeaderBytes - kChecksumBytes;
  for (uint64_t &length : lengths) {
    length = readLittleEndian<uint64_t>(bytes, offset);
    offset += sizeof(uint64_t);
    // Checked one at a time so that garbage lengths cannot overflow a sum.
    if (length > remaining)
      return std::nullopt;
    remaining -= length;
  }
  if (remaining != 0)
    return std::nullopt;
  size_t checksumOffset = bytes.size() - kChecksumBytes;
  if (readLittleEndian<uint64_t>(bytes, checksumOffset) != fnv1a64(bytes.substr(0, checksumOffset)))
    return std::nullopt;
  std::string_view keyText = bytes.substr(kHeaderBytes, lengths[0]);
  if (keyText != key)
    return std::nullopt;
  StatusOr<KernelInfo> info = KernelInfo::parse(bytes.substr(kHeaderBytes + lengths[0], lengths[1]));
  if (!info.ok() || lengths[2] == 0)
    return std::nullopt;
  return CachedKernel{std::move(*info), std::string(bytes.substr(kHeaderBytes + lengths[0] + lengths[1], lengths[2]))};
}

std::string encodeNote(const std::string &key, const std::string &value) {
  std::string bytes(kNoteMagic);
  appendLittleEndian<uint32_t>(bytes, kFormatVersion);
  appendLittleEndian<uint64_t>(bytes, key.size());
  appendLittleEndian<uint64_t>(bytes, value.size());
  bytes += key;
  bytes += value;
  appendLittleEndian<uint64_t>(bytes, fnv1a64(bytes));
  return bytes;
}

/// The note's value, or nothing when `bytes` is not a complete, intact note for exactly `key`.
std::optional<std::string> decodeNote(std::string_view bytes, const std::string &key) {
  if (bytes.size() < kNoteHeaderBytes + kChecksumBytes || bytes.substr(0, kNoteMagic.size()) != kNoteMagic ||
      readLittleEndian<uint32_t>(bytes, kNoteMagic.size()) != kFormatVersion)
    return std::nullopt;
  uint64_t keyBytes = readLittleEndian<uint64_t>(bytes, kNoteMagic.size() + sizeof(uint32_t));
  uint64_t valueBytes = readLittleEndian<uint64_t>(bytes, kNoteMagic.size() + sizeof(uint32_t) + sizeof(uint64_t));
  uint64_t remaining = bytes.size() - kNoteHeaderBytes - kChecksumBytes;
  if (keyBytes > remaining || valueBytes != remaining - keyBytes)
    return std::nullopt;
  size_t checked = bytes.size() - kChecksumBytes;
  if (readLittleEndian<uint64_t>(bytes, checked) != fnv1a64(bytes.substr(0, checked)))
    return std::nullopt;
  if (bytes.substr(kNoteHeaderBytes, keyBytes) != key)
    return std::nullopt;
  return std::string(bytes.substr(kNoteHeaderBytes + keyBytes, valueBytes));
}

/// A temporary file older than this was left by a writer that died before its rename (a kill, a crash): every
/// live writer renames within seconds of creating its file.
constexpr auto kStaleTempAge = std::chrono::minutes(10);
/// Larger than any entry (a cubin is a few MB at most); a bigger file is damage, never read whole.
constexpr size_t kMaxEntryBytes = 256 * 1024 * 1024;

/// Removes temporary files (isTempFileName) in `dir` last modified more than kStaleTempAge ago. Other entries, and temporary files
/// being written now, are left alone; errors are ignored (another process may be cleaning too).
void removeStaleTempFiles(const std::string &dir) {
  std::error_code error;
  fs::directory_iterator entries(dir, error);
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator end; !error && entries != end; entries.increment(error)) {
    const fs::path &path = entries->path();
    if (!isTempFileName(path.filename().string()))
      continue;
    std::error_code statError;
    if (!fs::is_regular_file(fs::symlink_status(path, statError)) || statError)
      continue;
    fs::file_time_type written = fs::last_write_time(path, statError);
    if (!statError && now - written > kStaleTempAge)
      unlink(path.c_str());
  }
}

/// Writes `bytes` to a fresh temporary file in `path`'s directory and renames it over `path`, so readers in
/// other processes see either the old entry or the whole new one. No fsync: an entry torn by a crash fails its
/// checksum and is rebuilt, which is cheaper than syncing every write. What is at `path` is replaced whatever it
/// is (rename replaces a FIFO or a symlink itself, never its target), except a non-empty directory: that is left
/// alone and reported. The error says what failed and why.
/// Directories are created 0700 and the file 0600, unless the cache is `shared` (CacheTrust.h).
Status writeFileAtomically(const std::string &path, const std::string &bytes, bool shared) {
  fs::path target(path);
  if (Status created = createCacheDirectories(target.parent_path().string(), shared); !created.ok())
    return created;
  struct stat existing {};
  if (lstat(path.c_str(), &existing) == 0 && S_ISDIR(existing.st_mode) && rmdir(path.c_str()) != 0)
    return Status::error(path + " is a directory that cannot be removed (" + std::strerror(errno) +
                         "); the entry is not stored");
  return replaceFileAtomically(path, bytes, cacheFileMode(shared));
}

/// Marks an entry as just used, for the size cap's least-recently-used order (modification time: access times
/// are often not kept).
void touchEntry(const std::string &path) { utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

/// FLASHTILE_CACHE_MAX_MB into `options` (maxBytes, or a warning when it is not a positive number of MiB).
void readSizeCap(KernelCache::Options &options) {
  constexpr uint64_t kMaxMegabytes = uint64_t(1) << 40; // keeps maxBytes (MiB << 20) inside 64 bits
  const char *text = std::getenv("FLASHTILE_CACHE_MAX_MB");
  if (!text || !*text)
    return;
  std::string_view value = text;
  uint64_t megabytes = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), megabytes);
  if (ec != std::errc() || end != value.data() + value.size() || megabytes == 0 || megabytes > kMaxMegabytes) {
    options.warning = "FLASHTILE_CACHE_MAX_MB='" + std::string(value) + "' is not a size in MiB from 1 to " +
                      std::to_string(kMaxMegabytes) + ": the cache has no size cap";
    return;
  }
  options.maxBytes = megabytes << 20;
}

/// The key text in an entry's or a note's header, or "" when `path` does not start like either.
std::string readEntryKey(const fs::path &path) {
  constexpr uint64_t kMaxKeyBytes = 1 << 16;
  static_assert(kNoteHeaderBytes <= kHeaderBytes && kNoteMagic.size() == kMagic.size());
  std::ifstream in(path, std::ios::binary);
  std::string header(kNoteHeaderBytes, '\0');
  if (!in.read(header.data(), std::streamsize(header.size())) ||
      readLittleEndian<uint32_t>(header, kMagic.size()) != kFormatVersion)
    return "";
  std::string_view magic = std::string_view(header).substr(0, kMagic.size());
  if (magic == kMagic) {
    header.resize(kHeaderBytes);
    if (!in.read(header.data() + kNoteHeaderBytes, std::streamsize(kHeaderBytes - kNoteHeaderBytes)))
      return "";
  } else if (magic != kNoteMagic) {
    return "";
  }
  uint64_t keyBytes = readLittleEndian<uint64_t>(header, kMagic.size() + sizeof(uint32_t));
  if (keyBytes == 0 || keyBytes > kMaxKeyBytes)
    return "";
  std::string key(keyBytes, '\0');
  if (!in.read(key.data(), std::streamsize(keyBytes)))
    return "";
  return key;
}

enum class CacheFile { Entry, Temp, Other };

CacheFile classify(const fs::directory_entry &file) {
  std::error_code ec;
  fs::file_status status = file.symlink_status(ec);
  if (ec || !fs::is_regular_file(status)) // links and special files are never the cache's own
    return CacheFile::Other;
  std::string name = file.path().filename().string();
  if (isTempFileName(name))
    return CacheFile::Temp;
  // Notes are entries too: listed, counted, evicted and cleared with the kernels.
  fs::path extension = file.path().extension();
  return extension == kEntrySuffix || extension == kNoteSuffix ? CacheFile::Entry : CacheFile::Other;
}

/// Calls `visit` for each of the cache's files in `dir`. Only a missing directory has none: one that cannot be
/// reached (no search permission on the way, a loop of links, a file on the path) is an error, never an empty cache.
Status forEachCacheFile(const std::string &dir,
                        const std::function<void(const fs::directory_entry &, CacheFile)> &visit) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return Status();
    return Status::error("cannot reach the kernel cache '" + dir + "': " + std::strerror(errno) +
                         " (make it reachable, or set FLASHTILE_CACHE_DIR to the cache you mean)");
  }
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec))
    if (CacheFile kind = classify(*it); kind != CacheFile::Other)
      visit(*it, kind);
  if (ec)
    return Status::error("cannot list the kernel cache '" + dir + "': " + ec.message());
  return Status();
}

} // namespace

KernelCache::Options KernelCache::optionsFromEnvironment() {
  Options options;
  const char *disable = std::getenv("FLASHTILE_DISABLE_CACHE");
  options.diskEnabled = !disable || std::string_view(disable).empty() || std::string_view(disable) == "0";
  if (const char *dir = std::getenv("FLASHTILE_CACHE_DIR"); dir && *dir)
    options.dir = dir;
  else if (const char *home = std::getenv("HOME"); home && *home)
    options.dir = std::string(home) + "/.cache/flashtile";
  else
    options.diskEnabled = false;
  options.shared = sharedCacheAccepted();
  readSizeCap(options);
  return options;
}

KernelCache::KernelCache() : KernelCache(optionsFromEnvironment()) {}

KernelCache::KernelCache(Options options) : config(std::move(options)) {
  if (config.dir.empty())
    config.diskEnabled = false;
}

KernelCache::Stats KernelCache::stats() const {
  return {memoryHits.load(), diskHits.load(), misses.load(), rejectedEntries.load(), diskWriteFailures.load()};
}

std::string KernelCache::entryPath(const std::string &key) const {
  return (fs::path(config.dir) / (hex64(fnv1a64(key)) + std::string(kEntrySuffix))).string();
}

std::string KernelCache::notePath(const std::string &key) const {
  return (fs::path(config.dir) / (hex64(fnv1a64(key)) + std::string(kNoteSuffix))).string();
}

std::optional<std::string> KernelCache::readNote(const std::string &key) {
  if (!config.diskEnabled || key.empty())
    return std::nullopt;
  try {
    std::string path = notePath(key);
    if (!trusted(path)) {
      ++rejectedEntries;
      return std::nullopt;
    }
    FileProblem problem = FileProblem::None;
    StatusOr<std::string> bytes = readRegularFile(path, kMaxNoteBytes, &problem);
    if (!bytes.ok()) {
      if (problem != FileProblem::Missing)
        ++rejectedEntries;
      return std::nullopt;
    }
    std::optional<std::string> value = decodeNote(*bytes, key);
    if (!value) {
      ++rejectedEntries;
      return std::nullopt;
    }
    touchEntry(path);
    return value;
  } catch (const std::exception &) {
    return std::nullopt; // a note is only a shortcut: without it the answer is computed again
  }
}

void KernelCache::writeNote(const std::string &key, const std::string &value) {
  if (!config.diskEnabled || key.empty())
    return;
  try {
    store(notePath(key), encodeNote(key, value));
  } catch (const std::exception &) {
    ++diskWriteFailures;
  }
}

StatusOr<std::shared_ptr<const CachedKernel>> KernelCache::getOrCompile(const std::string &key,
                                                                        const Compile &compile) {
  if (key.empty())
    return Status::error("KernelCache::getOrCompile: key must not be empty");
  std::promise<Result> promise;
  std::shared_future<Result> future;
  bool owner = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = entries.find(key);
    owner = it == entries.end();
    if (owner) {
      future = promise.get_future().share();
      entries.emplace(key, future);
    } else {
      future = it->second;
    }
  }
  if (!owner) {
    // Another caller owns this key's lookup: wait for (or reuse) its result.
    ++memoryHits;
    return future.get();
  }

  Result result = load(key, compile);
  if (!result.ok()) {
    // Forget the failure before publishing it, so that later callers try again instead of reusing it.
    std::lock_guard<std::mutex> lock(mutex);
    entries.erase(key);
  }
  promise.set_value(result);
  return result;
}

KernelCache::Result KernelCache::load(const std::string &key, const Compile &compile) {
  // Everything here may allocate or run the compiler's code; no exception may escape, or callers waiting on
  // this key would never be answered.
  try {
    std::string path = entryPath(key);
    if (config.diskEnabled && !trusted(path)) {
      ++rejectedEntries; // compiled again below; the write replaces the entry (where the directory allows it)
    } else if (config.diskEnabled) {
      FileProblem problem = FileProblem::None;
      StatusOr<std::string> bytes = readRegularFile(path, kMaxEntryBytes, &problem);
      if (bytes.ok()) {
        if (std::optional<CachedKernel> kernel = decodeEntry(*bytes, key)) {
          ++diskHits;
          touchEntry(path);
          return std::make_shared<const CachedKernel>(std::move(*kernel));
        }
        ++rejectedEntries;
      } else if (problem != FileProblem::Missing) {
        // A directory, FIFO, device or oversized file where an entry belongs: never read, rebuilt and replaced.
        ++rejectedEntries;
        logWarning("kernel cache: " + bytes.status().message() +
                   "; the kernel is compiled again and the entry replaced");
      }
    }

    ++misses;
    StatusOr<CachedKernel> compiled = compile();
    if (!compiled.ok())
      return compiled.status();
    if (Status s = compiled->info.verify(); !s.ok())
      return s.withContext("the compiler returned invalid kernel metadata for '" + key + "'");
    if (compiled->cubin.empty())
      return Status::error("the compiler returned an empty cubin for '" + key + "'");

    if (config.diskEnabled) {
      store(path, encodeEntry(key, *compiled));
      if (config.maxBytes)
        (void)evictToFit(config.maxBytes); // best effort: a file another process removed first is no error
    }
    return std::make_shared<const CachedKernel>(std::move(*compiled));
  } catch (const std::exception &e) {
    return Status::error("compiling '" + key + "' threw an exception: " + e.what());
  } catch (...) {
    return Status::error("compiling '" + key + "' threw a non-standard exception");
  }
}

StatusOr<std::vector<KernelCache::DiskEntry>> KernelCache::listDiskEntries() const {
  std::vector<DiskEntry> list;
  Status listed = forEachCacheFile(config.dir, [&](const fs::directory_entry &file, CacheFile kind) {
    if (kind != CacheFile::Entry)
      return;
    struct stat st;
    if (::stat(file.path().c_str(), &st) != 0)
      return; // removed meanwhile
    list.push_back({file.path().string(), readEntryKey(file.path()), uint64_t(st.st_size), st.st_mtime});
  });
  if (!listed.ok())
    return listed;
  std::sort(list.begin(), list.end(), [](const DiskEntry &a, const DiskEntry &b) {
    return a.lastUsed != b.lastUsed ? a.lastUsed < b.lastUsed : a.path < b.path;
  });
  return list;
}

StatusOr<KernelCache::DiskUsage> KernelCache::diskUsage() const {
  DiskUsage usage;
  Status listed = forEachCacheFile(config.dir, [&](const fs::directory_entry &file, CacheFile kind) {
    std::error_code ec;
    uint64_t bytes = fs::file_size(file.path(), ec);
    if (ec)
      return;
    if (kind == CacheFile::Temp) {
      ++usage.tempFiles;
      return;
    }
    ++usage.entries;
    usage.bytes += bytes;
  });
  if (!listed.ok())
    return listed;
  return usage;
}

StatusOr<uint64_t> KernelCache::clearDisk() {
  std::vector<fs::path> files;
  Status listed =
      forEachCacheFile(config.dir, [&](const fs::directory_entry &file, CacheFile) { files.push_back(file.path()); });
  if (!listed.ok())
    return listed;
  uint64_t removed = 0;
  for (const fs::path &file : files) {
    std::error_code ec;
    if (fs::remove(file, ec))
      ++removed;
    else if (ec)
      return Status::error("cannot remove " + file.string() + ": " + ec.message());
  }
  return removed;
}

StatusOr<uint64_t> KernelCache::evictToFit(uint64_t maxBytes) {
  StatusOr<std::vector<DiskEntry>> entries = listDiskEntries();
  if (!entries.ok())
    return entries.status();
  uint64_t total = 0;
  for (const DiskEntry &entry : *entries)
    total += entry.bytes;
  uint64_t removed = 0;
  for (const DiskEntry &entry : *entries) {
    if (total <= maxBytes)
      break;
    std::error_code ec;
    if (!fs::remove(entry.path, ec) && ec)
      return Status::error("cannot remove " + entry.path + ": " + ec.message());
    total -= entry.bytes;
    ++removed;
  }
  return removed;
}

void KernelCache::store(const std::string &path, const std::string &bytes) {
  if (!staleTempFilesRemoved.exchange(true))
    removeStaleTempFiles(config.dir);
  Status written = writeFileAtomically(path, bytes, config.shared);
  if (written.ok())
    return;
  ++diskWriteFailures;
  {
    std::lock_guard<std::mutex> lock(mutex);
    lastWriteError = written.message();
  }
  // Once per cache: every later miss fails the same way, and the kernels still work (compiled in memory).
  if (!writeFailureReported.exchange(true))
    logWarning("kernel cache: " + written.message() + "; kernels are compiled again in every process until " +
               config.dir + " can be written (set FLASHTILE_CACHE_DIR elsewhere, or FLASHTILE_DISABLE_CACHE=1)");
}

bool KernelCache::trusted(const std::string &path) {
  if (config.shared)
    return true;
  Status checked = checkCacheFileTrusted(path, config.dir, config.trustProbe);
  if (checked.ok())
    return true;
  // Once per cache: every entry under the same directory is refused the same way.
  if (!untrustedReported.exchange(true))
    logWarning("kernel cache: " + checked.message() + "; kernels are compiled again instead");
  return false;
}

std::string KernelCache::lastDiskWriteError() const {
  std::lock_guard<std::mutex> lock(mutex);
  return lastWriteError;
}

Status KernelCache::checkDiskWritable() const {
  if (!config.diskEnabled)
    return Status::error(config.dir.empty() ? "the disk cache is off (no FLASHTILE_CACHE_DIR and no HOME)"
                                            : "the disk cache is off (FLASHTILE_DISABLE_CACHE)");
  std::string probe = (fs::path(config.dir) / (std::string(kTempPrefix) + "probe-" + std::to_string(getpid()) + "-" +
                                               hex64(std::random_device()())))
                          .string();
  Status written = writeFileAtomically(probe, std::string(kMagic), config.shared);
  unlink(probe.c_str());
  return written.withContext("kernel cache " + config.dir);
}
