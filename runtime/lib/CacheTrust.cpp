// CacheTrust.cpp — StrictModes for the kernel cache (see CacheTrust.h).
#include "flashtile/runtime/CacheTrust.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <vector>

using namespace flashtile;
namespace fs = std::filesystem;

namespace {

int systemStat(const std::string &path, struct stat &st, bool follow) {
  return (follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) == 0 ? 0 : errno;
}

/// Whether `gid` is `uid`'s primary group and has no member but `uid` (Debian's user private groups).
bool systemPrivateGroup(gid_t gid, uid_t uid) {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? size_t(size) : 16384);
  struct passwd pw, *user = nullptr;
  if (::getpwuid_r(uid, &pw, buffer.data(), buffer.size(), &user) != 0 || !user || user->pw_gid != gid)
    return false;
  std::string name = user->pw_name;
  long groupSize = ::sysconf(_SC_GETGR_R_SIZE_MAX);
  std::vector<char> groupBuffer(groupSize > 0 ? size_t(groupSize) : 16384);
  struct group gr, *found = nullptr;
  while (::getgrgid_r(gid, &gr, groupBuffer.data(), groupBuffer.size(), &found) == ERANGE)
    groupBuffer.resize(groupBuffer.size() * 2);
  if (!found)
    return false;
  for (char **member = found->gr_mem; *member; ++member)
    if (name != *member)
      return false;
  return true;
}

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

/// Why `st` (of `path`) may not be trusted, or "" when it may. `sticky` accepts a sticky directory's write bits.
std::string whyUntrusted(const struct stat &st, uid_t uid, bool stickyAccepted, const CacheTrustProbe &probe) {
  if (st.st_uid != uid && st.st_uid != 0)
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " + std::to_string(uid) + ") or root";
  if (stickyAccepted && S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX))
    return "";
  if (st.st_mode & S_IWOTH)
    return "is writable by others (mode " + octal(st.st_mode) + ")";
  if (st.st_mode & S_IWGRP) {
    bool own = probe.privateGroup ? probe.privateGroup(st.st_gid, uid) : systemPrivateGroup(st.st_gid, uid);
    if (!own)
      return "is writable by its group, gid " + std::to_string(st.st_gid) + " (mode " + octal(st.st_mode) + ")";
  }
  return "";
}

/// Whether `path` is `root` or below it (both canonical).
bool isWithin(const fs::path &path, const fs::path &root) {
  auto [rootEnd, pathEnd] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return rootEnd == root.end();
}

} // namespace

bool flashtile::sharedCacheAccepted() {
  const char *value = std::getenv(kSharedCacheVariable);
  return value && *value && std::string_view(value) != "0";
}

Status flashtile::checkCacheFileTrusted(const std::string &file, const std::string &cacheRoot,
                                        const CacheTrustProbe &probe) {
  auto stat = [&](const std::string &path, struct stat &st, bool follow) {
    return probe.stat ? probe.stat(path, st, follow) : systemStat(path, st, follow);
  };
  const uid_t uid = probe.uid >= 0 ? uid_t(probe.uid) : ::geteuid();
  auto refuse = [&](const std::string &path, const std::string &why, bool directory) {
    std::string fix =
        directory ? "chmod go-w '" + path + "' (and chown it to yourself)" : "remove it (the cache rebuilds it)";
    return Status::error("refusing to load '" + file + "' from the cache: " + (directory ? "directory '" : "'") + path +
                         "' " + why + ", so another user could have planted it. Fix: " + fix +
                         ", or set FLASHTILE_CACHE_DIR to a directory of your own, or set " + kSharedCacheVariable +
                         "=1 if you trust everyone who can write there");
  };

  struct stat st {};
  if (int error = stat(file, st, /*follow=*/true)) {
    if (error == ENOENT || error == ENOTDIR)
      return Status();
    return Status::error("cannot examine '" + file + "' in the cache: " + std::strerror(error));
  }
  if (!S_ISREG(st.st_mode))
    return Status();
  if (std::string why = whyUntrusted(st, uid, /*stickyAccepted=*/false, probe); !why.empty())
    return refuse(file, why, /*directory=*/false);

  // The directories as they are, links resolved: a link is as safe as the directory that holds it, and that one
  // is checked in its place.
  std::error_code ec;
  fs::path dir = fs::canonical(fs::absolute(fs::path(file), ec).parent_path(), ec);
  if (ec)
    return Status::error("cannot resolve the directory of '" + file + "' in the cache: " + ec.message());
  fs::path root = fs::weakly_canonical(fs::absolute(fs::path(cacheRoot), ec), ec);
  if (ec)
    return Status::error("cannot resolve the cache directory '" + cacheRoot + "': " + ec.message());
  for (fs::path at = dir;; at = at.parent_path()) {
    if (int error = stat(at.string(), st, /*follow=*/false))
      return Status::error("cannot examine '" + at.string() + "' on the cache's path: " + std::strerror(error));
    if (std::string why = whyUntrusted(st, uid, /*stickyAccepted=*/!isWithin(at, root), probe); !why.empty())
      return refuse(at.string(), why, /*directory=*/true);
    if (at == at.root_path() || at.parent_path() == at)
      break;
  }
  return Status();
}

Status flashtile::createCacheDirectories(const std::string &dir, bool shared) {
  if (dir.empty())
    return Status::error("cannot create the cache directory: the path is empty");
  fs::path path(dir);
  fs::path partial;
  for (const fs::path &part : path) {
    partial /= part;
    if (part.empty() || part == partial.root_path())
      continue;
    if (::mkdir(partial.c_str(), shared ? 0777 : 0700) == 0 || errno == EEXIST)
      continue;
    return Status::error("cannot create " + partial.string() + ": " + std::strerror(errno));
  }
  // EEXIST says a name is there, not that it is a directory.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    return Status::error("cannot create " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return Status::error("cannot create " + dir + ": it exists and is not a directory");
  return Status();
}
