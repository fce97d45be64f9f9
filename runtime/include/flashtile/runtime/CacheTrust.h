// CacheTrust.h — whether a file in a cache directory may be loaded: ssh's StrictModes, for kernels and modules.
//
// A cubin or a shared library loaded from a cache runs with the caller's rights (on the GPU or in the process).
// Whoever can write the cache directory, or a directory above it, can plant one; a checksum guards against damage,
// not against a writer. So before anything is loaded from a cache, the file and every directory on its path are
// checked, as ssh checks ~/.ssh/authorized_keys:
//   - the file, the cache directory and the directories between them are owned by the caller (or root) and are not
//     writable by group or others;
//   - every directory above the cache directory is owned by the caller or root and is not writable by group or
//     others, unless it is sticky (/tmp: others may add names there but cannot rename or remove the caller's);
//   - group write is harmless, and accepted, where the group is the caller's own (the user private groups of
//     Debian and Ubuntu: the caller's primary group, with no other member), as Debian's ssh accepts it.
// Caches are created with directories 0700 and files 0600. A team that shares a cache on purpose says so with
// FLASHTILE_SHARED_CACHE=1: then nothing is checked, and directories and files get the umask's modes.
#ifndef FLASHTILE_RUNTIME_CACHETRUST_H
#define FLASHTILE_RUNTIME_CACHETRUST_H

#include "flashtile/runtime/Status.h"

#include <sys/stat.h>
#include <sys/types.h>

#include <functional>
#include <string>

namespace flashtile {

/// The opt-in for a cache that other users may write: set to anything but "" or "0".
inline constexpr const char *kSharedCacheVariable = "FLASHTILE_SHARED_CACHE";
/// Whether kSharedCacheVariable is set in the environment.
bool sharedCacheAccepted();

/// What the checks see of the file system and of the caller. Every member left empty means the system's (the
/// effective uid, stat(2) and lstat(2), the group database); tests replace one to show a file of another owner.
struct CacheTrustProbe {
  /// The caller; -1: geteuid().
  long uid = -1;
  /// stat(2) of `path` (following links when `follow`); returns 0 or an errno value.
  std::function<int(const std::string &path, struct stat &st, bool follow)> stat;
  /// Whether group `gid` is user `uid`'s own: its primary group, with no other member.
  std::function<bool(gid_t gid, uid_t uid)> privateGroup;
};

/// Whether `file`, about to be loaded from the cache rooted at `cacheRoot`, passes the checks above. A missing file
/// passes (there is nothing to load); so does one that is not a regular file (the readers refuse those). The error
/// names the path that failed, why, and the fixes.
Status checkCacheFileTrusted(const std::string &file, const std::string &cacheRoot, const CacheTrustProbe &probe = {});

/// Creates `dir` and its missing parents, each 0700 (0777 less the umask when `shared`). Directories that exist
/// are left as they are. The error names the directory that could not be created and why.
Status createCacheDirectories(const std::string &dir, bool shared);

/// The mode of a file the cache writes: 0600, or -1 (0666 less the umask) when `shared`.
inline int cacheFileMode(bool shared) { return shared ? -1 : 0600; }

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_CACHETRUST_H
