// PlanRunnerTest.cpp — the runtime executes launch plans as data: the order of a module's kernels, their grids,
// the workspaces and the fields that point into them, repeated launches and programmatic dependent launch, against
// stand-ins of the driver's calls (no GPU, no libcuda).
#include "runtime/lib/PlanRunner.h"
#include "StandInDriver.h"
#include "TestUtil.h"
#include "codegen/common/LaunchPlanner.h"

#include "flashtile/runtime/SplitKv.h"

#include <gmock/gmock.h>

#include <map>

using namespace flashtile;
using testing::HasSubstr;

namespace {

using stand_in::device;
using stand_in::Launch;

/// The runtime's workspace: the buffer it allocated last (a grown workspace is a new one).
CUdeviceptr workspace() { return device.lastAllocation; }

class PlanRunner : public ::testing::Test {
protected:
  void SetUp() override { device = stand_in::Device(); }

  Status run(const KernelInfo &info, const AttentionArgs &args, const BackwardArgs *backward = nullptr) {
    auto kernel = std::make_shared<const CachedKernel>(CachedKernel{info, ""});
    StatusOr<detail::LoadedModule> module = detail::loadModule(driver, reinterpret_cast<CUcontext>(0x2), kernel);
    if (!module.ok())
      return module.status();
    detail::PlanServices services{workspaces, [] { return StatusOr<int>(132); }};
    return detail::runPlan(driver, *module, args, nullptr, services, backward);
  }

  CudaDriver driver = stand_in::standInDriver();
  detail::SplitKvWorkspaces workspaces;
};

/// One query row of 32 heads over 8 K/V heads and `keys` keys, batch `batch`, head dim 128.
AttentionArgs decodeCall(int batch, int keys) {
  alignas(256) static char tensor[256];
  AttentionArgs args = AttentionArgs::contiguous(DType::BF16, tensor, tensor, tensor, tensor,
                                                 reinterpret_cast<float *>(tensor), batch, 1, keys, 32, 8, 128);
  args.variant = "causal";
  return args;
}

TEST_F(PlanRunner, SplitModulesRunAttentionThenCombineWithTheirWorkspace) {
  const KernelInfo info = test::splitKvKernel();
  AttentionArgs args = decodeCall(2, 8192);
  args.numSplits = 3;
  ASSERT_TRUE(run(info, args).ok());
  ASSERT_EQ(device.launches.size(), 2u);
  const Launch &attention = device.launches[0], &combine = device.launches[1];
  EXPECT_EQ(attention.entry, info.entry);
  EXPECT_EQ(combine.entry, info.entry + "_combine");
  // One 64-row Q tile x 3 splits per (query head, batch); the combine grid one row a block.
  EXPECT_EQ(attention.grid, (std::array<unsigned, 3>{3, 32, 2}));
  EXPECT_EQ(attention.threads, 128u);
  EXPECT_EQ(attention.smem, 82944u);
  EXPECT_FALSE(attention.dependent);
  EXPECT_EQ(combine.grid, (std::array<unsigned, 3>{1, 32, 2}));
  EXPECT_TRUE(combine.dependent) << "the combine grid launches by programmatic dependent launch";
  // The partials live in the runtime's buffer for the stream, laid out as splitKvWorkspaceBytes says.
  const long long rows = 2 * 32 * 1;
  EXPECT_GE(device.lastAllocationBytes, splitKvWorkspaceBytes(rows, 128, 3));
  for (const Launch &l : device.launches) {
    EXPECT_EQ(l.params.numSplits, 3);
    EXPECT_EQ(l.params.accumSplitStride, rows);
    EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.oAccum), workspace());
    EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.lseAccum), workspace() + splitKvLseOffset(rows, 128, 3));
  }
  EXPECT_TRUE(device.memsets.empty()) << "partials are written whole; nothing is zeroed";
}

TEST_F(PlanRunner, OneSplitRunsTheAttentionKernelAlone) {
  AttentionArgs args = decodeCall(2, 8192);
  args.numSplits = 1;
  ASSERT_TRUE(run(test::splitKvKernel(), args).ok());
  ASSERT_EQ(device.launches.size(), 1u);
  EXPECT_EQ(device.launches[0].params.numSplits, 1);
  EXPECT_EQ(device.lastAllocationBytes, 0u);
}

