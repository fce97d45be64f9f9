//===- Fa4Test.cpp - the FA4 schedule on the sm100 family, compile-verified -===//
//
// fa4's configuration (defaults per head dim, the knobs it refuses), and its kernels: every built-in variant at head
// dims 64, 128, 192/128 and 256, bf16 and f16, printed by the sm100 family (tcgen05.mma, tensor memory) and compiled
// by NVRTC to an sm_100a cubin. No SM100 GPU exists here: nothing in this file runs a kernel; the manifests say so
// (neverRunOnArch, checkAgainst fa2). The interpreter runs fa4-scheduled IR in VariantTest.cpp.
//===----------------------------------------------------------------------===//
#include "PlanSupport.h"
#include "TestSupport.h"

#include "Variants.h"
#include "codegen/common/CudaEmitter.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Nvrtc.h"
#include "passes/Transforms/ScheduleRegistry.h"
#include "schedules/fa4/Fa4Config.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace flashtile;

namespace {

using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;

constexpr std::string_view kElfMagic = "\x7f"
                                       "ELF";

TEST(Fa4Config, DefaultsFollowTensorMemoryAndSharedMemory) {
  std::string error;
  // Two 128-row Q tiles while 2 x (64 + head dim v) columns fit tensor memory's 512.
  for (auto [headDim, headDimV] : {std::pair<int64_t, int64_t>{64, 64}, {128, 128}, {192, 128}}) {
    std::optional<fa4::Fa4Config> c = fa4::configure(headDim, headDimV, {}, error);
    ASSERT_TRUE(c) << error;
    EXPECT_EQ(c->softmaxWarpgroups, 2);
    EXPECT_EQ(c->blockM, 256);
    EXPECT_EQ(c->blockN, 64);
    EXPECT_EQ(c->stages, 2);
    EXPECT_EQ(c->warps(), 12);
    EXPECT_EQ(c->rescaleThreshold, fa4::kDefaultRescaleThreshold);
  }
  // 256: one Q tile (2 x (64 + 256) > 512 columns).
  std::optional<fa4::Fa4Config> large = fa4::configure(256, 256, {}, error);
  ASSERT_TRUE(large) << error;
  EXPECT_EQ(large->softmaxWarpgroups, 1);
  EXPECT_EQ(large->blockM, 128);
  EXPECT_EQ(large->blockN, 64);
  EXPECT_EQ(large->warps(), 8);
}

TEST(Fa4Config, RefusesWhatItDoesNotPrint) {
  std::string error;
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kTwoCta, 1}}, error));
  EXPECT_NE(error.find("fa4: two-cta = 1 (tcgen05.mma.cta_group::2, M = 256 across a cluster of two CTAs) is not "
                       "implemented"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kExp2PolyShare, 2}}, error));
  EXPECT_NE(error.find("fa4: exp2-poly-share > 0"), std::string::npos) << error;
  EXPECT_FALSE(fa4::configure(256, 256, {{fa4::kSoftmaxWarpgroups, 2}}, error));
  EXPECT_NE(error.find("exceed tensor memory's 512"), std::string::npos) << error;
  EXPECT_FALSE(fa4::configure(128, 128, {{fa4::kBlockN, 96}}, error));
  EXPECT_EQ(error, "fa4: block-n = 96 must be a power of two in [16, 256]");
  EXPECT_FALSE(fa4::configure(256, 256, {{fa4::kBlockN, 128}, {fa4::kStages, 2}}, error));
  EXPECT_NE(error.find("bytes of shared memory"), std::string::npos) << error;
}

TEST(Fa4Schedule, IsOfferedOnSm100aOnlyAndMarkedNeverRun) {
  const schedule::Schedule *fa4 = schedule::lookupSchedule(fa4::kName);
  ASSERT_TRUE(fa4);
  EXPECT_EQ(fa4->targetFamilyFor("sm_100a"), "sm100");
  EXPECT_EQ(fa4->targetFamilyFor("sm_90a"), "");
  EXPECT_EQ(fa4->targetFamilyFor("sm_80"), "");
  EXPECT_EQ(fa4->checkAgainstOn("sm_100a"), "fa2");
  // Unproven: no call that names no schedule runs it.
  EXPECT_TRUE(schedule::dispatchRuleOf(*fa4, "sm_100a").preferredOver.empty());
}

using Fa4Case = std::tuple<std::string, ElementType, int, int>; // variant, dtype, head dim, head dim v

class Fa4Compiles : public ::testing::TestWithParam<Fa4Case> {};

// Every built-in variant's hooks run in the softmax warpgroups unchanged: the kernel compiles for sm_100a, takes the
// TMA descriptors of Q, K and V, and its manifest asks the runtime to check it against fa2 before its first use.
TEST_P(Fa4Compiles, ToAnSm100aCubin) {
  auto [variantName, dtype, headDim, headDimV] = GetParam();
  mlir::MLIRContext context;
  DiagnosticCapture diags(context);
  auto program =
      buildAttentionProgram(context, *variants::byName(variantName), ProgramOptions{dtype, headDim, headDimV});
  ASSERT_TRUE(mlir::succeeded(program)) << diags.text;
  mlir::OwningOpRef<mlir::ModuleOp> lowered = flashtile::testing::scheduledFa4(**program);
  ASSERT_TRUE(lowered) << diags.text;
  mlir::FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(funcOf(*lowered));
  ASSERT_TRUE(mlir::succeeded(kernel)) << diags.text;
  const KernelInfo &info = kernel->info;
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  EXPECT_EQ(info.arch, "sm_100a");
  EXPECT_TRUE(info.neverRunOnArch);
  EXPECT_EQ(info.checkAgainst, "fa2");
  EXPECT_EQ(plans::mainLaunch(info).tensorMaps.size(), 3u);
  // A load warpgroup and a softmax warpgroup per 128 rows.
  EXPECT_EQ(plans::mainLaunch(info).threads, 128 + info.blockM);
  for (const char *primitive : {"sm100::tmem::alloc<", "sm100::tmem::dealloc<", "sm100::mma::f16SS(",
                                "sm100::mma::f16TS(", "sm100::mma::commit(", "sm100::tma::load5d("})
    EXPECT_NE(kernel->source.find(primitive), std::string::npos) << primitive;
  StatusOr<std::string> cubin = compileCuda(kernel->source, info.entry + ".cu", "sm_100a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_TRUE(std::string_view(*cubin).starts_with(kElfMagic));
  EXPECT_NE(cubin->find(info.entry), std::string::npos);
}

std::string fa4CaseName(const ::testing::TestParamInfo<Fa4Case> &info) {
  auto [variant, dtype, headDim, headDimV] = info.param;
  return variant + (dtype == ElementType::BF16 ? "_bf16_d" : "_f16_d") + std::to_string(headDim) +
         (headDimV != headDim ? "_dv" + std::to_string(headDimV) : "");
}

/// Every built-in variant x head dims {64, 128, 192/128, 256} x {bf16, f16}.
std::vector<Fa4Case> fa4Cases() {
  std::vector<Fa4Case> cases;
  for (const std::string &variant : variants::names())
    for (ElementType dtype : {ElementType::BF16, ElementType::F16})
      for (auto [headDim, headDimV] : {std::pair{64, 64}, {128, 128}, {192, 128}, {256, 256}})
        cases.emplace_back(variant, dtype, headDim, headDimV);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryVariant, Fa4Compiles, ::testing::ValuesIn(fa4Cases()), fa4CaseName);

} // namespace
