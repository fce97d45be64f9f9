// NvrtcMemo.h — compileCuda's memo: finished compiles kept on disk, for test suites that compile the same sources
// run after run (CI's NVRTC sweeps), as ccache keeps a C++ build's objects.
//
// Off unless FLASHTILE_NVRTC_CACHE_DIR names a directory (scripts/test.sh sets it for ctest; the runtime's own
// kernel cache, KernelCache.h, is what users get). An entry is one file named by a hash of everything the compile's
// result depends on — NVRTC's version and library file (path, size, time), the options (the target among them), the
// output kind, the program's name and its whole source — and holds that key text itself, NVRTC's log and the output,
// so that a hit is an exact match of the key, never a hash alone. Failed compiles are not kept. Entries are read only where CacheTrust.h's
// checks pass (the directory is created 0700, entries are written 0600 and atomically); a damaged, foreign or
// untrusted entry is a miss. A hit refreshes the entry's modification time, so `find DIR -mtime +N -delete` prunes
// what no run has used for N days.
#ifndef FLASHTILE_RUNTIME_NVRTCMEMO_H
#define FLASHTILE_RUNTIME_NVRTCMEMO_H

#include <optional>
#include <string>
#include <vector>

namespace flashtile {

/// The environment variable naming the memo's directory.
inline constexpr const char *kNvrtcMemoVariable = "FLASHTILE_NVRTC_CACHE_DIR";

/// The memo's directory, or "" where it is off.
std::string nvrtcMemoDirectory();

/// The key text of one compile.
std::string nvrtcMemoKey(const std::string &nvrtcVersion, const std::string &name,
                         const std::vector<std::string> &options, bool cubin, const std::string &source);

struct NvrtcMemoEntry {
  std::string output; // the cubin or the PTX
  std::string log;    // NVRTC's log of the compile
};

/// The kept compile of exactly `key` in `dir`, or nothing.
std::optional<NvrtcMemoEntry> findNvrtcMemo(const std::string &dir, const std::string &key);

/// Keeps a compile under `key` in `dir`. A failure to write is reported once through the log (Log.h), not returned:
/// the compile itself succeeded.
void keepNvrtcMemo(const std::string &dir, const std::string &key, const NvrtcMemoEntry &entry);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_NVRTCMEMO_H