TEST_F(PlanRunner, CacheModulesAppendFirstOnlyWhenThereAreNewKeys) {
  const KernelInfo info = test::splitKvKernel("flashtile_decode_causal_bf16_d128_kvcache", true, true);
  AttentionArgs args = decodeCall(2, 8192);
  args.numSplits = 2;
  ASSERT_TRUE(run(info, args).ok());
  ASSERT_EQ(device.launches.size(), 2u) << "no new keys: no append";
  EXPECT_EQ(device.launches[0].entry, info.entry);
  // GQA packing: the 4 query heads of a K/V head are rows of one block, grid.y the K/V heads.
  EXPECT_EQ(device.launches[0].grid, (std::array<unsigned, 3>{2, 8, 2}));
}

TEST_F(PlanRunner, ACallersWorkspaceMustHoldThePlansWorkspaces) {
  AttentionArgs args = decodeCall(2, 8192);
  args.numSplits = 3;
  static float small[16];
  args.workspace = small;
  args.workspaceBytes = sizeof(small);
  Status status = run(test::splitKvKernel(), args);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("workspaceBytes is 64; kernel flashtile_decode_causal_bf16_d128 (schedule "
                                          "decode) needs "));
  EXPECT_THAT(status.message(), HasSubstr("(partials "));
  EXPECT_TRUE(device.launches.empty()) << "a call launches whole or not at all";
}

TEST_F(PlanRunner, UnderCaptureWithoutAWorkspaceASplitPlanRunsUnsplit) {
  device.capturing = true;
  AttentionArgs args = decodeCall(2, 8192);
  args.numSplits = 3;
  ASSERT_TRUE(run(test::splitKvKernel(), args).ok());
  ASSERT_EQ(device.launches.size(), 1u);
  EXPECT_EQ(device.launches[0].params.numSplits, 1);
  EXPECT_EQ(device.lastAllocationBytes, 0u);
}

TEST_F(PlanRunner, UnderCaptureACallersWorkspaceOfTheQueriedSizeRunsTheSplitPlan) {
  // What flashtile_forward_workspace_size answers (Runtime::forwardWorkspaceBytes): the bytes the call lays out, with
  // the splits it would choose; a caller's workspace of that size lets a captured call split as an uncaptured one.
  const KernelInfo info = test::splitKvKernel();
  AttentionArgs args = decodeCall(2, 8192);
  args.numSplits = 3;
  StatusOr<size_t> bytes = detail::forwardWorkspaceBytes(info, args, 132, 1);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(*bytes, static_cast<size_t>(splitKvWorkspaceBytes(2 * 32, 128, 3)));
  args.numSplits = 1;
  StatusOr<size_t> unsplit = detail::forwardWorkspaceBytes(info, args, 132, 1);
  ASSERT_TRUE(unsplit.ok());
  EXPECT_EQ(*unsplit, 0u) << "one split: no partials";
  args.numSplits = 3;
  device.capturing = true;
  alignas(256) static unsigned char callers[1 << 20];
  ASSERT_GE(sizeof(callers), *bytes);
  args.workspace = callers;
  args.workspaceBytes = *bytes;
  ASSERT_TRUE(run(info, args).ok());
  ASSERT_EQ(device.launches.size(), 2u) << "the split plan: attention, then the combine";
  EXPECT_EQ(device.launches[0].params.numSplits, 3);
  EXPECT_EQ(reinterpret_cast<unsigned char *>(device.launches[0].params.oAccum), callers);
  EXPECT_EQ(device.lastAllocationBytes, 0u) << "nothing allocated under capture";
  args.workspaceBytes = *bytes - 4;
  device.launches.clear();
  Status shortOne = run(info, args);
  ASSERT_FALSE(shortOne.ok());
  EXPECT_THAT(shortOne.message(), HasSubstr("needs " + std::to_string(*bytes)));
}

