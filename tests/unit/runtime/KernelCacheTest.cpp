// KernelCacheTest.cpp — memory and disk layers, corruption handling, single-flight, environment settings.
#include "TestUtil.h"

#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/Log.h"

#include <gmock/gmock.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <latch>
#include <mutex>
#include <optional>
#include <thread>

using namespace flashtile;
using test::CapturedWarnings;
using testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

constexpr const char *kKey = "flashtile-fwd;arch=sm_90a;dtype=bf16;variant=causal;compiler=0.1.0+test";

/// A compile function that counts its calls and returns fakeKernel(tag).
struct CountingCompiler {
  std::string tag = "a";
  std::atomic<int> calls{0};
  KernelCache::Compile fn() {
    return [this]() -> StatusOr<CachedKernel> {
      ++calls;
      return test::fakeKernel(tag);
    };
  }
};

KernelCache::Options onDisk(const fs::path &dir) { return test::cacheOptions(dir.string(), true); }

void expectKernel(const StatusOr<std::shared_ptr<const CachedKernel>> &result, const std::string &tag) {
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ((*result)->cubin, test::fakeKernel(tag).cubin);
  EXPECT_EQ((*result)->info.serialize(), test::fakeKernel(tag).info.serialize());
}

std::string readBytes(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void writeBytes(const fs::path &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

/// Fills `dir` with kKey's entry, made by a separate cache instance.
void populate(const fs::path &dir) {
  KernelCache cache(onDisk(dir));
  CountingCompiler compiler;
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  ASSERT_TRUE(fs::exists(cache.entryPath(kKey)));
}

/// Asks a fresh cache on `dir` for kKey and expects the damaged entry to be rejected and rebuilt.
void expectRebuilt(const fs::path &dir) {
  KernelCache cache(onDisk(dir));
  CountingCompiler compiler;
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  EXPECT_EQ(compiler.calls, 1);
  EXPECT_EQ(cache.stats().rejectedEntries, 1u);
  EXPECT_EQ(cache.stats().diskHits, 0u);

  KernelCache reader(onDisk(dir));
  CountingCompiler unused;
  expectKernel(reader.getOrCompile(kKey, unused.fn()), "a");
  EXPECT_EQ(unused.calls, 0) << "the rebuilt entry should have been written back";
  EXPECT_EQ(reader.stats().diskHits, 1u);
}

TEST(KernelCache, MemoryHit) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  CountingCompiler compiler;
  StatusOr<std::shared_ptr<const CachedKernel>> first = cache.getOrCompile(kKey, compiler.fn());
  StatusOr<std::shared_ptr<const CachedKernel>> second = cache.getOrCompile(kKey, compiler.fn());
  expectKernel(second, "a");
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(compiler.calls, 1);
  KernelCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.memoryHits, 1u);
  EXPECT_EQ(stats.diskHits, 0u);
}

TEST(KernelCache, DiskHitFromSecondInstance) {
  test::TempDir dir;
  populate(dir.path());
  KernelCache cache(onDisk(dir.path()));
  CountingCompiler compiler;
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  EXPECT_EQ(compiler.calls, 0);
  EXPECT_EQ(cache.stats().diskHits, 1u);
  EXPECT_EQ(cache.stats().misses, 0u);
}

TEST(KernelCache, EntryFileIsNamedByHashAndLeavesNoTempFiles) {
  test::TempDir dir;
  populate(dir.path());
  std::vector<std::string> names;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir.path()))
    names.push_back(entry.path().filename().string());
  ASSERT_EQ(names.size(), 1u);
  EXPECT_THAT(names[0], testing::MatchesRegex("[0-9a-f]{16}\\.ftk"));
}

