// CacheTrustTest.cpp — a cache others can write is refused before anything in it is loaded (CacheTrust.h):
// StrictModes on the file and its directories, a stat seam for owners the test cannot create, the opt-in.
#include "TestUtil.h"

#include "flashtile/runtime/CacheTrust.h"
#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/Log.h"

#include <gmock/gmock.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

using namespace flashtile;
using test::CapturedWarnings;
using testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

constexpr const char *kKey = "flashtile-fwd;arch=sm_90a;dtype=bf16;variant=causal;compiler=0.1.0+trust-test";
constexpr uid_t kOtherUid = 4242;

KernelCache::Options onDisk(const fs::path &dir) { return test::cacheOptions(dir.string(), true); }

/// A probe that reports `path` (and only it) as owned by another user.
CacheTrustProbe ownedByAnother(const fs::path &path) {
  CacheTrustProbe probe;
  std::string target = fs::weakly_canonical(path).string();
  probe.stat = [target](const std::string &at, struct stat &st, bool follow) {
    if ((follow ? ::stat(at.c_str(), &st) : ::lstat(at.c_str(), &st)) != 0)
      return errno;
    if (fs::weakly_canonical(at).string() == target)
      st.st_uid = kOtherUid;
    return 0;
  };
  return probe;
}

struct Counting {
  int calls = 0;
  KernelCache::Compile fn(const std::string &tag) {
    return [this, tag]() -> StatusOr<CachedKernel> {
      ++calls;
      return test::fakeKernel(tag);
    };
  }
};

/// Plants `tag`'s kernel as kKey's entry in `dir`, as a writer of the directory could.
void plant(const fs::path &dir, const std::string &tag) {
  KernelCache writer(onDisk(dir));
  Counting compiler;
  ASSERT_TRUE(writer.getOrCompile(kKey, compiler.fn(tag)).ok());
  ASSERT_TRUE(fs::exists(writer.entryPath(kKey)));
}

/// Asks a fresh cache with `options` for kKey and expects the planted kernel to be refused: compiled anew, one
/// warning that names `culprit` and the fixes.
void expectRefused(KernelCache::Options options, const fs::path &culprit, const std::string &why) {
  CapturedWarnings warnings;
  KernelCache cache(std::move(options));
  Counting compiler;
  StatusOr<std::shared_ptr<const CachedKernel>> kernel = cache.getOrCompile(kKey, compiler.fn("mine"));
  ASSERT_TRUE(kernel.ok()) << kernel.status().message();
  EXPECT_EQ((*kernel)->cubin, test::fakeKernel("mine").cubin) << "the planted kernel was loaded";
  EXPECT_EQ(compiler.calls, 1);
  EXPECT_EQ(cache.stats().diskHits, 0u);
  EXPECT_EQ(cache.stats().rejectedEntries, 1u);
  std::vector<std::string> seen = warnings.all();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_THAT(seen[0], HasSubstr("'" + culprit.string() + "' " + why));
  EXPECT_THAT(seen[0], HasSubstr("FLASHTILE_CACHE_DIR"));
  EXPECT_THAT(seen[0], HasSubstr("FLASHTILE_SHARED_CACHE=1"));
}

fs::perms modeOf(const fs::path &path) { return fs::status(path).permissions() & fs::perms::mask; }

} // namespace

TEST(CacheTrust, AWorldWritableCacheDirectoryIsRefused) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "cache";
  plant(cacheDir, "planted");
  fs::permissions(cacheDir, fs::perms::all);
  expectRefused(onDisk(cacheDir), cacheDir, "is writable by others (mode 0777)");
}

TEST(CacheTrust, AGroupWritableCacheDirectoryIsRefusedUnlessTheGroupIsTheCallersOwn) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "cache";
  plant(cacheDir, "planted");
  fs::permissions(cacheDir, fs::perms::owner_all | fs::perms::group_all);
  KernelCache::Options options = onDisk(cacheDir);
  options.trustProbe.privateGroup = [](gid_t, uid_t) { return false; };
  expectRefused(options, cacheDir, "is writable by its group");

  KernelCache::Options own = onDisk(cacheDir);
  own.trustProbe.privateGroup = [](gid_t, uid_t) { return true; }; // Debian's user private group
  KernelCache cache(own);
  Counting compiler;
  ASSERT_TRUE(cache.getOrCompile(kKey, compiler.fn("mine")).ok());
  EXPECT_EQ(compiler.calls, 0);
  EXPECT_EQ(cache.stats().diskHits, 1u);
}