TEST_F(PlanRunner, ZeroedWorkspacesAreSetBeforeTheLaunch) {
  KernelInfo info = test::fakeKernel().info;
  codegen::ModuleFacts facts = test::mainFacts(info, 384, 200000);
  facts.tensorMaps = false; // descriptors need the driver's encoder; the counter is what this test is about
  facts.persistent = facts.dynamicWork = true;
  info.plan = codegen::planLaunches(facts);
  AttentionArgs args = decodeCall(2, 8192);
  args.seqlenQ = 1000;
  ASSERT_TRUE(run(info, args).ok());
  ASSERT_EQ(device.memsets.size(), 1u);
  EXPECT_EQ(device.memsets[0], (std::pair<CUdeviceptr, size_t>{workspace(), 1}));
  ASSERT_EQ(device.launches.size(), 1u);
  const Launch &l = device.launches[0];
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.tileCounter), workspace());
  EXPECT_EQ(l.params.qTiles, 8);                                  // ceil(1000 / 128)
  EXPECT_EQ(l.grid, (std::array<unsigned, 3>{132, 1, 1}));       // min(8 x 32 x 2 units, 132 SMs)
  // Under capture a plan that needs a workspace the runtime would own is an error naming what it needs.
  device.capturing = true;
  Status captured = run(info, args);
  ASSERT_FALSE(captured.ok());
  EXPECT_THAT(captured.message(), HasSubstr("needs a workspace (tile_counter 4 bytes); under CUDA graph capture"));
}

TEST_F(PlanRunner, RepeatedLaunchesCountTheirStep) {
  KernelInfo info = test::fakeKernel().info;
  codegen::ModuleFacts facts = test::mainFacts(info, 128, 40000);
  facts.kvSteps = true;
  info.plan = codegen::planLaunches(facts);
  AttentionArgs args = decodeCall(1, 200); // ceil(200 / 64) = 4 K/V tiles
  ASSERT_TRUE(run(info, args).ok());
  ASSERT_EQ(device.launches.size(), 4u);
  for (int step = 0; step < 4; ++step) {
    EXPECT_EQ(device.launches[step].params.kvStep, step);
    EXPECT_EQ(reinterpret_cast<CUdeviceptr>(device.launches[step].params.stateAcc), workspace());
    EXPECT_EQ(reinterpret_cast<CUdeviceptr>(device.launches[step].params.stateMax), workspace() + 32 * 128 * 4);
  }
}

