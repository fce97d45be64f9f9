// BackwardCodegenTest.cpp — the backward module (docs/backward.md) through the JIT: every built-in variant's three
// kernels at head dims 64 and 128, bf16 and fp16, compile with NVRTC to one cubin (no GPU needed); the plan launches
// the preprocess, main and postprocess kernels with the delta and dQ-accumulator workspaces; the printed source
// follows the scheduled IR (the bounded Q-tile walk, the variant's hooks); configurations the printer does not
// serve are refused with a diagnostic naming the knob.
#include "PlanSupport.h"
#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "jit/Jit.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

using namespace flashtile;

namespace {

jit::CompileOptions backwardOptions(ElementType dtype, int headDim, const std::string &arch = "sm_90a",
                                    schedule::Knobs knobs = {}) {
  jit::CompileOptions options;
  options.kind = "backward";
  options.dtype = dtype;
  options.headDim = options.headDimV = headDim;
  options.schedule = schedule::Request{"fa2", arch, "default", std::move(knobs)};
  return options;
}

int count(const std::string &text, const std::string &needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size()))
    ++n;
  return n;
}

using Config = std::tuple<std::string, ElementType, int>; // variant, dtype, head dim

class BackwardCompiles : public testing::TestWithParam<Config> {};

TEST_P(BackwardCompiles, ThreeKernelsToOneCubin) {
  auto [variant, dtype, headDim] = GetParam();
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName(variant), backwardOptions(dtype, headDim), jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const KernelInfo &info = result->info;
  EXPECT_EQ(info.kind, "backward");
  // A variant with f32 inputs (ALiBi's slopes, the sinks) has a fourth kernel: its input gradients' sums.
  std::vector<std::string> entries{info.entry + "_preprocess", info.entry, info.entry + "_postprocess"};
  if (variant.starts_with("alibi") || variant.starts_with("sinks"))
    entries.push_back(info.entry + "_input_grads");
  EXPECT_EQ(plans::launchedEntries(info), entries);
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  for (const std::string &entry : plans::launchedEntries(info))
    EXPECT_NE(result->cubin.find(entry), std::string::npos) << entry;
}

std::string configName(const testing::TestParamInfo<Config> &info) {
  auto [variant, dtype, headDim] = info.param;
  return variant + "_" + (dtype == ElementType::BF16 ? "bf16" : "f16") + "_d" + std::to_string(headDim);
}

INSTANTIATE_TEST_SUITE_P(Fa2, BackwardCompiles,
                         testing::Combine(testing::ValuesIn(variants::names()),
                                          testing::Values(ElementType::BF16, ElementType::F16),
                                          testing::Values(64, 128)),
                         configName);

// Head dims 32 and 96 (padded shared-memory rows), and sm_80.
INSTANTIATE_TEST_SUITE_P(Fa2HeadDims, BackwardCompiles,
                         testing::Combine(testing::Values("causal"), testing::Values(ElementType::BF16),
                                          testing::Values(32, 96)),
                         configName);

TEST(BackwardCodegen, CompilesForSm80) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("causal"), backwardOptions(ElementType::F16, 128, "sm_80"), jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->info.arch, "sm_80");
}

TEST(BackwardCodegen, PlanHasTheWorkspacesOfTheBackward) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, 128), jit::Stage::Cuda);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const LaunchPlan &plan = result->info.plan;
  ASSERT_EQ(plan.workspaces.size(), 4u);
  EXPECT_EQ(plan.workspaces[0].bind.front().first, "delta");
  EXPECT_FALSE(plan.workspaces[0].zeroed);
  EXPECT_EQ(plan.workspaces[1].bind.front().first, "dqAccum");
  EXPECT_TRUE(plan.workspaces[1].zeroed);
  EXPECT_EQ(plan.workspaces[2].bind.front().first, "dkAccum");
  EXPECT_EQ(plan.workspaces[2].bind.back().first, "dvAccum");
  ASSERT_TRUE(plan.workspaces[2].when);
  EXPECT_EQ(plan.workspaces[2].when->text(), "heads_q > heads_kv");
  // Deterministic calls order their adds behind zeroed semaphores.
  EXPECT_EQ(plan.workspaces[3].bind.front().first, "semaphores");
  EXPECT_TRUE(plan.workspaces[3].zeroed);
  ASSERT_TRUE(plan.workspaces[3].when);
  EXPECT_EQ(plan.workspaces[3].when->text(), "deterministic");
  // One K/V tile of blockN keys a block: 64 by default.
  EXPECT_EQ(plan.launches[1].grid[0].text(), "max(1, cdiv(keys, 64))");
  EXPECT_GT(plan.launches[1].smemBytes, 0);
}

