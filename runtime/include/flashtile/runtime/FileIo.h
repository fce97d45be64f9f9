// FileIo.h — writing and reading the files a user names (`-o FILE`, kernel libraries, sources to compile).
//
// An output path is written the way a user expects of a compiler:
//   - a regular file (or a path that does not exist yet) is replaced atomically: the bytes go to a fresh,
//     uniquely named temporary file in the same directory, which is renamed over the target, so a reader never
//     sees half a file and concurrent writers never share a temporary; the temporary is removed on every failure;
//   - a symbolic link is written through: its target (followed to the end of the chain) is what gets replaced, the
//     link stays a link; /proc's links (/dev/stdout, /proc/self/fd/N) stand for open files and are written in
//     place;
//   - a character device, FIFO or socket (`/dev/null`, `/dev/stdout`, `/proc/self/fd/1`, a pipe) is opened and
//     written in place: it is never replaced by a regular file;
//   - a directory is an error.
#ifndef FLASHTILE_RUNTIME_FILEIO_H
#define FLASHTILE_RUNTIME_FILEIO_H

#include "flashtile/runtime/Status.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace flashtile {

/// Writes `bytes` to `path` as described above. The error names the path and the reason.
Status writeOutputFile(const std::string &path, std::string_view bytes);

/// The temporary files writeOutputFile and replaceFileAtomically make start with "." + the target's name + this,
/// then a unique suffix.
inline constexpr std::string_view kTempFileInfix = ".tmp-";

/// Replaces what is at `path` itself (a symbolic link or FIFO there is replaced, not followed) with a regular file
/// holding `bytes`: the bytes go to a fresh, uniquely named temporary file in the same directory, renamed over
/// `path`; the temporary is removed on every failure. The one atomic write of the project: writeOutputFile uses it
/// for regular files (after following links), the kernel cache for its entries. `mode` (when >= 0) is the new
/// file's mode, set before a byte is written; else it is 0666 less the umask.
Status replaceFileAtomically(const std::string &path, std::string_view bytes, int mode = -1);

/// Whether a directory entry named `name` is one of those temporary files (a writer that died leaves one behind).
inline bool isTempFileName(std::string_view name) {
  return name.starts_with(".") && name.find(kTempFileInfix) != std::string_view::npos;
}

/// Reads a whole file the user named. Directories are refused; so are FIFOs, sockets and devices unless
/// `allowSpecial` (a FIFO with no writer would block, a device may never end). Files larger than `maxBytes` are
/// refused, so that `/dev/zero` or a huge file cannot exhaust memory.
StatusOr<std::string> readInputFile(const std::string &path, uint64_t maxBytes, bool allowSpecial = false);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_FILEIO_H