// A backward module's plan: three kernels in order, workspaces bound to the backward's fields (one only in
// deterministic mode), and the parameter block carrying the gradients and their strides.
TEST_F(PlanRunner, BackwardPlansBindTheGradientsAndTheirWorkspaces) {
  KernelInfo info = test::fakeKernel().info;
  info.kind = std::string(kBackwardKind);
  std::map<std::string, std::string, std::less<>> fields = {
      {"launch.0.entry", "bwd_pre"},
      {"launch.0.grid", "cdiv(rows, 64); heads_q; batch"},
      {"launch.0.smemBytes", "0"},
      {"launch.0.threads", "128"},
      {"launch.1.entry", "bwd_main"},
      {"launch.1.grid", "cdiv(keys, 64); heads_q; batch"},
      {"launch.1.smemBytes", "0"},
      {"launch.1.threads", "256"},
      {"launch.2.entry", "bwd_post"},
      {"launch.2.grid", "cdiv(rows, 64); heads_q; batch"},
      {"launch.2.smemBytes", "0"},
      {"launch.2.threads", "128"},
      {"workspace.0.name", "delta"},
      {"workspace.0.bytes", "lse_rows * 4"},
      {"workspace.0.bind", "delta@0"},
      {"workspace.1.name", "dq_accum"},
      {"workspace.1.bytes", "lse_rows * head_dim * 4"},
      {"workspace.1.zeroed", "1"},
      {"workspace.1.bind", "dqAccum@0"},
      {"workspace.2.name", "dkv_accum"},
      {"workspace.2.bytes", "key_rows * heads_q * (head_dim + head_dim_v) * 4"},
      {"workspace.2.when", "heads_q != heads_kv"},
      {"workspace.2.bind", "dkAccum@0;dvAccum@key_rows * heads_q * head_dim * 4"},
      {"workspace.3.name", "semaphores"},
      {"workspace.3.bytes", "cdiv(rows, 64) * heads_q * batch * 4"},
      {"workspace.3.when", "deterministic"},
      {"workspace.3.zeroed", "1"},
      {"workspace.3.bind", "semaphores@0"}};
  StatusOr<LaunchPlan> plan = LaunchPlan::parse(fields);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  info.plan = *plan;
  alignas(256) static char tensor[256];
  BackwardArgs args;
  args.forward = AttentionArgs::contiguous(DType::BF16, tensor, tensor, tensor, tensor,
                                           reinterpret_cast<float *>(tensor), 2, 100, 300, 8, 2, 64);
  args.dO = tensor + 16;
  args.dQ = tensor + 32;
  args.dK = tensor + 48;
  args.dV = tensor + 64;
  args.dOStride = {8 * 100 * 64, 8 * 64, 64, 1};
  args.dQStride = {8 * 104 * 64, 8 * 64, 64, 1};
  args.dKStride = {2 * 300 * 64, 2 * 64, 64, 1};
  args.dVStride = {2 * 304 * 64, 2 * 64, 64, 1};
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "atomics");
    device.launches.clear();
    device.memsets.clear();
    args.deterministic = deterministic;
    auto kernel = std::make_shared<const CachedKernel>(CachedKernel{info, ""});
    StatusOr<detail::LoadedModule> module = detail::loadModule(driver, reinterpret_cast<CUcontext>(0x2), kernel);
    ASSERT_TRUE(module.ok()) << module.status().message();
    detail::PlanServices services{workspaces, [] { return StatusOr<int>(132); }};
    Status s = detail::runPlan(driver, *module, args.forward, nullptr, services, &args);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(device.launches.size(), 3u);
    EXPECT_EQ(device.launches[0].entry, "bwd_pre");
    EXPECT_EQ(device.launches[1].entry, "bwd_main");
    EXPECT_EQ(device.launches[2].entry, "bwd_post");
    EXPECT_EQ(device.launches[1].grid, (std::array<unsigned, 3>{5, 8, 2})); // ceil(300 / 64) K/V tiles
    const long long lseRows = 2 * 8 * 100, keyRows = 2 * 300;
    const CUdeviceptr dqAccum = workspace() + lseRows * 4;
    const CUdeviceptr dkAccum = dqAccum + lseRows * 64 * 4;
    const CUdeviceptr semaphores = dkAccum + keyRows * 8 * 128 * 4;
    for (const Launch &l : device.launches) {
      EXPECT_EQ(l.params.dO, args.dO);
      EXPECT_EQ(l.params.dQ, args.dQ);
      EXPECT_EQ(l.params.dK, args.dK);
      EXPECT_EQ(l.params.dV, args.dV);
      EXPECT_EQ(l.params.dQBatchStride, 8 * 104 * 64);
      EXPECT_EQ(l.params.dVBatchStride, 2 * 304 * 64);
      EXPECT_EQ(l.params.dORowStride, 8 * 64);
      EXPECT_EQ(l.params.dKHeadStride, 64);
      EXPECT_EQ(l.params.deterministic, deterministic ? 1 : 0);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.delta), workspace());
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.dqAccum), dqAccum);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.dkAccum), dkAccum);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.dvAccum), dkAccum + keyRows * 8 * 64 * 4);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.semaphores), deterministic ? semaphores : 0);
    }
    // The dQ accumulator, and the semaphores where they are needed, start at zero; delta and the partials do not.
    std::vector<std::pair<CUdeviceptr, size_t>> zeroed = {{dqAccum, static_cast<size_t>(lseRows * 64)}};
    if (deterministic)
      zeroed.emplace_back(semaphores, 2 * 8 * 2);
    EXPECT_EQ(device.memsets, zeroed);
  }
}

TEST_F(PlanRunner, TheBackwardPlannersPlanRunsItsThreeKernelsAndZeroesItsAccumulators) {
  KernelInfo info = test::fakeKernel().info;
  info.kind = std::string(kBackwardKind);
  info.plan = codegen::planBackwardLaunches({"bwd_pre", "bwd_main", "bwd_post", 64, 64, 128, 81920});
  ASSERT_TRUE(info.plan.verify(227 * 1024).ok());
  alignas(256) static char tensor[256];
  for (int headsKv : {8, 2}) {
    SCOPED_TRACE(headsKv == 8 ? "MHA" : "GQA");
    device.launches.clear();
    device.memsets.clear();
    BackwardArgs args;
    args.forward = AttentionArgs::contiguous(DType::BF16, tensor, tensor, tensor, tensor,
                                             reinterpret_cast<float *>(tensor), 2, 100, 300, 8, headsKv, 128);
    args.dO = args.dQ = args.dK = args.dV = tensor;
    args.dOStride = args.dQStride = {8 * 100 * 128, 8 * 128, 128, 1};
    args.dKStride = args.dVStride = {headsKv * 300 * 128, headsKv * 128, 128, 1};
    Status s = run(info, args.forward, &args);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(device.launches.size(), 3u);
    // Q tiles of 64 rows, K/V tiles of 64 keys, and tiles of the longer of the two for the postprocess.
    EXPECT_EQ(device.launches[0].grid, (std::array<unsigned, 3>{2, 8, 2}));
    EXPECT_EQ(device.launches[1].grid, (std::array<unsigned, 3>{5, 8, 2}));
    EXPECT_EQ(device.launches[2].grid, (std::array<unsigned, 3>{5, 8, 2}));
    EXPECT_EQ(device.launches[1].smem, 81920u);
    const long long lseRows = 2 * 8 * 100, keyRows = 2 * 300;
    const CUdeviceptr dqAccum = workspace() + (lseRows * 4 + 255) / 256 * 256;
    const CUdeviceptr dkAccum = dqAccum + (lseRows * 128 * 4 + 255) / 256 * 256;
    const size_t dkWords = keyRows * headsKv * 128;
    for (const Launch &l : device.launches) {
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.delta), workspace());
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.dqAccum), dqAccum);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.dkAccum), headsKv == 8 ? 0 : dkAccum);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.dvAccum), headsKv == 8 ? 0 : dkAccum + dkWords * 4);
    }
    // The dQ accumulator starts at zero, and under GQA the dK and dV accumulators; D is written before it is read.
    std::vector<std::pair<CUdeviceptr, size_t>> zeroed = {{dqAccum, static_cast<size_t>(lseRows * 128)}};
    if (headsKv != 8)
      zeroed.emplace_back(dkAccum, 2 * dkWords);
    EXPECT_EQ(device.memsets, zeroed);
  }
}

