// NvrtcTest.cpp — NVRTC compiles for every supported target without a GPU, and reports its log on errors.
// NVRTC is a build requirement (the CUDA toolkit), so these tests fail rather than skip when it is missing.
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/KernelInfo.h"

#include <gmock/gmock.h>

using namespace flashtile;
using testing::HasSubstr;

namespace {

constexpr const char *kAxpy = R"(
extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = a * x[i] + y[i];
}
)";

constexpr std::string_view kElfMagic = "\x7f"
                                       "ELF";

TEST(Nvrtc, ReportsVersion) {
  StatusOr<std::string> version = nvrtcVersion();
  ASSERT_TRUE(version.ok()) << version.status().message();
  EXPECT_THAT(*version, testing::MatchesRegex("[0-9]+\\.[0-9]+"));
}

TEST(Nvrtc, CompilesCubinForEverySupportedArch) {
  for (std::string_view arch : kSupportedArchs) {
    SCOPED_TRACE(arch);
    StatusOr<std::string> cubin = compileCuda(kAxpy, "axpy.cu", std::string(arch), NvrtcOutput::Cubin);
    ASSERT_TRUE(cubin.ok()) << cubin.status().message();
    EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
  }
}

TEST(Nvrtc, CompilesPtxForTheVirtualArch) {
  StatusOr<std::string> ptx = compileCuda(kAxpy, "axpy.cu", "sm_90a", NvrtcOutput::Ptx);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  EXPECT_THAT(*ptx, HasSubstr(".target sm_90a"));
  EXPECT_THAT(*ptx, HasSubstr(".entry axpy"));
  EXPECT_NE(ptx->back(), '\0');
}

TEST(Nvrtc, PassesExtraOptions) {
  constexpr const char *kNeedsDefine = R"(
#if FLASHTILE_TEST_VALUE != 3
#error "FLASHTILE_TEST_VALUE was not passed"
#endif
extern "C" __global__ void k() {}
)";
  StatusOr<std::string> with =
      compileCuda(kNeedsDefine, "define.cu", "sm_80", NvrtcOutput::Ptx, {"-DFLASHTILE_TEST_VALUE=3"});
  EXPECT_TRUE(with.ok()) << with.status().message();
  StatusOr<std::string> without = compileCuda(kNeedsDefine, "define.cu", "sm_80", NvrtcOutput::Ptx);
  ASSERT_FALSE(without.ok());
  EXPECT_THAT(without.status().message(), HasSubstr("FLASHTILE_TEST_VALUE was not passed"));
}

TEST(Nvrtc, SyntaxErrorReturnsTheLog) {
  constexpr const char *kBroken = R"(
extern "C" __global__ void broken(int *out) {
  int x = ;
  *out = x;
}
)";
  StatusOr<std::string> cubin = compileCuda(kBroken, "broken.cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_FALSE(cubin.ok());
  const std::string &message = cubin.status().message();
  EXPECT_THAT(message, HasSubstr("NVRTC failed to compile broken.cu for sm_90a"));
  EXPECT_THAT(message, HasSubstr("--gpu-architecture=sm_90a"));
  // NVRTC's own log: the file, the line and the diagnostic.
  EXPECT_THAT(message, HasSubstr("broken.cu(3)"));
  EXPECT_THAT(message, HasSubstr("expected an expression"));
}

// A wgmma under a branch that splits a warpgroup's threads: ptxas serializes every wgmma of the kernel and says so
// in its log (C7520), which the kernel sweeps of the fa3 tests assert against (reportsSerializedWgmma).
TEST(Nvrtc, ReportsSerializedWgmmaInTheLog) {
  constexpr const char *kDivergent = R"(
extern "C" __global__ void __launch_bounds__(256) divergent(float *out, unsigned long long a, unsigned long long b) {
  float d[4] = {};
  for (int it = 0; it < 4; ++it) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    if (threadIdx.x / 128 == 0)
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(a + it), "l"(b));
    else
      asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(b + it), "l"(a));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];
}
)";
  std::string log;
  StatusOr<std::string> cubin = compileCuda(kDivergent, "divergent.cu", "sm_90a", NvrtcOutput::Cubin, {}, &log);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
  EXPECT_TRUE(reportsSerializedWgmma(log)) << log;
  std::string quiet = "unset";
  ASSERT_TRUE(compileCuda(kAxpy, "axpy.cu", "sm_90a", NvrtcOutput::Cubin, {}, &quiet).ok());
  EXPECT_FALSE(reportsSerializedWgmma(quiet)) << quiet;
  EXPECT_FALSE(reportsSerializedWgmma("ptxas info : (C7520) Potential Performance Loss: something else"));
  EXPECT_TRUE(reportsSerializedWgmma("x\nptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async "
                                     "instructions are serialized due to insufficient register resources\n"));
}

TEST(Nvrtc, RejectsMalformedArch) {
  for (const char *arch : {"sm90", "compute_90a", "sm_", "sm_9x", ""}) {
    SCOPED_TRACE(arch);
    StatusOr<std::string> cubin = compileCuda(kAxpy, "axpy.cu", arch, NvrtcOutput::Cubin);
    ASSERT_FALSE(cubin.ok());
    EXPECT_THAT(cubin.status().message(), HasSubstr("arch '" + std::string(arch) + "'"));
    EXPECT_THAT(cubin.status().message(), HasSubstr("sm_90a"));
  }
}

} // namespace