TEST(KernelCache, NotesAreReadBackCheckedAndListedWithTheEntries) {
  test::TempDir dir;
  {
    KernelCache cache(onDisk(dir.path()));
    EXPECT_FALSE(cache.readNote("class of x").has_value());
    cache.writeNote("class of x", "short");
    cache.writeNote("class of y", "default");
  }
  KernelCache fresh(onDisk(dir.path()));
  EXPECT_EQ(fresh.readNote("class of x"), std::optional<std::string>("short"));
  EXPECT_EQ(fresh.readNote("class of y"), std::optional<std::string>("default"));
  EXPECT_EQ(fresh.stats().rejectedEntries, 0u);
  StatusOr<std::vector<KernelCache::DiskEntry>> listed = fresh.listDiskEntries();
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  std::vector<std::string> keys;
  for (const KernelCache::DiskEntry &entry : *listed)
    keys.push_back(entry.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"class of x", "class of y"}));

  // A damaged note reads as none (the answer is asked again), and is counted.
  std::vector<fs::path> notes;
  for (const fs::directory_entry &file : fs::directory_iterator(dir.path()))
    notes.push_back(file.path());
  ASSERT_EQ(notes.size(), 2u);
  for (const fs::path &note : notes) {
    std::string bytes;
    {
      std::ifstream in(note, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[bytes.size() - 10] ^= 1;
    std::ofstream(note, std::ios::binary | std::ios::trunc) << bytes;
  }
  EXPECT_FALSE(fresh.readNote("class of x").has_value());
  EXPECT_EQ(fresh.stats().rejectedEntries, 1u);
  StatusOr<uint64_t> cleared = fresh.clearDisk();
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, 2u);

  KernelCache memoryOnly(test::cacheOptions(dir.path().string(), false));
  memoryOnly.writeNote("class of x", "short");
  EXPECT_FALSE(memoryOnly.readNote("class of x").has_value());
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(KernelCache, TruncatedEntryIsRebuilt) {
  test::TempDir dir;
  populate(dir.path());
  fs::path entry = KernelCache(onDisk(dir.path())).entryPath(kKey);
  fs::resize_file(entry, fs::file_size(entry) / 2);
  expectRebuilt(dir.path());
}

TEST(KernelCache, EmptyEntryIsRebuilt) {
  test::TempDir dir;
  populate(dir.path());
  fs::resize_file(KernelCache(onDisk(dir.path())).entryPath(kKey), 0);
  expectRebuilt(dir.path());
}

TEST(KernelCache, FlippedByteIsRebuilt) {
  test::TempDir dir;
  populate(dir.path());
  fs::path entry = KernelCache(onDisk(dir.path())).entryPath(kKey);
  std::string bytes = readBytes(entry);
  // A byte inside the cubin payload: only the checksum can notice it.
  bytes[bytes.size() - 12] ^= 0x01;
  writeBytes(entry, bytes);
  expectRebuilt(dir.path());
}

TEST(KernelCache, CorruptLengthIsRebuilt) {
  test::TempDir dir;
  populate(dir.path());
  fs::path entry = KernelCache(onDisk(dir.path())).entryPath(kKey);
  std::string bytes = readBytes(entry);
  bytes[12 + 7] = '\xff'; // top byte of the key length: a huge length must not be trusted
  writeBytes(entry, bytes);
  expectRebuilt(dir.path());
}

TEST(KernelCache, EntryOfAnotherKeyIsRejected) {
  test::TempDir dir;
  populate(dir.path());
  const std::string otherKey = std::string(kKey) + ";other";
  KernelCache cache(onDisk(dir.path()));
  // Simulate a hash collision: kKey's intact entry sits where otherKey's belongs.
  fs::copy_file(cache.entryPath(kKey), cache.entryPath(otherKey));
  CountingCompiler compiler;
  compiler.tag = "other";
  expectKernel(cache.getOrCompile(otherKey, compiler.fn()), "other");
  EXPECT_EQ(compiler.calls, 1);
  EXPECT_EQ(cache.stats().rejectedEntries, 1u);
}

TEST(KernelCache, ConcurrentCallersCompileOnce) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  constexpr int kThreads = 8;
  std::atomic<int> calls{0};
  std::latch start(kThreads);
  KernelCache::Compile slowCompile = [&]() -> StatusOr<CachedKernel> {
    ++calls;
    // Long enough that every other thread arrives while this compile is in flight.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return test::fakeKernel();
  };
  std::vector<const CachedKernel *> results(kThreads, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      StatusOr<std::shared_ptr<const CachedKernel>> result = cache.getOrCompile(kKey, slowCompile);
      if (result.ok())
        results[i] = result->get();
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(calls, 1);
  for (const CachedKernel *result : results) {
    ASSERT_NE(result, nullptr);
    EXPECT_EQ(result, results[0]);
  }
  EXPECT_EQ(cache.stats().misses, 1u);
  EXPECT_EQ(cache.stats().memoryHits, static_cast<uint64_t>(kThreads - 1));
}

TEST(KernelCache, FailuresAreNotCached) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  int calls = 0;
  KernelCache::Compile flaky = [&]() -> StatusOr<CachedKernel> {
    if (++calls == 1)
      return Status::error("transient failure");
    return test::fakeKernel();
  };
  StatusOr<std::shared_ptr<const CachedKernel>> first = cache.getOrCompile(kKey, flaky);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().message(), "transient failure");
  expectKernel(cache.getOrCompile(kKey, flaky), "a");
  EXPECT_EQ(calls, 2);
}