TEST(BackwardCodegen, InputGradientsAreReducedPerBlockThenSummedInOrder) {
  for (const char *variant : {"alibi_causal", "sinks"}) {
    SCOPED_TRACE(variant);
    StatusOr<jit::CompileResult> result =
        jit::compile(*variants::byName(variant), backwardOptions(ElementType::BF16, 64), jit::Stage::Cuda);
    ASSERT_TRUE(result.ok()) << result.status().message();
    const std::string &cuda = result->cuda;
    const bool alibi = std::string_view(variant) == "alibi_causal";
    // The terms, in the main kernel (tile.input_grad) or the preprocess (tile.sink_grad), each block's share
    // summed over its threads in a fixed order, and no float atomics for them.
    // alibi_causal's walk has three segments, each with its copy of the read: one share for the three.
    EXPECT_EQ(count(cuda, alibi ? "tile.input_grad \"slopes\"" : "tile.sink_grad \"sinks\""), alibi ? 3 : 1);
    EXPECT_EQ(count(cuda, "::blockSum<kWarps>(inputGradShare"), 1);
    EXPECT_NE(cuda.find("_input_grads(const FlashtileFwdParams params)"), std::string::npos);
    const LaunchPlan &plan = result->info.plan;
    ASSERT_EQ(plan.workspaces.size(), 5u);
    EXPECT_EQ(plan.workspaces[4].bind.front().first, "inputGradPartials");
    EXPECT_TRUE(plan.workspaces[4].zeroed);
    EXPECT_EQ(plan.launches.back().grid[0].text(), "1");
  }
}

TEST(BackwardCodegen, DeterministicModeTakesTurnsOnTheDqAndDkvRows) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, 64), jit::Stage::Cuda);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string &cuda = result->cuda;
  // dQ: a wait and a pass in each of the walk's three segments, K/V tiles descending; dK and dV (GQA): a pass each;
  // the Q tiles the walk skips: a wait and a pass before it (those below) and after it (the others).
  EXPECT_EQ(count(cuda, "::waitTurn(turnCounter, (p.seqlenK + kBlockN - 1) / kBlockN - 1 - blockKvTile);"), 3 + 2);
  EXPECT_EQ(count(cuda, "::passTurn(turnCounter);"), 3 + 2 + 2);
  EXPECT_NE(cuda.find("const int blockKvTile = p.deterministic ? gridDim.x - 1 - blockIdx.x : blockIdx.x;"),
            std::string::npos);
}

TEST(BackwardCodegen, SourceFollowsTheScheduledIr) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("softcap_causal"), backwardOptions(ElementType::BF16, 64), jit::Stage::Cuda);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string &cuda = result->cuda;
  // tile-bound-q-loop's three segments, each a loop over Q tiles; the interior one without the mask.
  EXPECT_EQ(count(cuda, "---- tile.q_loop segment"), 3);
  EXPECT_NE(cuda.find("segment head_boundary"), std::string::npos);
  EXPECT_NE(cuda.find("segment interior"), std::string::npos);
  EXPECT_NE(cuda.find("segment tail_boundary"), std::string::npos);
  EXPECT_EQ(count(cuda, "// mask: keys past seqlen_k"), 2);
  // The variant's hooks are the forward printer's functions, the derivative included.
  EXPECT_NE(cuda.find("float scoreMod("), std::string::npos);
  EXPECT_NE(cuda.find("float scoreGrad("), std::string::npos);
  EXPECT_NE(cuda.find("bool keep("), std::string::npos);
  // dQ's fp32 reductions, and the staged P and dS.
  EXPECT_NE(cuda.find("red.global.add.f32"), std::string::npos);
  EXPECT_NE(cuda.find("sStage1"), std::string::npos);
}

TEST(BackwardCodegen, ScheduledIrFixesTheBackwardsTiles) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, 128, "sm_90a", {{"block-m", 128}}),
                   jit::Stage::Scheduled);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string &ir = result->scheduledIr;
  // Q tiles of blockM (128) rows, K/V tiles and the dK/dV accumulators of blockN (64) rows.
  EXPECT_NE(ir.find("tile.load q[%arg0] : tensor<128x128xbf16>"), std::string::npos) << ir;
  EXPECT_NE(ir.find("tile.load k : tensor<64x128xbf16>"), std::string::npos) << ir;
  EXPECT_NE(ir.find("tile.zero_acc : !tile.acc<64x128>"), std::string::npos) << ir;
  EXPECT_NE(ir.find("tile.load dq_accum : tensor<128x128xf32>"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("tile.kv_range"), std::string::npos) << ir;
}

TEST(BackwardCodegen, RefusesWhatThePrinterDoesNotServe) {
  StatusOr<jit::CompileResult> wide =
      jit::compile(*variants::byName("none"), backwardOptions(ElementType::BF16, 256), jit::Stage::Scheduled);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("fa2 backward: head_dim = 256 is not supported"), std::string::npos)
      << wide.status().message();
  StatusOr<jit::CompileResult> split =
      jit::compile(*variants::byName("none"), backwardOptions(ElementType::BF16, 64, "sm_90a", {{"block-m", 48}}),
                   jit::Stage::Scheduled);
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("block-m = 48 is not supported"), std::string::npos)
      << split.status().message();
  jit::CompileOptions fa3 = backwardOptions(ElementType::BF16, 128);
  fa3.schedule.schedule = "fa3";
  StatusOr<jit::CompileResult> other = jit::compile(*variants::byName("none"), fa3, jit::Stage::Scheduled);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("schedule 'fa3' does not schedule backward programs"), std::string::npos)
      << other.status().message();
}

} // namespace
