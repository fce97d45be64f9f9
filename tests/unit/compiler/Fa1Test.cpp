//===- Fa1Test.cpp - the FA1 teaching schedule, without a GPU -------------===//
//
// fa1 (schedules/fa1/): FlashAttention-1's orchestration, one launch per K/V tile with the online-softmax state in
// global memory between launches. Here: its knobs are validated with errors naming the knob; the scheduled program
// has the K/V step structure (tile.state_load, the "may" rule bounded by the step's tile, tile.state_store before
// tile.finalize); the interpreter runs it over packed sequences (an empty one included) and visits exactly the K/V
// tiles fa2 visits; every built-in variant's kernel compiles with NVRTC for sm_80 and sm_90a, and its KernelInfo
// says it is launched per K/V step. Every built-in variant is checked against the reference under fa1 in
// VariantTest.cpp and InterpreterTest.cpp.
//===----------------------------------------------------------------------===//
#include "Printers.h"
#include "AttentionReference.h"
#include "PlanSupport.h"
#include "TestSupport.h"

#include "Variants.h"
#include "codegen/common/CudaEmitter.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/Nvrtc.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "passes/IR/TileDialect.h"
#include "schedules/fa1/Fa1Config.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

using namespace mlir;
using namespace flashtile;
using flashtile::interp::Problem;

namespace {

using flashtile::testing::buildProgram;
using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;
using flashtile::testing::Outputs;
using flashtile::testing::problem;
using flashtile::testing::scheduledFa1;
using flashtile::testing::seedFor;

TEST(Fa1Config, BadKnobsNameTheKnobAndTheAcceptedValues) {
  fa1::Fa1Config c = fa1::Fa1Config::defaultsFor(128, 128);
  EXPECT_FALSE(c.validate(128, 128));
  EXPECT_EQ(fa1::Fa1Config::defaultsFor(256, 256).blockN, 32);
  c.blockM = 48; // not a multiple of 16 x 4 warps
  ASSERT_TRUE(c.validate(128, 128));
  EXPECT_NE(c.validate(128, 128)->find("fa1: block-m = 48 is not supported; accepted: a multiple of 16 x warps (64)"),
            std::string::npos)
      << *c.validate(128, 128);
  c = fa1::Fa1Config{};
  c.blockN = 24;
  ASSERT_TRUE(c.validate(64, 64));
  EXPECT_NE(c.validate(64, 64)->find("fa1: block-n = 24"), std::string::npos);

  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "causal", ElementType::BF16, 64);
  ASSERT_TRUE(program);
  EXPECT_FALSE(scheduledFa1(*program, {{"block-m", 48}}));
  EXPECT_NE(diags.text.find("fa1: block-m = 48 is not supported"), std::string::npos) << diags.text;
  std::string error;
  EXPECT_FALSE(scheduledFa1(*program, {{"stages", 2}}, &error));
  EXPECT_NE(error.find("stages"), std::string::npos) << error; // fa1 has no stages knob
}

TEST(Fa1Steps, TheProgramIsOneKvStep) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "causal", ElementType::BF16, 64);
  OwningOpRef<ModuleOp> fa1 = scheduledFa1(*program);
  ASSERT_TRUE(fa1) << diags.text;
  tile::FuncOp func = funcOf(*fa1);
  EXPECT_EQ(func.getScheduleAttr().getName(), "fa1");
  EXPECT_TRUE(func.getBody().getOps<tile::InitStateOp>().empty());
  auto loads = func.getBody().getOps<tile::StateLoadOp>();
  auto stores = func.getBody().getOps<tile::StateStoreOp>();
  ASSERT_EQ(std::distance(loads.begin(), loads.end()), 1);
  ASSERT_EQ(std::distance(stores.begin(), stores.end()), 1);
  // The state is stored after every K/V loop and finalized from the stored state.
  tile::StateStoreOp store = *stores.begin();
  for (tile::KvLoopOp loop : func.getBody().getOps<tile::KvLoopOp>())
    EXPECT_TRUE(loop->isBeforeInBlock(store));
  auto fins = func.getBody().getOps<tile::FinalizeOp>();
  ASSERT_EQ(std::distance(fins.begin(), fins.end()), 1);
  EXPECT_EQ((*fins.begin()).getStats(), store.getStatsOut());
  EXPECT_EQ((*fins.begin()).getAcc(), store.getAccOut());
  // The walk is bounded by the launch's K/V step.
  bool readsStep = false;
  func.walk([&](tile::DimOp dim) { readsStep |= dim.getDim() == tile::Dim::KvStep; });
  EXPECT_TRUE(readsStep);
}

