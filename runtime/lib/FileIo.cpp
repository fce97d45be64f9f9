// FileIo.cpp — output files replaced atomically only where that is safe, inputs read without hanging.
#include "flashtile/runtime/FileIo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

using namespace flashtile;
namespace fs = std::filesystem;

namespace {

/// Linux's own limit on the links followed in one path lookup (ELOOP beyond it).
constexpr int kMaxSymlinkHops = 40;

std::string errnoText(int error) { return std::strerror(error); }

Status failure(const std::string &path, const std::string &what, int error) {
  return Status::error("cannot write '" + path + "': " + what + ": " + errnoText(error));
}

/// Writes all of `bytes` to `fd`, retrying short writes and EINTR. Returns 0 or the errno.
int writeAll(int fd, std::string_view bytes) {
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno;
    if (n == 0)
      return EIO;
    written += static_cast<size_t>(n);
  }
  return 0;
}

/// A device, FIFO or a file reached through a link that names no path (/proc/self/fd/N): opened and written
/// where it is. Only a regular file is truncated (a FIFO or a device cannot be).
Status writeInPlace(const std::string &path, std::string_view bytes, bool regular) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (regular ? O_TRUNC : 0));
  if (fd < 0)
    return failure(path, "open", errno);
  int error = writeAll(fd, bytes);
  if (::close(fd) != 0 && error == 0 && errno != EINTR)
    error = errno;
  return error ? failure(path, "write", error) : Status();
}

/// A name no other writer (thread or process) picks: pid, a process-wide counter and a random number.
std::string uniqueTempName(const fs::path &target) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = (uint64_t(std::random_device()()) << 32) ^ std::random_device()();
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "%ld-%llu-%016llx", static_cast<long>(::getpid()),
                static_cast<unsigned long long>(counter++), static_cast<unsigned long long>(salt));
  return "." + target.filename().string() + std::string(kTempFileInfix) + suffix;
}

/// The regular-file case: a fresh temporary beside `target`, renamed over it. `mode` (when >= 0) is the mode of
/// the file being replaced, kept for the new one.
Status replaceAtomically(const std::string &userPath, const fs::path &target, std::string_view bytes, int mode) {
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  fs::path temp = dir / uniqueTempName(target);
  // Created with no more than `mode` allows, so the bytes are never readable by more than the final file's are.
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode >= 0 ? mode_t(mode) & 0666 : 0666);
  if (fd < 0)
    return failure(userPath, "cannot create a temporary file in '" + dir.string() + "'", errno);
  int error = 0;
  if (mode >= 0 && ::fchmod(fd, static_cast<mode_t>(mode)) != 0)
    error = errno;
  if (!error)
    error = writeAll(fd, bytes);
  if (::close(fd) != 0 && !error && errno != EINTR)
    error = errno;
  const char *step = "write";
  if (!error && ::rename(temp.c_str(), target.c_str()) != 0) {
    error = errno;
    step = "rename";
  }
  if (error) {
    ::unlink(temp.c_str());
    return failure(userPath, std::string(step) + (target.string() != userPath ? " (to " + target.string() + ")" : ""),
                   error);
  }
  return Status();
}

/// The end of a chain of symbolic links.
struct Resolved {
  fs::path path;            // the first name that is not a link (it may not exist)
  bool throughProc = false; // a link on the way is one of /proc's (/dev/stdout -> /proc/self/fd/1)
};

/// Follows the chain of symbolic links from `path`.
StatusOr<Resolved> resolveLinks(const std::string &path) {
  Resolved resolved{path};
  fs::path &current = resolved.path;
  for (int hop = 0; hop < kMaxSymlinkHops; ++hop) {
    struct stat st;
    if (::lstat(current.c_str(), &st) != 0)
      return errno == ENOENT ? StatusOr<Resolved>(resolved) : failure(path, "lstat " + current.string(), errno);
    if (!S_ISLNK(st.st_mode))
      return resolved;
    resolved.throughProc |= current.string().starts_with("/proc/");
    std::error_code ec;
    fs::path next = fs::read_symlink(current, ec);
    if (ec)
      return failure(path, "readlink " + current.string(), ec.value());
    current = next.is_absolute() ? next : current.parent_path() / next;
  }
  return failure(path, "following links", ELOOP);
}

} // namespace