TEST(KernelCache, InvalidCompilerOutputIsRejected) {
  test::TempDir dir;
  KernelCache cache(onDisk(dir.path()));
  StatusOr<std::shared_ptr<const CachedKernel>> badInfo = cache.getOrCompile(kKey, []() -> StatusOr<CachedKernel> {
    CachedKernel kernel = test::fakeKernel();
    kernel.info.plan.launches[0].threads = 0;
    return kernel;
  });
  ASSERT_FALSE(badInfo.ok());
  EXPECT_THAT(badInfo.status().message(), HasSubstr("invalid kernel metadata"));
  EXPECT_THAT(badInfo.status().message(), HasSubstr("threads"));

  StatusOr<std::shared_ptr<const CachedKernel>> noCubin = cache.getOrCompile(kKey, []() -> StatusOr<CachedKernel> {
    CachedKernel kernel = test::fakeKernel();
    kernel.cubin.clear();
    return kernel;
  });
  ASSERT_FALSE(noCubin.ok());
  EXPECT_THAT(noCubin.status().message(), HasSubstr("empty cubin"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(KernelCache, ThrowingCompilerBecomesAnError) {
  KernelCache cache(test::cacheOptions("", false));
  StatusOr<std::shared_ptr<const CachedKernel>> result =
      cache.getOrCompile(kKey, []() -> StatusOr<CachedKernel> { throw std::runtime_error("mlir exploded"); });
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("mlir exploded"));
}

TEST(KernelCache, EmptyKeyIsAnError) {
  KernelCache cache(test::cacheOptions("", false));
  CountingCompiler compiler;
  StatusOr<std::shared_ptr<const CachedKernel>> result = cache.getOrCompile("", compiler.fn());
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("key"));
  EXPECT_EQ(compiler.calls, 0);
}

TEST(KernelCache, UnwritableDirectoryStillReturnsTheKernel) {
  test::TempDir dir;
  fs::path file = dir.path() / "not-a-directory";
  writeBytes(file, "x");
  KernelCache cache(onDisk(file / "cache"));
  CountingCompiler compiler;
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  EXPECT_EQ(cache.stats().diskWriteFailures, 1u);
}

TEST(KernelCache, DisableCacheEnvironmentLeavesNoFiles) {
  test::TempDir dir;
  fs::path cacheDir = dir.path() / "cache";
  test::ScopedEnv cacheDirEnv("FLASHTILE_CACHE_DIR", cacheDir.c_str());
  test::ScopedEnv disableEnv("FLASHTILE_DISABLE_CACHE", "1");
  KernelCache cache;
  EXPECT_FALSE(cache.options().diskEnabled);
  CountingCompiler compiler;
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  EXPECT_EQ(compiler.calls, 1) << "the memory layer still works";
  EXPECT_FALSE(fs::exists(cacheDir));
}

TEST(KernelCache, EnvironmentSelectsDirectory) {
  test::ScopedEnv noDisable("FLASHTILE_DISABLE_CACHE", nullptr);
  {
    test::ScopedEnv cacheDir("FLASHTILE_CACHE_DIR", "/some/cache");
    KernelCache::Options options = KernelCache::optionsFromEnvironment();
    EXPECT_EQ(options.dir, "/some/cache");
    EXPECT_TRUE(options.diskEnabled);
  }
  test::ScopedEnv noCacheDir("FLASHTILE_CACHE_DIR", nullptr);
  {
    test::ScopedEnv home("HOME", "/home/someone");
    KernelCache::Options options = KernelCache::optionsFromEnvironment();
    EXPECT_EQ(options.dir, "/home/someone/.cache/flashtile");
    EXPECT_TRUE(options.diskEnabled);
    test::ScopedEnv notDisabled("FLASHTILE_DISABLE_CACHE", "0");
    EXPECT_TRUE(KernelCache::optionsFromEnvironment().diskEnabled);
  }
  test::ScopedEnv noHome("HOME", nullptr);
  EXPECT_FALSE(KernelCache::optionsFromEnvironment().diskEnabled);
}

TEST(KernelCache, EntriesThatAreNotRegularFilesAreReplacedWithoutBeingRead) {
  struct Case {
    std::string name;
    std::function<void(const fs::path &)> make;
    std::string kind;
  };
  const std::vector<Case> cases = {
      {"empty directory", [](const fs::path &p) { fs::create_directory(p); }, "is a directory"},
      {"FIFO", [](const fs::path &p) { ASSERT_EQ(mkfifo(p.c_str(), 0644), 0); }, "is a FIFO"},
      {"link to /dev/zero", [](const fs::path &p) { fs::create_symlink("/dev/zero", p); }, "is a character device"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    test::TempDir dir;
    CapturedWarnings warnings;
    {
      KernelCache probe(onDisk(dir.path()));
      c.make(probe.entryPath(kKey));
    }
    expectRebuilt(dir.path());
    std::vector<std::string> seen = warnings.all();
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_THAT(seen[0], HasSubstr(c.kind + ", not a regular file"));
    EXPECT_THAT(seen[0], HasSubstr("the entry replaced"));
    KernelCache check(onDisk(dir.path()));
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(check.entryPath(kKey))));
  }
}

