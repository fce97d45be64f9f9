// DispatchRuleTest.cpp — the built-in schedules' dispatch rules as the JIT hands them to the runtime and as their
// kernels record them: fa3 first on sm_90a, fa2 elsewhere, decode first for decode-sized calls, fa1 only when named.
// tests/unit/runtime's test::dispatchRules() writes the same rules out as data for the runtime's own tests.
#include "examples/variants/Variants.h"
#include "jit/Jit.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include <gtest/gtest.h>

using namespace flashtile;

namespace {

using Order = std::vector<std::string>;

TEST(DispatchRules, TheBuiltInSchedulesRankCallsAsTheDesignSays) {
  const std::vector<DispatchRule> rules = jit::Jit().dispatchRules();
  EXPECT_EQ(defaultSchedules(rules, "sm_90a", false), (Order{"fa3", "fa2"}));
  EXPECT_EQ(defaultSchedules(rules, "sm_90a", true), (Order{"decode", "fa3", "fa2"}));
  for (const char *arch : {"sm_80", "sm_100a"}) {
    EXPECT_EQ(defaultSchedules(rules, arch, false), (Order{"fa2"})) << arch;
    EXPECT_EQ(defaultSchedules(rules, arch, true), (Order{"decode", "fa2"})) << arch;
  }
}

/// The manifest fields of `schedule`'s kernel of the "none" variant on `arch` (printed, not compiled by NVRTC).
KernelInfo kernelOf(const std::string &schedule, const std::string &arch, int headDim) {
  jit::CompileOptions options;
  options.headDim = options.headDimV = headDim;
  options.schedule.schedule = schedule;
  options.schedule.arch = arch;
  StatusOr<jit::CompileResult> result = jit::compile(*variants::byName("none"), options, jit::Stage::Cuda);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? result->info : KernelInfo();
}

TEST(DispatchRules, KernelsRecordTheirSchedulesRule) {
  KernelInfo fa3 = kernelOf("fa3", "sm_90a", 128);
  EXPECT_EQ(fa3.defaultFor, DefaultCalls::All);
  EXPECT_EQ(fa3.preferredOver, (Order{"fa2"}));
  EXPECT_EQ(fa3.dispatchRule().schedule, "fa3");
  KernelInfo fa2 = kernelOf("fa2", "sm_90a", 96);
  EXPECT_EQ(fa2.defaultFor, DefaultCalls::All);
  EXPECT_TRUE(fa2.preferredOver.empty());
  EXPECT_EQ(kernelOf("decode", "sm_80", 128).defaultFor, DefaultCalls::Decode);
  KernelInfo fa1 = kernelOf("fa1", "sm_80", 64);
  EXPECT_EQ(fa1.defaultFor, DefaultCalls::None);
  EXPECT_TRUE(fa1.preferredOver.empty());
}

/// A schedule never run on sm_100a, checked there against fa2 (what a new family's first schedule says).
class UnprovenOnSm100 final : public schedule::Schedule {
public:
  std::string_view name() const override { return "unproven"; }
  std::string_view summary() const override { return "a schedule whose sm_100a kernels never ran"; }
  const std::vector<schedule::OptionSpec> &options() const override { return knobs; }
  mlir::FailureOr<tile::ScheduleAttr> configure(tile::FuncOp, const schedule::Knobs &,
                                                tile::ShapeClass) const override {
    return mlir::failure();
  }
  bool walkDescending() const override { return false; }
  std::string targetFamilyFor(std::string_view) const override { return "sm80"; }
  void buildPipeline(mlir::OpPassManager &, const schedule::Request &) const override {}
  std::string checkAgainstOn(std::string_view arch) const override { return arch == "sm_100a" ? "fa2" : ""; }

private:
  std::vector<schedule::OptionSpec> knobs;
};

TEST(DispatchRules, KernelsOfASchedulesNeverRunArchCarryTheMark) {
  // The built-in schedules' kernels carry no mark on the archs they run on here.
  for (const auto &[schedule, arch] : std::vector<std::pair<std::string, std::string>>{
           {"fa2", "sm_100a"}, {"fa2", "sm_80"}, {"fa3", "sm_90a"}, {"decode", "sm_90a"}}) {
    KernelInfo info = kernelOf(schedule, arch, 128);
    EXPECT_FALSE(info.neverRunOnArch) << schedule << " " << arch;
    EXPECT_TRUE(info.checkAgainst.empty()) << schedule << " " << arch;
  }
  UnprovenOnSm100 unproven;
  KernelInfo info = kernelOf("fa2", "sm_100a", 128);
  info.schedule = "unproven";
  schedule::recordDispatchRule(info, unproven);
  EXPECT_TRUE(info.neverRunOnArch);
  EXPECT_EQ(info.checkAgainst, "fa2");
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  // Elsewhere it is proven; a KV-cache kernel is never marked (the self-check runs dense calls).
  info.arch = "sm_80";
  schedule::recordDispatchRule(info, unproven);
  EXPECT_FALSE(info.neverRunOnArch);
  info.arch = "sm_100a";
  info.kvCache = true;
  schedule::recordDispatchRule(info, unproven);
  EXPECT_FALSE(info.neverRunOnArch);
  EXPECT_TRUE(info.checkAgainst.empty());
}

// fa3's rule serves every call on sm_90a, and the sm90 family prints a kernel at every head dim the runtime serves
// (kSupportedHeadDims and kSupportedHeadDimPairs; 32 and 96 with 64-byte swizzled tiles): a call naming no schedule runs
// fa3 there and never falls back to fa2 for its head dims.
TEST(DispatchRules, Fa3HasAKernelAtEveryHeadDimTheRuntimeServes) {
  std::vector<std::pair<int, int>> pairs;
  for (int headDim : kSupportedHeadDims)
    pairs.emplace_back(headDim, headDim);
  pairs.insert(pairs.end(), kSupportedHeadDimPairs.begin(), kSupportedHeadDimPairs.end());
  for (auto [headDim, headDimV] : pairs) {
    ASSERT_TRUE(supportsHeadDims(headDim, headDimV));
    for (const char *variant : {"none", "causal"}) {
      jit::CompileOptions options;
      options.headDim = headDim;
      options.headDimV = headDimV;
      options.schedule.schedule = "fa3";
      options.schedule.arch = "sm_90a";
      StatusOr<jit::CompileResult> result = jit::compile(*variants::byName(variant), options, jit::Stage::Cuda);
      ASSERT_TRUE(result.ok()) << headDim << "/" << headDimV << " " << variant << ": " << result.status().message();
      EXPECT_EQ(result->info.schedule, "fa3");
      EXPECT_EQ(result->info.defaultFor, DefaultCalls::All);
    }
  }
}

} // namespace