TEST(CacheTrust, AnEntryOwnedByAnotherUserIsRefused) {
  test::TempDir dir;
  plant(dir.path(), "planted");
  KernelCache::Options options = onDisk(dir.path());
  fs::path entry = KernelCache(options).entryPath(kKey);
  options.trustProbe = ownedByAnother(entry);
  expectRefused(options, entry, "is owned by uid 4242");
}

TEST(CacheTrust, ACacheDirectoryOwnedByAnotherUserIsRefused) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "cache";
  plant(cacheDir, "planted");
  KernelCache::Options options = onDisk(cacheDir);
  options.trustProbe = ownedByAnother(cacheDir);
  expectRefused(options, cacheDir, "is owned by uid 4242");
}

TEST(CacheTrust, AWritableDirectoryAboveTheCacheIsRefusedUnlessSticky) {
  test::TempDir dir;
  fs::path above = dir.path() / "team";
  fs::path cacheDir = above / "cache";
  plant(cacheDir, "planted");
  fs::permissions(above, fs::perms::all); // others could rename "cache" away and put theirs in its place
  expectRefused(onDisk(cacheDir), above, "is writable by others (mode 0777)");

  fs::permissions(above, fs::perms::all | fs::perms::sticky_bit); // as /tmp: they cannot
  KernelCache cache(onDisk(cacheDir));
  Counting compiler;
  ASSERT_TRUE(cache.getOrCompile(kKey, compiler.fn("mine")).ok());
  EXPECT_EQ(compiler.calls, 0);
  EXPECT_EQ(cache.stats().diskHits, 1u);
}

TEST(CacheTrust, AStickyCacheDirectoryIsStillRefused) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "cache";
  plant(cacheDir, "planted");
  fs::permissions(cacheDir, fs::perms::all | fs::perms::sticky_bit); // others may still add names in it
  expectRefused(onDisk(cacheDir), cacheDir, "is writable by others (mode 1777)");
}

TEST(CacheTrust, NotesAreCheckedToo) {
  test::TempDir dir;
  {
    KernelCache writer(onDisk(dir.path()));
    writer.writeNote("shape-note", "short");
    ASSERT_EQ(writer.readNote("shape-note"), std::optional<std::string>("short"));
  }
  fs::permissions(dir.path(), fs::perms::all);
  CapturedWarnings warnings;
  KernelCache reader(onDisk(dir.path()));
  EXPECT_EQ(reader.readNote("shape-note"), std::nullopt);
  EXPECT_EQ(reader.stats().rejectedEntries, 1u);
  ASSERT_EQ(warnings.all().size(), 1u);
  EXPECT_THAT(warnings.all()[0], HasSubstr("is writable by others"));
}

TEST(CacheTrust, TheSharedCacheOptInLoadsFromAWritableDirectory) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "cache";
  plant(cacheDir, "planted");
  fs::permissions(cacheDir, fs::perms::all);
  {
    test::ScopedEnv cacheEnv("FLASHTILE_CACHE_DIR", cacheDir.c_str());
    test::ScopedEnv disableEnv("FLASHTILE_DISABLE_CACHE", nullptr);
    test::ScopedEnv shared("FLASHTILE_SHARED_CACHE", "1");
    KernelCache::Options options = KernelCache::optionsFromEnvironment();
    ASSERT_TRUE(options.shared);
    KernelCache cache(options);
    Counting compiler;
    StatusOr<std::shared_ptr<const CachedKernel>> kernel = cache.getOrCompile(kKey, compiler.fn("mine"));
    ASSERT_TRUE(kernel.ok());
    EXPECT_EQ((*kernel)->cubin, test::fakeKernel("planted").cubin) << "the caller accepted the shared cache";
    EXPECT_EQ(compiler.calls, 0);
  }
  for (const char *off : {"", "0"}) {
    test::ScopedEnv shared("FLASHTILE_SHARED_CACHE", off);
    EXPECT_FALSE(KernelCache::optionsFromEnvironment().shared) << "'" << off << "'";
  }
}