TEST(KernelCache, ADirectoryWithFilesInPlaceOfAnEntryIsLeftAndReported) {
  test::TempDir dir;
  CapturedWarnings warnings;
  KernelCache cache(onDisk(dir.path()));
  fs::create_directories(fs::path(cache.entryPath(kKey)) / "keep-me");
  CountingCompiler compiler;
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  EXPECT_TRUE(fs::exists(fs::path(cache.entryPath(kKey)) / "keep-me"));
  EXPECT_EQ(cache.stats().diskWriteFailures, 1u);
  EXPECT_THAT(cache.lastDiskWriteError(), HasSubstr("is a directory that cannot be removed"));
  std::vector<std::string> seen = warnings.all();
  ASSERT_EQ(seen.size(), 2u); // the unreadable entry, then the failed write
  EXPECT_THAT(seen[1], HasSubstr(cache.entryPath(kKey)));
}

TEST(KernelCache, StaleTemporaryFilesAreRemoved) {
  test::TempDir dir;
  fs::path stale = dir.path() / ".tmp-12345-0-00000000deadbeef";
  fs::path fresh = dir.path() / ".tmp-12346-0-00000000feedface";
  fs::path other = dir.path() / "notes.txt";
  for (const fs::path &p : {stale, fresh, other})
    writeBytes(p, "partial");
  auto hourAgo = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(stale, hourAgo);
  fs::last_write_time(other, hourAgo);
  KernelCache cache(onDisk(dir.path()));
  CountingCompiler compiler;
  expectKernel(cache.getOrCompile(kKey, compiler.fn()), "a");
  EXPECT_FALSE(fs::exists(stale)) << "a writer killed before its rename left it";
  EXPECT_TRUE(fs::exists(fresh)) << "another process may be writing it now";
  EXPECT_TRUE(fs::exists(other));
}

