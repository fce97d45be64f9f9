// NvrtcMemoTest.cpp — compileCuda's memo (runtime/lib/NvrtcMemo.h): off unless FLASHTILE_NVRTC_CACHE_DIR is set;
// a compile is kept and its result served again (a planted change to a kept entry comes back, so the hit is the
// entry's); another option, a damaged entry, an untrusted one and a failed compile are misses or not kept.
#include "flashtile/runtime/Nvrtc.h"

#include <gmock/gmock.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace flashtile;
namespace fs = std::filesystem;
using testing::HasSubstr;

namespace {

constexpr const char *kKernel = R"(
extern "C" __global__ void scale(float a, float *y) { y[threadIdx.x] *= a; }
)";

class NvrtcMemo : public testing::Test {
protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("flashtile-nvrtc-memo-" + std::to_string(::getpid()) + "-" +
                                       testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    ::setenv("FLASHTILE_NVRTC_CACHE_DIR", dir.c_str(), 1);
    ::unsetenv("FLASHTILE_SHARED_CACHE");
  }
  void TearDown() override {
    ::unsetenv("FLASHTILE_NVRTC_CACHE_DIR");
    fs::remove_all(dir);
  }

  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    if (fs::is_directory(dir))
      for (const fs::directory_entry &e : fs::directory_iterator(dir))
        out.push_back(e.path());
    return out;
  }
  static std::string read(const fs::path &path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  static void write(const fs::path &path, const std::string &bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  static std::string ptx(const std::vector<std::string> &options = {}, std::string *log = nullptr) {
    StatusOr<std::string> out = compileCuda(kKernel, "scale.cu", "sm_80", NvrtcOutput::Ptx, options, log);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : "";
  }

  fs::path dir;
};

TEST_F(NvrtcMemo, IsOffWithoutTheVariable) {
  ::unsetenv("FLASHTILE_NVRTC_CACHE_DIR");
  EXPECT_THAT(ptx(), HasSubstr(".entry scale"));
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(NvrtcMemo, KeepsACompileAndServesItAgain) {
  const std::string first = ptx();
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(entry).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  // Plant a change of the same length in the kept output: the next compile returns it, so it came from the entry.
  std::string bytes = read(entry);
  const size_t at = bytes.rfind(".entry scale");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 12, ".entry scalf");
  write(entry, bytes);
  fs::permissions(entry, fs::perms::owner_read | fs::perms::owner_write);
  std::string log = "untouched";
  EXPECT_THAT(ptx({}, &log), HasSubstr(".entry scalf"));
  EXPECT_EQ(log, "");
  // Another option is another compile: a miss, a second entry, NVRTC's own output.
  EXPECT_THAT(ptx({"-DUNUSED=1"}), HasSubstr(".entry scale"));
  EXPECT_EQ(entries().size(), 2u);
  EXPECT_THAT(first, HasSubstr(".entry scale"));
}

TEST_F(NvrtcMemo, ADamagedEntryIsAMissAndIsRewritten) {
  ptx();
  ASSERT_EQ(entries().size(), 1u);
  const fs::path entry = entries()[0];
  const std::string whole = read(entry);
  write(entry, whole.substr(0, whole.size() / 2));
  EXPECT_THAT(ptx(), HasSubstr(".entry scale"));
  EXPECT_EQ(read(entry), whole);
}

TEST_F(NvrtcMemo, AnUntrustedEntryIsNotRead) {
  ptx();
  const fs::path entry = entries()[0];
  std::string bytes = read(entry);
  const size_t at = bytes.rfind(".entry scale");
  bytes.replace(at, 12, ".entry scalf");
  write(entry, bytes);
  ::chmod(entry.c_str(), 0666); // others may write it: what it holds may be anyone's
  EXPECT_THAT(ptx(), HasSubstr(".entry scale"));
}

TEST_F(NvrtcMemo, AFailedCompileIsNotKept) {
  StatusOr<std::string> out = compileCuda("this is not CUDA", "bad.cu", "sm_80", NvrtcOutput::Ptx);
  EXPECT_FALSE(out.ok());
  EXPECT_TRUE(entries().empty());
}

} // namespace
