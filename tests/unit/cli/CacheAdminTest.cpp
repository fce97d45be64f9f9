// CacheAdminTest.cpp — the kernel cache's management functions: list, usage, clear and the LRU size cap.
#include "TestUtil.h"

#include "flashtile/runtime/KernelCache.h"

#include <gmock/gmock.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>

using namespace flashtile;
using testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

KernelCache::Options onDisk(const fs::path &dir, uint64_t maxBytes = 0) {
  KernelCache::Options options;
  options.dir = dir.string();
  options.maxBytes = maxBytes;
  return options;
}

std::string key(int i) { return "arch=sm_90a;variant=test" + std::to_string(i); }

void store(KernelCache &cache, int i) {
  auto result =
      cache.getOrCompile(key(i), [&]() -> StatusOr<CachedKernel> { return test::fakeKernel(std::to_string(i)); });
  ASSERT_TRUE(result.ok()) << result.status().message();
}

/// Sets a file's modification time to `secondsAgo` before now.
void age(const std::string &path, int secondsAgo) {
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= secondsAgo;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

TEST(CacheAdmin, AMissingDirectoryIsAnEmptyCache) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path() / "never-made"));
  auto entries = cache.listDiskEntries();
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  EXPECT_TRUE(entries->empty());
  auto usage = cache.diskUsage();
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->entries, 0u);
  auto removed = cache.clearDisk();
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 0u);
}

TEST(CacheAdmin, ListsEntriesWithTheirKeysLeastRecentlyUsedFirst) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  for (int i = 0; i < 3; ++i)
    store(cache, i);
  age(cache.entryPath(key(0)), 100);
  age(cache.entryPath(key(1)), 300);
  age(cache.entryPath(key(2)), 200);
  std::ofstream(dir.path() / "notes.txt") << "not the cache's";
  fs::create_symlink(cache.entryPath(key(0)), dir.path() / "link.ftk");

  auto entries = cache.listDiskEntries();
  ASSERT_TRUE(entries.ok()) << entries.status().message();
  ASSERT_EQ(entries->size(), 3u); // neither the text file nor the link
  EXPECT_EQ((*entries)[0].key, key(1));
  EXPECT_EQ((*entries)[1].key, key(2));
  EXPECT_EQ((*entries)[2].key, key(0));
  uint64_t total = 0;
  for (const auto &entry : *entries) {
    EXPECT_EQ(entry.bytes, fs::file_size(entry.path));
    total += entry.bytes;
  }
  auto usage = cache.diskUsage();
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->entries, 3u);
  EXPECT_EQ(usage->bytes, total);
}

TEST(CacheAdmin, AnUnreadableEntryIsListedWithoutAKey) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  std::ofstream(dir.path() / "0123456789abcdef.ftk") << "garbage";
  auto entries = cache.listDiskEntries();
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].key, "");
}

TEST(CacheAdmin, ALoadFromDiskCountsAsAUse) {
  test::TempDir dir;
  {
    KernelCache writer(onDisk(dir.path()));
    store(writer, 0);
  }
  std::string path = KernelCache(onDisk(dir.path())).entryPath(key(0));
  age(path, 3600);
  KernelCache reader(onDisk(dir.path()));
  store(reader, 0);
  ASSERT_EQ(reader.stats().diskHits, 1u);
  auto entries = reader.listDiskEntries();
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_GT((*entries)[0].lastUsed, std::time(nullptr) - 60);
}

TEST(CacheAdmin, TheSizeCapRemovesTheLeastRecentlyUsedEntries) {
  test::TempDir dir;
  uint64_t entryBytes = 0;
  {
    KernelCache probe(onDisk(dir.path()));
    store(probe, 0);
    entryBytes = fs::file_size(probe.entryPath(key(0)));
    ASSERT_TRUE(probe.clearDisk().ok());
  }
  // Room for two entries of this size (the fake kernels' sizes differ by a byte or so at most).
  KernelCache cache(onDisk(dir.path(), 2 * entryBytes + entryBytes / 2));
  store(cache, 1);
  age(cache.entryPath(key(1)), 300);
  store(cache, 2);
  age(cache.entryPath(key(2)), 200);
  store(cache, 3); // the newest: key(1), the least recently used, goes
  EXPECT_FALSE(fs::exists(cache.entryPath(key(1))));
  EXPECT_TRUE(fs::exists(cache.entryPath(key(2))));
  EXPECT_TRUE(fs::exists(cache.entryPath(key(3))));
  auto usage = cache.diskUsage();
  ASSERT_TRUE(usage.ok());
  EXPECT_LE(usage->bytes, cache.options().maxBytes);
}

TEST(CacheAdmin, EvictToFitZeroEmptiesTheCache) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  store(cache, 0);
  store(cache, 1);
  auto removed = cache.evictToFit(0);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 2u);
}

TEST(CacheAdmin, ClearRemovesEntriesAndTemporariesOnly) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  store(cache, 0);
  store(cache, 1);
  std::ofstream(dir.path() / ".tmp-123-0-abc") << "a dead writer's";
  std::ofstream(dir.path() / "notes.txt") << "not the cache's";
  auto usage = cache.diskUsage();
  ASSERT_TRUE(usage.ok());
  EXPECT_EQ(usage->tempFiles, 1u);
  auto removed = cache.clearDisk();
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, 3u);
  EXPECT_TRUE(fs::exists(dir.path() / "notes.txt"));
  EXPECT_EQ(cache.diskUsage()->entries, 0u);
}

TEST(CacheAdmin, TheSizeCapComesFromTheEnvironment) {
  test::ScopedEnv dirEnv("FLASHTILE_CACHE_DIR", "/tmp/flashtile-cap-test");
  {
    test::ScopedEnv cap("FLASHTILE_CACHE_MAX_MB", "5");
    KernelCache::Options options = KernelCache::optionsFromEnvironment();
    EXPECT_EQ(options.maxBytes, uint64_t(5) << 20);
    EXPECT_EQ(options.warning, "");
  }
  for (const char *bad : {"abc", "0", "-3", "5MB", "99999999999999999999"}) {
    test::ScopedEnv cap("FLASHTILE_CACHE_MAX_MB", bad);
    KernelCache::Options options = KernelCache::optionsFromEnvironment();
    EXPECT_EQ(options.maxBytes, 0u) << bad;
    EXPECT_THAT(options.warning, HasSubstr("FLASHTILE_CACHE_MAX_MB='" + std::string(bad) + "'")) << bad;
  }
  test::ScopedEnv unset("FLASHTILE_CACHE_MAX_MB", nullptr);
  EXPECT_EQ(KernelCache::optionsFromEnvironment().maxBytes, 0u);
}

} // namespace
