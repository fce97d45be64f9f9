// FileIoTest.cpp — output files: atomic replace of regular files only, links written through, special files written
// in place and never replaced, unique temporaries removed on every failure; inputs that are not files refused.
#include "TestUtil.h"

#include "flashtile/runtime/FileIo.h"

#include <gmock/gmock.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

using namespace flashtile;
using testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void put(const fs::path &path, const std::string &text) { std::ofstream(path, std::ios::binary) << text; }

/// Files in `dir` whose names say they are writeOutputFile's temporaries.
int tempFiles(const fs::path &dir) {
  int count = 0;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir))
    count += entry.path().filename().string().find(kTempFileInfix) != std::string::npos;
  return count;
}

TEST(WriteOutputFile, CreatesAMissingFileAndLeavesNoTemporary) {
  test::TempDir dir;
  fs::path out = dir.path() / "attn.cu";
  ASSERT_TRUE(writeOutputFile(out.string(), "kernel").ok());
  EXPECT_EQ(slurp(out), "kernel");
  EXPECT_EQ(tempFiles(dir.path()), 0);
}

TEST(WriteOutputFile, ReplacesARegularFileKeepingItsMode) {
  test::TempDir dir;
  fs::path out = dir.path() / "attn.cubin";
  put(out, "an older and longer kernel");
  ASSERT_EQ(::chmod(out.c_str(), 0640), 0);
  ASSERT_TRUE(writeOutputFile(out.string(), "new").ok());
  EXPECT_EQ(slurp(out), "new");
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(tempFiles(dir.path()), 0);
}

TEST(WriteOutputFile, WritesThroughAChainOfRelativeLinks) {
  test::TempDir dir;
  fs::create_directory(dir.path() / "real");
  put(dir.path() / "real" / "target.cu", "old");
  fs::create_symlink("real/target.cu", dir.path() / "middle");
  fs::create_symlink("middle", dir.path() / "link");
  ASSERT_TRUE(writeOutputFile((dir.path() / "link").string(), "through").ok());
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link"));
  EXPECT_TRUE(fs::is_symlink(dir.path() / "middle"));
  EXPECT_EQ(slurp(dir.path() / "real" / "target.cu"), "through");
  EXPECT_EQ(tempFiles(dir.path()), 0);
  EXPECT_EQ(tempFiles(dir.path() / "real"), 0);
}

TEST(WriteOutputFile, ADanglingLinkCreatesItsTarget) {
  test::TempDir dir;
  fs::create_symlink("made.cu", dir.path() / "link");
  ASSERT_TRUE(writeOutputFile((dir.path() / "link").string(), "created").ok());
  EXPECT_TRUE(fs::is_symlink(dir.path() / "link"));
  EXPECT_EQ(slurp(dir.path() / "made.cu"), "created");
}

TEST(WriteOutputFile, AFifoIsWrittenAndStaysAFifo) {
  test::TempDir dir;
  fs::path fifo = dir.path() / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = slurp(fifo); });
  Status s = writeOutputFile(fifo.string(), "through the pipe");
  reader.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(received, "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(tempFiles(dir.path()), 0);
}