TEST(Fa1Steps, VisitsTheTilesFa2VisitsOnPackedSequences) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "causal", ElementType::F16, 64);
  OwningOpRef<ModuleOp> fa1 = scheduledFa1(*program, {{"block-m", 32}, {"block-n", 16}, {"warps", 2}});
  ASSERT_TRUE(fa1) << diags.text;
  OwningOpRef<ModuleOp> fa2 =
      flashtile::testing::scheduled(*program, fa2::Fa2Options{.blockM = 32, .blockN = 16, .warps = 2, .stages = 1});
  ASSERT_TRUE(fa2) << diags.text;
  // Four sequences: 1 query over no key, 2 over 1, 40 over 100, 70 over 77.
  Problem p = problem(4, 113, 178, 4, 2, 64);
  p.cuSeqlensQ = {0, 1, 3, 43, 113};
  p.cuSeqlensK = {0, 0, 1, 101, 178};
  Problem packed = p;
  packed.batch = 1; // randomInputs sizes by batch: the packed tensors are one entry of total rows
  test::Inputs in = test::randomInputs(packed, seedFor("VisitsTheTilesFa2VisitsOnPackedSequences"));
  Outputs unscheduled, stepped, split;
  interp::RunStats stepStats, fa2Stats;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*program), p, in.q, in.k, in.v, unscheduled.o, unscheduled.lse)))
      << diags.text;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*fa1), p, in.q, in.k, in.v, stepped.o, stepped.lse, &stepStats)))
      << diags.text;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*fa2), p, in.q, in.k, in.v, split.o, split.lse, &fa2Stats))) << diags.text;
  EXPECT_LE(test::maxAbsDiff(split.o, unscheduled.o), 2e-3) << "fa2";
  EXPECT_LE(test::maxAbsDiff(stepped.o, unscheduled.o), 2e-3);
  for (size_t i = 0; i < stepped.lse.size(); ++i)
    EXPECT_TRUE(stepped.lse[i] == unscheduled.lse[i] || std::fabs(stepped.lse[i] - unscheduled.lse[i]) <= 1e-4f)
        << "LSE row " << i << ": " << stepped.lse[i] << " vs " << unscheduled.lse[i] << " (fa2 " << split.lse[i] << ")";
  // The sequence without keys: O = 0, LSE = -inf.
  for (int h = 0; h < 4; ++h)
    EXPECT_EQ(stepped.lse[h * 113 + 0], -std::numeric_limits<float>::infinity());
  // Each (Q tile, K/V tile) pair the KV-range rules allow is visited once, over all the steps, as fa2 visits it.
  EXPECT_EQ(stepStats.kTileLoads, fa2Stats.kTileLoads);
}

TEST(Fa1Steps, AStepThatForgetsToStoreItsStateIsReported) {
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, "none", ElementType::BF16, 64);
  OwningOpRef<ModuleOp> fa1 = scheduledFa1(*program, {{"block-n", 16}});
  ASSERT_TRUE(fa1) << diags.text;
  // Planted past the verifier (the interpreter runs what it is given): the state goes straight to finalize, so
  // step 1 would start from nothing.
  tile::FuncOp func = funcOf(*fa1);
  tile::StateStoreOp store = *func.getBody().getOps<tile::StateStoreOp>().begin();
  store.getStatsOut().replaceAllUsesWith(store.getStats());
  store.getAccOut().replaceAllUsesWith(store.getAcc());
  store.erase();
  Problem p = problem(1, 20, 40, 1, 1, 64);
  test::Inputs in = test::randomInputs(p, 3);
  Outputs out;
  EXPECT_TRUE(failed(interp::run(func, p, in.q, in.k, in.v, out.o, out.lse)));
  EXPECT_NE(diags.text.find("K/V step 1 reads a state that step 0 did not store (tile.state_store) for these rows"),
            std::string::npos)
      << diags.text;
}