TEST(CacheTrust, DirectoriesAreCreated0700AndEntries0600) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "home" / ".cache" / "flashtile";
  plant(cacheDir, "a");
  for (const fs::path &created : {dir.path() / "home", dir.path() / "home" / ".cache", cacheDir})
    EXPECT_EQ(modeOf(created), fs::perms::owner_all) << created;
  KernelCache cache(onDisk(cacheDir));
  EXPECT_EQ(modeOf(cache.entryPath(kKey)), fs::perms::owner_read | fs::perms::owner_write);
  cache.writeNote("note", "value");
  for (const fs::directory_entry &file : fs::directory_iterator(cacheDir))
    EXPECT_EQ(modeOf(file.path()), fs::perms::owner_read | fs::perms::owner_write) << file.path();
}

TEST(CacheTrust, ASharedCacheIsCreatedWithTheUmasksModes) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "shared";
  mode_t old = ::umask(002);
  {
    KernelCache::Options options = onDisk(cacheDir);
    options.shared = true;
    KernelCache cache(options);
    Counting compiler;
    ASSERT_TRUE(cache.getOrCompile(kKey, compiler.fn("a")).ok());
    EXPECT_EQ(modeOf(cacheDir), fs::perms::all & ~fs::perms::others_write);
    EXPECT_EQ(modeOf(cache.entryPath(kKey)), (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                              fs::perms::group_write | fs::perms::others_read));
  }
  ::umask(old);
}

TEST(CacheTrust, TheDefaultHomeCacheKeepsWorking) {
  test::TempDir home; // 0700, under the sticky temp directory
  test::ScopedEnv homeEnv("HOME", home.path().c_str());
  test::ScopedEnv cacheEnv("FLASHTILE_CACHE_DIR", nullptr);
  test::ScopedEnv disableEnv("FLASHTILE_DISABLE_CACHE", nullptr);
  test::ScopedEnv sharedEnv("FLASHTILE_SHARED_CACHE", nullptr);
  CapturedWarnings warnings;
  {
    KernelCache writer;
    Counting compiler;
    ASSERT_TRUE(writer.getOrCompile(kKey, compiler.fn("a")).ok());
    EXPECT_EQ(compiler.calls, 1);
  }
  KernelCache reader;
  EXPECT_EQ(reader.options().dir, (home.path() / ".cache" / "flashtile").string());
  Counting compiler;
  ASSERT_TRUE(reader.getOrCompile(kKey, compiler.fn("b")).ok());
  EXPECT_EQ(compiler.calls, 0);
  EXPECT_EQ(reader.stats().diskHits, 1u);
  EXPECT_TRUE(warnings.all().empty());
}

TEST(CacheTrust, TheCheckWalksUpToTheRoot) {
  test::TempDir dir;
  fs::path file = dir.path() / "entry.ftk";
  { std::ofstream(file) << "x"; }
  ::chmod(file.c_str(), 0600);
  EXPECT_TRUE(checkCacheFileTrusted(file.string(), dir.path().string()).ok());

  std::vector<std::string> looked;
  CacheTrustProbe probe;
  probe.stat = [&](const std::string &at, struct stat &st, bool follow) {
    looked.push_back(at);
    return (follow ? ::stat(at.c_str(), &st) : ::lstat(at.c_str(), &st)) == 0 ? 0 : errno;
  };
  ASSERT_TRUE(checkCacheFileTrusted(file.string(), dir.path().string(), probe).ok());
  ASSERT_FALSE(looked.empty());
  EXPECT_EQ(looked.back(), "/");

  ::chmod(file.c_str(), 0622);
  Status refused = checkCacheFileTrusted(file.string(), dir.path().string());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("'" + file.string() + "' is writable by others (mode 0622)"));
  EXPECT_THAT(refused.message(), HasSubstr("remove it"));

  EXPECT_TRUE(checkCacheFileTrusted((dir.path() / "missing.ftk").string(), dir.path().string()).ok())
      << "nothing to load";
}
