// RegularFile.cpp — open without blocking, fstat, then read: the order that keeps special files harmless.
#include "RegularFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

using namespace flashtile;

const char *flashtile::fileKind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFDIR:
    return "a directory";
  case S_IFIFO:
    return "a FIFO";
  case S_IFSOCK:
    return "a socket";
  case S_IFCHR:
    return "a character device";
  case S_IFBLK:
    return "a block device";
  case S_IFLNK:
    return "a symbolic link";
  case S_IFREG:
    return "a regular file";
  default:
    return "not a regular file";
  }
}

StatusOr<std::string> flashtile::readRegularFile(const std::string &path, size_t maxBytes, FileProblem *problem) {
  auto fail = [&](FileProblem kind, const std::string &why) {
    if (problem)
      *problem = kind;
    return Status::error(path + ": " + why);
  };
  if (problem)
    *problem = FileProblem::None;
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int error = errno;
    // ENOTDIR: a path component is a file, so nothing can exist at the path either.
    return fail(error == ENOENT || error == ENOTDIR ? FileProblem::Missing : FileProblem::Unreadable,
                std::string("cannot be opened: ") + std::strerror(error));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  struct stat info {};
  if (fstat(fd, &info) != 0)
    return fail(FileProblem::Unreadable, std::string("cannot be examined: ") + std::strerror(errno));
  if (!S_ISREG(info.st_mode))
    return fail(FileProblem::NotRegular, std::string("is ") + fileKind(info.st_mode) + ", not a regular file");
  if (info.st_size < 0 || static_cast<unsigned long long>(info.st_size) > maxBytes)
    return fail(FileProblem::TooLarge, "is " + std::to_string(info.st_size) + " bytes; at most " +
                                           std::to_string(maxBytes) + " are accepted");
  std::string bytes;
  bytes.resize(static_cast<size_t>(info.st_size));
  size_t done = 0;
  // Read until end of file: a file that grew since fstat may not pass maxBytes either.
  while (true) {
    if (done == bytes.size()) {
      if (bytes.size() >= maxBytes + 1)
        return fail(FileProblem::TooLarge, "grew past " + std::to_string(maxBytes) + " bytes while being read");
      bytes.resize(std::min(maxBytes + 1, bytes.size() + 4096));
    }
    ssize_t n = read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return fail(FileProblem::Unreadable, std::string("read error: ") + std::strerror(errno));
    if (n == 0)
      break;
    done += static_cast<size_t>(n);
  }
  if (done > maxBytes)
    return fail(FileProblem::TooLarge, "grew past " + std::to_string(maxBytes) + " bytes while being read");
  bytes.resize(done);
  return bytes;
}
