// NvrtcLookupTest.cpp — where NVRTC is looked for: the toolkit, CUDA_HOME, and the pip wheels' folders under the
// Python environments' site-packages. (The loading itself happens once per process: NvrtcTest and the lit tests'
// FLASHTILE_NVRTC_PATH cases cover it.)
#include "TestUtil.h"

#include "flashtile/runtime/Nvrtc.h"

#include <gmock/gmock.h>

#include <algorithm>

using namespace flashtile;
using testing::Contains;
namespace fs = std::filesystem;

namespace {

TEST(NvrtcLookup, LooksInCudaHomeTheToolkitAndTheWheelsOfTheActiveEnvironment) {
  test::TempDir venv;
  fs::path site = venv.path() / "lib" / "python3.12" / "site-packages";
  fs::create_directories(site);
  test::ScopedEnv virtualEnv("VIRTUAL_ENV", venv.path().c_str());
  test::ScopedEnv cudaHome("CUDA_HOME", "/opt/cuda-test");
  std::vector<std::string> dirs = nvrtcSearchDirs();
  EXPECT_THAT(dirs, Contains("/opt/cuda-test/lib64"));
  EXPECT_THAT(dirs, Contains("/usr/local/cuda/lib64"));
  EXPECT_THAT(dirs, Contains((site / "nvidia/cu13/lib").string()));
  EXPECT_THAT(dirs, Contains((site / "nvidia/cuda_nvrtc/lib").string()));
  // CUDA_HOME before the default toolkit, the toolkit before the wheels.
  auto at = [&](const std::string &dir) { return std::find(dirs.begin(), dirs.end(), dir) - dirs.begin(); };
  EXPECT_LT(at("/opt/cuda-test/lib64"), at("/usr/local/cuda/lib64"));
  EXPECT_LT(at("/usr/local/cuda/lib64"), at((site / "nvidia/cu13/lib").string()));
}

TEST(NvrtcLookup, AnEnvironmentWithoutSitePackagesAddsNothing) {
  test::TempDir empty;
  test::ScopedEnv virtualEnv("VIRTUAL_ENV", empty.path().c_str());
  for (const std::string &dir : nvrtcSearchDirs())
    EXPECT_EQ(dir.find(empty.path().string()), std::string::npos) << dir;
}

} // namespace