/// Deterministic mode and input gradients: the semaphores (one int per (batch, query head, Q tile), then under GQA
/// one per (batch, K/V head, K/V tile)) and the blocks' shares of the input gradients are zeroed workspaces, the tile
/// counts are set, the summing kernel runs last on one block, and the size query gives the bytes the call lays out.
TEST_F(PlanRunner, TheBackwardPlansDeterministicModeAndInputGradientsHaveZeroedWorkspaces) {
  KernelInfo info = test::fakeKernel().info;
  info.kind = std::string(kBackwardKind);
  codegen::BackwardFacts facts{"bwd_pre", "bwd_main", "bwd_post", 64, 64, 128, 81920};
  facts.mainInputTerms = 1;      // ALiBi's slope
  facts.preprocessInputTerms = 2; // two reads of a sink hook
  facts.inputGradsEntry = "bwd_input_grads";
  info.plan = codegen::planBackwardLaunches(facts);
  ASSERT_TRUE(info.plan.verify(227 * 1024).ok());
  alignas(256) static char tensor[256];
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "default");
    device.launches.clear();
    device.memsets.clear();
    BackwardArgs args;
    args.forward = AttentionArgs::contiguous(DType::BF16, tensor, tensor, tensor, tensor,
                                             reinterpret_cast<float *>(tensor), 2, 100, 300, 8, 2, 128);
    args.dO = args.dQ = args.dK = args.dV = tensor;
    args.dOStride = args.dQStride = {8 * 100 * 128, 8 * 128, 128, 1};
    args.dKStride = args.dVStride = {2 * 300 * 128, 2 * 128, 128, 1};
    args.deterministic = deterministic;
    Status s = run(info, args.forward, &args);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(device.launches.size(), 4u);
    EXPECT_EQ(device.launches[3].grid, (std::array<unsigned, 3>{1, 1, 1}));
    const long long lseRows = 2 * 8 * 100, keyRows = 2 * 300, qTiles = 2, kvTiles = 5;
    auto up = [](long long bytes) { return (bytes + 255) / 256 * 256; };
    const CUdeviceptr dqAccum = workspace() + up(lseRows * 4);
    const CUdeviceptr dkAccum = dqAccum + up(lseRows * 128 * 4);
    const CUdeviceptr semaphores = dkAccum + up(keyRows * 2 * 128 * 4) + up(keyRows * 2 * 128 * 4);
    const long long semaphoreWords = 2 * 8 * qTiles + 2 * 2 * kvTiles;
    const CUdeviceptr shares = deterministic ? semaphores + up(semaphoreWords * 4) : semaphores;
    const long long shareWords = 2 * 8 * (1 * kvTiles + 2 * qTiles);
    for (const Launch &l : device.launches) {
      EXPECT_EQ(l.params.qTiles, qTiles);
      EXPECT_EQ(l.params.kvTiles, kvTiles);
      EXPECT_EQ(l.params.deterministic, deterministic ? 1 : 0);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.semaphores), deterministic ? semaphores : 0);
      EXPECT_EQ(reinterpret_cast<CUdeviceptr>(l.params.inputGradPartials), shares);
    }
    std::vector<std::pair<CUdeviceptr, size_t>> zeroed = {{dqAccum, static_cast<size_t>(lseRows * 128)},
                                                          {dkAccum, static_cast<size_t>(2 * keyRows * 2 * 128)}};
    // Each workspace is zeroed over its size, rounded up to the alignment (the planner's rule).
    if (deterministic)
      zeroed.emplace_back(semaphores, up(semaphoreWords * 4) / 4);
    zeroed.emplace_back(shares, up(shareWords * 4) / 4);
    EXPECT_EQ(device.memsets, zeroed);
    // What a caller passes as its own workspace (CUDA graph capture): the extent the call laid out.
    StatusOr<size_t> bytes = detail::backwardWorkspaceBytes(info, args);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    EXPECT_EQ(*bytes, static_cast<size_t>(shares + up(shareWords * 4) - workspace()));
  }
}

} // namespace

