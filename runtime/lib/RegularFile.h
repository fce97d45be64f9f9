// RegularFile.h — reading kernel files (manifests, cubins, cache entries) without trusting what is at the path.
//
// A path may name a directory, a FIFO (whose open or read would block forever), a device (/dev/zero never ends) or
// a file far larger than any kernel. These are refused with a reason before a byte is read.
#ifndef FLASHTILE_RUNTIME_LIB_REGULARFILE_H
#define FLASHTILE_RUNTIME_LIB_REGULARFILE_H

#include "flashtile/runtime/Status.h"

#include <cstddef>
#include <string>

namespace flashtile {

/// What readRegularFile found when it returned an error.
enum class FileProblem { None, Missing, NotRegular, TooLarge, Unreadable };

/// The whole content of `path` when it is a regular file (symlinks are followed) of at most `maxBytes`. The file is
/// opened with O_NONBLOCK and checked with fstat before any read, so a FIFO or device never blocks the caller. The
/// error names the path and the reason ("is a directory, not a regular file", "cannot be opened: Permission
/// denied", ...); `problem` (optional) says which kind of failure it was.
StatusOr<std::string> readRegularFile(const std::string &path, size_t maxBytes, FileProblem *problem = nullptr);

/// "a directory", "a FIFO", "a socket", "a character device", "a block device", "a symbolic link" or "a regular
/// file", for messages about a file of this st_mode.
const char *fileKind(unsigned mode);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_LIB_REGULARFILE_H