//===----------------------------------------------------------------------===//
// The kernels compile with NVRTC and say how they are launched
//===----------------------------------------------------------------------===//

using Fa1Case = std::tuple<std::string, ElementType, int, std::string>; // variant, dtype, head dim, arch

class Fa1Compiles : public ::testing::TestWithParam<Fa1Case> {};

TEST_P(Fa1Compiles, ToACubin) {
  auto [variantName, dtype, headDim, arch] = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, variantName, dtype, headDim);
  ASSERT_TRUE(program);
  PassManager pm(&context);
  std::string error;
  ASSERT_TRUE(succeeded(schedule::buildPipeline(pm, schedule::Request{"fa1", arch, "default", {}}, error))) << error;
  ASSERT_TRUE(succeeded(pm.run(*program))) << diags.text;
  FailureOr<codegen::EmittedKernel> kernel = codegen::emitCuda(funcOf(*program));
  ASSERT_TRUE(succeeded(kernel)) << diags.text;
  const KernelInfo &info = kernel->info;
  EXPECT_EQ(info.schedule, "fa1");
  ASSERT_TRUE(plans::mainLaunch(info).repeat.has_value());
  EXPECT_EQ(plans::mainLaunch(info).repeatField, "kvStep");
  EXPECT_TRUE(plans::bindsField(info, "stateAcc"));
  EXPECT_FALSE(info.splitKv());
  EXPECT_FALSE(plans::setsField(info, "qTiles"));
  Status valid = info.verify();
  EXPECT_TRUE(valid.ok()) << valid.message();
  StatusOr<KernelInfo> parsed = KernelInfo::parse(info.serialize());
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(plans::mainLaunch(*parsed).repeatField, "kvStep");
  // The state moves through the workspace, and the step bounds the walk.
  EXPECT_NE(kernel->source.find("p.stateAcc"), std::string::npos);
  EXPECT_NE(kernel->source.find("p.kvStep"), std::string::npos);
  StatusOr<std::string> cubin = compileCuda(kernel->source, info.entry + ".cu", arch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message() << "\n---- generated source ----\n" << kernel->source;
  EXPECT_NE(cubin->find(info.entry), std::string::npos);
}

std::string fa1CaseName(const ::testing::TestParamInfo<Fa1Case> &info) {
  auto [variant, dtype, headDim, arch] = info.param;
  return variant + "_" + (dtype == ElementType::BF16 ? "bf16" : "f16") + "_d" + std::to_string(headDim) + "_" + arch;
}

INSTANTIATE_TEST_SUITE_P(Fa1, Fa1Compiles,
                         ::testing::Combine(::testing::Values("none", "causal"),
                                            ::testing::Values(ElementType::BF16, ElementType::F16),
                                            ::testing::Values(64, 256), ::testing::Values("sm_80", "sm_90a")),
                         fa1CaseName);
INSTANTIATE_TEST_SUITE_P(Fa1Variants, Fa1Compiles,
                         ::testing::Combine(::testing::Values("causal_top_left", "sliding_window",
                                                              "sliding_window_causal", "softcap", "softcap_causal",
                                                              "alibi", "alibi_per_batch", "alibi_causal", "sinks",
                                                              "sinks_causal", "document_mask"),
                                            ::testing::Values(ElementType::BF16), ::testing::Values(128),
                                            ::testing::Values("sm_80", "sm_90a")),
                         fa1CaseName);

} // namespace