TEST(KernelCache, PersistentWriteFailuresAreReportedOnce) {
  test::TempDir dir;
  fs::path file = dir.path() / "not-a-directory";
  writeBytes(file, "x");
  CapturedWarnings warnings;
  KernelCache cache(onDisk(file / "cache"));
  EXPECT_EQ(cache.lastDiskWriteError(), "");
  CountingCompiler compiler;
  for (const char *key : {"key-1", "key-2", "key-3"})
    ASSERT_TRUE(cache.getOrCompile(key, compiler.fn()).ok());
  EXPECT_EQ(cache.stats().diskWriteFailures, 3u);
  std::vector<std::string> seen = warnings.all();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_THAT(seen[0], HasSubstr("kernel cache: cannot create " + file.string()));
  EXPECT_THAT(seen[0], HasSubstr("FLASHTILE_CACHE_DIR"));
  EXPECT_THAT(cache.lastDiskWriteError(), HasSubstr("cannot create"));
  Status writable = cache.checkDiskWritable();
  ASSERT_FALSE(writable.ok());
  EXPECT_THAT(writable.message(), HasSubstr("kernel cache " + (file / "cache").string()));

  KernelCache good(onDisk(dir.path() / "cache"));
  EXPECT_TRUE(good.checkDiskWritable().ok()) << good.checkDiskWritable().message();
  EXPECT_TRUE(fs::is_empty(dir.path() / "cache")) << "the probe leaves nothing behind";
  KernelCache off(test::cacheOptions("", false));
  EXPECT_THAT(off.checkDiskWritable().message(), HasSubstr("the disk cache is off"));
}

TEST(KernelCache, AnUnreachableCacheIsAnErrorNotAnEmptyOne) {
  test::TempDir dir;
  fs::path loop = dir.path() / "loop";
  fs::create_symlink("loop", loop);
  fs::path file = dir.path() / "file";
  writeBytes(file, "x");
  std::vector<std::pair<fs::path, std::string>> cases = {{loop, "Too many levels of symbolic links"},
                                                         {file / "cache", "Not a directory"}};
  fs::path locked = dir.path() / "locked";
  if (::geteuid() != 0) { // root enters any directory
    fs::create_directories(locked / "cache");
    fs::permissions(locked, fs::perms::none);
    cases.push_back({locked / "cache", "Permission denied"});
  }
  for (const auto &[cacheDir, why] : cases) {
    SCOPED_TRACE(cacheDir.string());
    KernelCache cache(onDisk(cacheDir));
    std::string expected = "cannot reach the kernel cache '" + cacheDir.string() + "': " + why;
    StatusOr<std::vector<KernelCache::DiskEntry>> listed = cache.listDiskEntries();
    ASSERT_FALSE(listed.ok());
    EXPECT_THAT(listed.status().message(), HasSubstr(expected));
    EXPECT_THAT(listed.status().message(), HasSubstr("FLASHTILE_CACHE_DIR"));
    StatusOr<KernelCache::DiskUsage> usage = cache.diskUsage();
    ASSERT_FALSE(usage.ok());
    EXPECT_THAT(usage.status().message(), HasSubstr(expected));
    StatusOr<uint64_t> cleared = cache.clearDisk();
    ASSERT_FALSE(cleared.ok());
    EXPECT_THAT(cleared.status().message(), HasSubstr(expected));
  }
  std::error_code ignored; // absent where root skipped it
  fs::permissions(locked, fs::perms::owner_all, fs::perm_options::replace, ignored);

  KernelCache missing(onDisk(dir.path() / "none"));
  ASSERT_TRUE(missing.clearDisk().ok()) << "a missing directory is an empty cache";
  EXPECT_EQ(*missing.clearDisk(), 0u);
}

TEST(Log, DefaultGoesToStderrUnlessSilenced) {
  setLogHandler({});
  testing::internal::CaptureStderr();
  logWarning("first");
  {
    test::ScopedEnv quiet("FLASHTILE_LOG", "off");
    logWarning("second");
  }
  std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(printed, "flashtile: warning: first\n");
}

} // namespace