namespace {

long long evalText(const std::string &text, PlanSymbols symbols = {}) {
  StatusOr<PlanExpr> rule = PlanExpr::parse(text);
  EXPECT_TRUE(rule.ok()) << text << ": " << (rule.ok() ? "" : rule.status().message());
  if (!rule.ok())
    return -1;
  StatusOr<long long> value = rule->eval(symbols);
  EXPECT_TRUE(value.ok()) << text;
  return value.ok() ? *value : -1;
}

std::string parseError(const std::string &text) {
  StatusOr<PlanExpr> rule = PlanExpr::parse(text);
  EXPECT_FALSE(rule.ok()) << text;
  return rule.ok() ? std::string() : rule.status().message();
}

TEST(PlanExpr, ReadsSizesWithTheUsualPrecedence) {
  PlanSymbols s;
  s.rows = 1000;
  s.headsQ = 32;
  s.headsKv = 8;
  s.batch = 2;
  s.splits = 3;
  s.sms = 132;
  EXPECT_EQ(evalText("cdiv(rows, 128) * heads_q * batch", s), 8 * 32 * 2);
  EXPECT_EQ(evalText("1 + 2 * 3 - 4 / 2", s), 5);
  EXPECT_EQ(evalText("(1 + 2) * 3", s), 9);
  EXPECT_EQ(evalText("min(cdiv(cdiv(rows, 128), 2) * heads_q * batch, max(sms, 1))", s), 132);
  EXPECT_EQ(evalText("rows * (heads_q / heads_kv)", s), 4000);
  EXPECT_EQ(evalText("splits > 1", s), 1);
  EXPECT_EQ(evalText("splits >= 4", s), 0);
  EXPECT_EQ(evalText("splits == 3", s), 1);
  EXPECT_EQ(PlanExpr::parse("cdiv(rows,  64)")->text(), "cdiv(rows,  64)") << "a rule prints as written";
  EXPECT_TRUE(PlanExpr::parse("splits * 2")->reads("splits"));
  EXPECT_FALSE(PlanExpr::parse("rows * 2")->reads("splits"));
}

TEST(PlanExpr, BadRulesAreNamedWhereTheyFail) {
  EXPECT_THAT(parseError("rows +"), HasSubstr("expected a number, a size, a call or '('"));
  EXPECT_THAT(parseError("cdiv(rows)"), HasSubstr("cdiv takes two arguments"));
  EXPECT_THAT(parseError("rows rows"), HasSubstr("at character 6: unexpected 'r'"));
  EXPECT_THAT(parseError("colour * 2"), HasSubstr("unknown size 'colour'"));
  EXPECT_THAT(parseError("99999999999999999999"), HasSubstr("a literal past 2^62"));
  // Nesting is bounded before any recursion could exhaust the stack.
  EXPECT_THAT(parseError(std::string(100000, '(') + "1" + std::string(100000, ')')), HasSubstr("nested deeper than 32"));
  // Evaluation errors: division by zero and overflow come back as errors, never as a wrapped number.
  EXPECT_FALSE(PlanExpr::parse("rows / 0")->eval({}).ok());
  EXPECT_FALSE(PlanExpr::parse("cdiv(rows, batch)")->eval({}).ok());
  PlanSymbols huge;
  huge.rows = 1LL << 40;
  EXPECT_FALSE(PlanExpr::parse("rows * rows")->eval(huge).ok());
}

} // namespace