Status flashtile::replaceFileAtomically(const std::string &path, std::string_view bytes, int mode) {
  return replaceAtomically(path, path, bytes, mode);
}

Status flashtile::writeOutputFile(const std::string &path, std::string_view bytes) {
  if (path.empty())
    return Status::error("cannot write '': the output path is empty");
  struct stat linkStat;
  if (::lstat(path.c_str(), &linkStat) != 0) {
    if (errno != ENOENT)
      return failure(path, "lstat", errno);
    return replaceAtomically(path, path, bytes, -1);
  }
  if (S_ISREG(linkStat.st_mode))
    return replaceAtomically(path, path, bytes, linkStat.st_mode & 07777);

  struct stat st = linkStat;
  bool dangling = false;
  if (S_ISLNK(linkStat.st_mode) && ::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return failure(path, "stat", errno);
    dangling = true;
  }
  if (S_ISDIR(st.st_mode))
    return Status::error("cannot write '" + path + "': it is a directory; give a file name");
  if (S_ISBLK(st.st_mode))
    return Status::error("cannot write '" + path + "': it is a block device; refusing to overwrite it");
  if (!dangling && !S_ISREG(st.st_mode))
    return writeInPlace(path, bytes, /*regular=*/false); // a device, FIFO or socket: never replaced

  // A link to a regular file, or a dangling link: replace (or create) the file at the end of the chain.
  StatusOr<Resolved> target = resolveLinks(path);
  if (!target.ok())
    return target.status();
  struct stat targetStat;
  bool targetExists = ::lstat(target->path.c_str(), &targetStat) == 0;
  if (dangling)
    return targetExists ? Status::error("cannot write '" + path + "': its link target changed while writing")
                        : replaceAtomically(path, target->path, bytes, -1);
  // /proc's links stand for open files (/dev/stdout redirected to a file): replacing the file would leave the
  // process writing to the old one. They, and links whose text names no path of this file (a deleted file), are
  // written through in place.
  if (target->throughProc || !targetExists || targetStat.st_dev != st.st_dev || targetStat.st_ino != st.st_ino)
    return writeInPlace(path, bytes, /*regular=*/true);
  return replaceAtomically(path, target->path, bytes, targetStat.st_mode & 07777);
}

StatusOr<std::string> flashtile::readInputFile(const std::string &path, uint64_t maxBytes, bool allowSpecial) {
  auto bad = [&](const std::string &why) { return Status::error("cannot read '" + path + "': " + why); };
  if (path.empty())
    return Status::error("cannot read '': the path is empty");
  // O_NONBLOCK: opening a FIFO must not wait for a writer before we know what the path is.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return bad(errnoText(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return bad(errnoText(errno));
  if (S_ISDIR(st.st_mode))
    return bad("it is a directory; give a file");
  const bool regular = S_ISREG(st.st_mode);
  if (!regular && !allowSpecial)
    return bad("it is not a regular file (a FIFO, socket or device)");
  if (regular && uint64_t(st.st_size) > maxBytes)
    return bad("it has " + std::to_string(st.st_size) + " bytes, more than the " + std::to_string(maxBytes) +
               " accepted");
  // Blocking reads from here on: a FIFO's writer is waited for, as a shell pipeline would.
  if (int flags = ::fcntl(fd, F_GETFL); flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    return bad(errnoText(errno));
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return bad(errnoText(errno));
    if (n == 0)
      break;
    if (bytes.size() + uint64_t(n) > maxBytes)
      return bad("it has more than the " + std::to_string(maxBytes) + " bytes accepted");
    bytes.append(buffer, static_cast<size_t>(n));
  }
  return bytes;
}
