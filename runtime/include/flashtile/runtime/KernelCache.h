// KernelCache.h — compiled kernels kept in memory and on disk, keyed by a text key.
//
// The key text names everything the kernel depends on, the compiler's version included, so an entry is never
// stale: a different compiler asks for a different key. On disk each key has one file named by the key's 64-bit
// FNV-1a hash; the file repeats the full key text, so a hash collision reads as a miss, not as a wrong kernel.
// Files are written to a temporary name and renamed into place, so concurrent processes only ever see
// complete entries; an entry that fails its checks (truncated, corrupted, another key) is rebuilt.
#ifndef FLASHTILE_RUNTIME_KERNELCACHE_H
#define FLASHTILE_RUNTIME_KERNELCACHE_H

#include "flashtile/runtime/CacheTrust.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Status.h"

#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace flashtile {

/// One compiled kernel: its metadata and its cubin (an ELF image for KernelInfo::arch).
struct CachedKernel {
  KernelInfo info;
  std::string cubin;
};

class KernelCache {
public:
  struct Options {
    std::string dir;         // where disk entries live; created on first write
    bool diskEnabled = true; // false keeps the cache in memory only
    /// Size cap of the disk entries in bytes (0: none). After each write, entries least recently used (written
    /// or loaded) are removed until the rest fit.
    uint64_t maxBytes = 0;
    /// A setting from the environment that was not understood (and what was done instead); empty when none.
    std::string warning;
    /// The caller accepts a cache other users can write (FLASHTILE_SHARED_CACHE): entries are loaded unchecked,
    /// directories and files get the umask's modes. Otherwise (CacheTrust.h) directories are created 0700, files
    /// 0600, and an entry is loaded only when it and every directory on its path pass ssh's StrictModes checks.
    bool shared = false;
    /// What those checks see (the system's, unless a test says otherwise).
    CacheTrustProbe trustProbe;
  };
  /// FLASHTILE_CACHE_DIR (default $HOME/.cache/flashtile); FLASHTILE_DISABLE_CACHE set to anything but "" or
  /// "0" disables the disk layer, as does an unset HOME without FLASHTILE_CACHE_DIR. FLASHTILE_CACHE_MAX_MB: the
  /// size cap in MiB (a positive integer; anything else means no cap, and Options::warning says why).
  /// FLASHTILE_SHARED_CACHE set to anything but "" or "0": Options::shared.
  static Options optionsFromEnvironment();

  struct Stats {
    uint64_t memoryHits = 0;        // served from memory, including callers that waited for another's compile
    uint64_t diskHits = 0;          // loaded from a valid disk entry
    uint64_t misses = 0;            // calls of the compile function
    uint64_t rejectedEntries = 0;   // disk entries that existed but failed a check (or were not regular files,
                                    // or were refused as untrusted: CacheTrust.h)
    uint64_t diskWriteFailures = 0; // entries that could not be stored (the kernel was still returned)
  };

  /// Uses optionsFromEnvironment().
  KernelCache();
  explicit KernelCache(Options options);

  using Compile = std::function<StatusOr<CachedKernel>()>;
  /// Returns the kernel for `key`: from memory, else from disk, else by calling `compile` and storing its
  /// result in both. Single-flight: concurrent callers with one key share one `compile` call and its result.
  /// A failure is returned to the callers waiting at the time but not kept: the next call compiles again.
  /// `compile` must return a kernel whose info passes KernelInfo::verify() and whose cubin is not empty.
  StatusOr<std::shared_ptr<const CachedKernel>> getOrCompile(const std::string &key, const Compile &compile);

  /// Small texts filed beside the kernels (`<hash>.ftn`), for answers that cost the compiler time but no kernel:
  /// the shape class a spec runs (Runtime::findKernel). Checked like entries (key, checksum; a damaged note reads
  /// as none) and listed, evicted and cleared with them. Nothing without the disk layer.
  std::optional<std::string> readNote(const std::string &key);
  /// Stores a note atomically; a failure only counts in Stats::diskWriteFailures (the answer is asked again).
  void writeNote(const std::string &key, const std::string &value);

  Stats stats() const;
  /// Why the last disk write failed ("cannot write ...: No space left on device"), or "" when none has. The first
  /// failure is also reported once through the runtime's log (Log.h).
  std::string lastDiskWriteError() const;
  /// Whether an entry can be stored now: creates the directory if needed and writes, renames and removes a probe
  /// file. The error names the directory and the reason (read-only, permissions, disk full, disk cache off).
  Status checkDiskWritable() const;
  const Options &options() const { return config; }
  /// The file that holds (or would hold) `key`'s disk entry.
  std::string entryPath(const std::string &key) const;

  // Managing the disk layer (`flashtile cache list|clear|stats`). Only files this cache writes are touched: entries
  // (`<hash>.ftk`) and its temporary files; a missing directory is an empty cache.
  /// One disk entry. `key` is read from the file's header; empty when the file is not a readable entry.
  struct DiskEntry {
    std::string path;
    std::string key;
    uint64_t bytes = 0;
    std::time_t lastUsed = 0; // last written or loaded (the file's modification time)
  };
  /// Every entry, least recently used first.
  StatusOr<std::vector<DiskEntry>> listDiskEntries() const;
  struct DiskUsage {
    uint64_t entries = 0, bytes = 0;
    uint64_t tempFiles = 0; // temporaries of writes in progress, or of writers that died
  };
  StatusOr<DiskUsage> diskUsage() const;
  /// Removes every entry and temporary file; returns how many files were removed.
  StatusOr<uint64_t> clearDisk();
  /// Removes least recently used entries until the rest fit in `maxBytes`; returns how many were removed.
  StatusOr<uint64_t> evictToFit(uint64_t maxBytes);

private:
  using Result = StatusOr<std::shared_ptr<const CachedKernel>>;
  Result load(const std::string &key, const Compile &compile);
  std::string notePath(const std::string &key) const;
  /// Whether the file at `path` may be read (CacheTrust.h); a refusal is reported once through the log.
  bool trusted(const std::string &path);
  /// Writes one entry; on the first write, removes `.tmp-*` files that dead writers left behind.
  void store(const std::string &path, const std::string &bytes);

  Options config;
  mutable std::mutex mutex;
  /// In-flight and finished lookups; failed ones are erased once their callers have the error.
  std::unordered_map<std::string, std::shared_future<Result>> entries;
  std::atomic<uint64_t> memoryHits{0}, diskHits{0}, misses{0}, rejectedEntries{0}, diskWriteFailures{0};
  std::atomic<bool> staleTempFilesRemoved{false}, writeFailureReported{false}, untrustedReported{false};
  std::string lastWriteError; // guarded by mutex
};

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_KERNELCACHE_H