TEST(WriteOutputFile, DevNullStaysACharacterDevice) {
  // Only where a mistake could not replace the system's /dev/null: the FIFO test covers the same path as root.
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root: not risking /dev/null (AFifoIsWrittenAndStaysAFifo covers special files)";
  ASSERT_TRUE(writeOutputFile("/dev/null", "discarded").ok());
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST(WriteOutputFile, ProcFdLinksAreWrittenInPlace) {
  // -o /dev/stdout with stdout redirected to a file: the open file gets the bytes; it is not swapped for another.
  test::TempDir dir;
  fs::path file = dir.path() / "stdout.txt";
  put(file, "previous contents, longer");
  int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct stat before, after;
  ASSERT_EQ(::fstat(fd, &before), 0);
  Status s = writeOutputFile("/proc/self/fd/" + std::to_string(fd), "via the fd");
  ASSERT_EQ(::fstat(fd, &after), 0);
  ::close(fd);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(after.st_nlink, 1u); // still the file in the directory, not an unlinked old copy
  EXPECT_EQ(slurp(file), "via the fd");
}

TEST(WriteOutputFile, ADirectoryIsAnErrorAndIsLeftAlone) {
  test::TempDir dir;
  Status s = writeOutputFile(dir.path().string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("is a directory"));
  EXPECT_THAT(s.message(), HasSubstr(dir.path().string()));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(WriteOutputFile, AMissingDirectoryIsAnErrorNamingThePath) {
  test::TempDir dir;
  fs::path out = dir.path() / "no" / "such" / "attn.cu";
  Status s = writeOutputFile(out.string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(out.string()));
  EXPECT_THAT(s.message(), HasSubstr("No such file or directory"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(WriteOutputFile, AFullDeviceIsReported) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root: not risking /dev/full (AFailedWrite... covers failed writes)";
  Status s = writeOutputFile("/dev/full", "bytes that do not fit");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("No space left on device"));
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

TEST(WriteOutputFile, AFailedWriteRemovesTheTemporaryAndKeepsTheOldFile) {
  // A file-size limit makes the temporary's write fail with EFBIG (as a full disk would), root or not.
  test::TempDir dir;
  fs::path out = dir.path() / "attn.cubin";
  put(out, "old");
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status s = writeOutputFile(out.string(), std::string(1 << 16, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previousHandler);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(out.string()));
  EXPECT_EQ(slurp(out), "old");
  EXPECT_EQ(tempFiles(dir.path()), 0);
}

TEST(WriteOutputFile, AnUnwritableDirectoryLeavesNothingBehind) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root writes into read-only directories";
  test::TempDir dir;
  fs::create_directory(dir.path() / "ro");
  fs::permissions(dir.path() / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  Status s = writeOutputFile((dir.path() / "ro" / "attn.cu").string(), "x");
  fs::permissions(dir.path() / "ro", fs::perms::owner_all);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("Permission denied"));
  EXPECT_TRUE(fs::is_empty(dir.path() / "ro"));
}

TEST(WriteOutputFile, ConcurrentWritersToOneFileAllSucceed) {
  test::TempDir dir;
  fs::path out = dir.path() / "shared.cu";
  constexpr int kThreads = 8, kWrites = 25;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i)
        failures += !writeOutputFile(out.string(), std::string(1000 + t, char('a' + t))).ok();
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(failures, 0);
  std::string last = slurp(out);
  ASSERT_FALSE(last.empty());
  EXPECT_EQ(last, std::string(last.size(), last[0])); // one writer's whole file, never a mix
  EXPECT_EQ(tempFiles(dir.path()), 0);
}

TEST(ReadInputFile, RefusesDirectoriesFifosAndTooLargeFiles) {
  test::TempDir dir;
  put(dir.path() / "a.cu", "source");
  StatusOr<std::string> text = readInputFile((dir.path() / "a.cu").string(), 100);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text, "source");

  StatusOr<std::string> directory = readInputFile(dir.path().string(), 100);
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("is a directory"));

  fs::path fifo = dir.path() / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  StatusOr<std::string> special = readInputFile(fifo.string(), 100); // must return, not wait for a writer
  ASSERT_FALSE(special.ok());
  EXPECT_THAT(special.status().message(), HasSubstr("not a regular file"));

  StatusOr<std::string> large = readInputFile((dir.path() / "a.cu").string(), 3);
  ASSERT_FALSE(large.ok());
  EXPECT_THAT(large.status().message(), HasSubstr("more than the 3"));

  StatusOr<std::string> zeros = readInputFile("/dev/zero", 1 << 10, /*allowSpecial=*/true);
  ASSERT_FALSE(zeros.ok());
  EXPECT_THAT(zeros.status().message(), HasSubstr("more than the 1024"));

  StatusOr<std::string> missing = readInputFile((dir.path() / "none.cu").string(), 100);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("No such file"));
}

} // namespace
