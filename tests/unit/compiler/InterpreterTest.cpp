//===- InterpreterTest.cpp - the CPU interpreter against naive attention --===//
//
// Every variant, unscheduled and under the fa1, fa2 and fa3 schedules, against a double-precision reference with
// FlashAttention's tolerance rule; then mutated programs that the oracle must reject (a dropped mask, pipeline
// hazards).
// Inputs are random; FLASHTILE_TEST_SEED changes every case's seed.
//===----------------------------------------------------------------------===//
#include "Printers.h"
#include "AttentionReference.h"
#include "TestSupport.h"

#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/AsyncCopies.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "interpreter/ScalarOps.h"
#include "interpreter/TileMath.h"
#include "passes/IR/TileDialect.h"
#include "schedules/fa2/Fa2Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/APFloat.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <functional>
#include <string>

using namespace mlir;
using namespace flashtile;
using flashtile::interp::Problem;
using flashtile::interp::Scalar;

namespace {

using flashtile::testing::buildProgram;
using flashtile::testing::DiagnosticCapture;
using flashtile::testing::fa2TestSchedules;
using flashtile::testing::funcOf;
using flashtile::testing::Outputs;
using flashtile::testing::scheduled;
using flashtile::testing::seedFor;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

Outputs runChecked(tile::FuncOp func, const Problem &p, const test::Inputs &in, DiagnosticCapture &diags) {
  Outputs out;
  EXPECT_TRUE(succeeded(interp::run(func, p, in.q, in.k, in.v, out.o, out.lse))) << diags.text;
  return out;
}

/// `out` against the reference: O within FlashAttention's bound, LSE within 1e-4 relative, rows that see no key
/// exactly O = 0 and LSE = -inf.
void expectMatchesReference(const Outputs &out, const test::Reference &ref, const Problem &p, const std::string &what) {
  double bound = test::errorBound(ref), err = test::maxAbsDiff(out.o, ref.o);
  EXPECT_LE(err, bound) << what << ": max |O - ref| = " << err << " exceeds 2·max|ref_lowp - ref| + 1e-5 = " << bound;
  ASSERT_EQ(out.lse.size(), ref.lse.size()) << what;
  int bad = 0;
  for (size_t row = 0; row < ref.lse.size(); ++row) {
    int64_t b = row / (p.headsQ * p.seqlenQ), h = row / p.seqlenQ % p.headsQ, i = row % p.seqlenQ;
    const float *o = &out.o[((b * p.seqlenQ + i) * p.headsQ + h) * p.headDimV];
    bool ok;
    if (ref.noKeys[row])
      ok = out.lse[row] == -std::numeric_limits<float>::infinity() &&
           std::all_of(o, o + p.headDimV, [](float x) { return x == 0.0f; });
    else
      ok = std::fabs(out.lse[row] - ref.lse[row]) <= 1e-4 * std::max(1.0, std::fabs(ref.lse[row]));
    if (!ok && bad++ < 3)
      ADD_FAILURE() << what << ": row (b " << b << ", h " << h << ", q " << i << "): LSE " << out.lse[row]
                    << ", reference " << ref.lse[row] << (ref.noKeys[row] ? " (sees no key: O must be 0)" : "");
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " rows with a wrong LSE or a nonzero fully masked O";
}

/// One unit in the last place of the dtype at the largest |O|: two correctly rounded outputs whose fp32 values
/// straddle a rounding boundary differ by that much more than their fp32 values do.
double outputUlp(const test::Reference &ref, ElementType dtype) {
  double largest = 0;
  for (double x : ref.o)
    largest = std::max(largest, std::fabs(x));
  int mantissaBits = dtype == ElementType::BF16 ? 7 : 10;
  return largest > 0 ? std::ldexp(1.0, std::ilogb(largest) - mantissaBits) : 0.0;
}

/// Scheduling does not change results: two programs' outputs agree within `bound`.
void expectAgree(const Outputs &a, const Outputs &b, double bound, const std::string &what) {
  double err = test::maxAbsDiff(a.o, b.o);
  EXPECT_LE(err, bound) << what << ": max |O_scheduled - O_unscheduled| = " << err;
  ASSERT_EQ(a.lse.size(), b.lse.size());
  for (size_t i = 0; i < a.lse.size(); ++i) {
    bool same = a.lse[i] == b.lse[i] || std::fabs(a.lse[i] - b.lse[i]) <= 1e-4 * std::max(1.0f, std::fabs(b.lse[i]));
    if (!same) {
      ADD_FAILURE() << what << ": LSE row " << i << " is " << a.lse[i] << " scheduled, " << b.lse[i] << " unscheduled";
      return;
    }
  }
}

//===----------------------------------------------------------------------===//
// Interpreter vs reference, every variant and schedule
//===----------------------------------------------------------------------===//

struct Case {
  std::string variant; // a variants::byName name: "none" (full attention) or "causal"
  ElementType dtype;
  int headDim;
  int seqlenQ, seqlenK;
  int headsQ = 2, headsKv = 2;

  std::string name() const {
    return variant + (dtype == ElementType::BF16 ? "_bf16" : "_f16") + "_d" + std::to_string(headDim) + "_s" +
           std::to_string(seqlenQ) + "x" + std::to_string(seqlenK) + "_h" + std::to_string(headsQ) + "x" +
           std::to_string(headsKv);
  }
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name(); }

/// The cross product of variants, dtypes, head dims and (seqlen_q, seqlen_k): about 3 s in all, so nothing is
/// trimmed; plus grouped-query attention (two query heads per K/V head).
std::vector<Case> cases() {
  const std::pair<int, int> sizes[] = {{1, 1}, {17, 17}, {128, 128}, {300, 300}, {17, 300}, {300, 17}, {128, 1}};
  std::vector<Case> out;
  for (const char *variant : {"none", "causal"})
    for (ElementType dtype : {ElementType::BF16, ElementType::F16})
      for (int headDim : {64, 128})
        for (auto [sq, sk] : sizes)
          out.push_back({variant, dtype, headDim, sq, sk});
  out.push_back({"causal", ElementType::BF16, 128, 200, 256, 4, 2});
  out.push_back({"none", ElementType::F16, 64, 17, 300, 4, 2});
  // Head dims 96 and 32 (fa3's 64-byte swizzled tiles on sm_90a; their own tile sizes under every schedule): fewer
  // shapes, both dtypes.
  for (const char *variant : {"none", "causal"})
    for (auto [headDim, dtype] : {std::pair{96, ElementType::BF16}, {32, ElementType::F16}})
      for (auto [sq, sk] : {std::pair{17, 17}, {128, 128}, {300, 300}, {17, 300}, {300, 17}})
        out.push_back({variant, dtype, headDim, sq, sk});
  out.push_back({"causal", ElementType::BF16, 96, 200, 256, 4, 2});
  return out;
}

class InterpreterVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(InterpreterVsReference, UnscheduledFa1Fa2AndFa3ScheduledMatchTheReference) {
  const Case &c = GetParam();
  MLIRContext context;
  DiagnosticCapture diags(context);
  OwningOpRef<ModuleOp> program = buildProgram(context, c.variant, c.dtype, c.headDim);
  ASSERT_TRUE(program) << diags.text;

  Problem p{2, c.seqlenQ, c.seqlenK, c.headsQ, c.headsKv, c.headDim, c.headDim, 1.0f / std::sqrt(float(c.headDim)), {}};
  uint64_t seed = seedFor(c.name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Inputs in = test::randomInputs(p, seed);
  interp::RoundFn round = c.dtype == ElementType::BF16 ? interp::roundToBf16 : interp::roundToF16;
  test::Reference ref =
      test::referenceAttention(p, in, c.variant == "causal" ? test::Mask::Causal : test::Mask::None, round);

  Outputs unscheduled = runChecked(funcOf(*program), p, in, diags);
  expectMatchesReference(unscheduled, ref, p, "unscheduled");

  for (const auto &[label, options] : fa2TestSchedules()) {
    OwningOpRef<ModuleOp> sched = scheduled(*program, options);
    ASSERT_TRUE(sched) << label << ": the FA2 pipeline failed\n" << diags.text;
    tile::FuncOp func = funcOf(*sched);
    ASSERT_TRUE(func.getScheduleAttr()) << label;
    ASSERT_FALSE(func.getBody().getOps<tile::CopyAsyncOp>().empty()) << label << ": not pipelined";
    Outputs out = runChecked(func, p, in, diags);
    expectMatchesReference(out, ref, p, label);
    // The same bound as against the reference, plus one output ulp: a different accumulation order may move an
    // fp32 value across a rounding boundary of the dtype.
    expectAgree(out, unscheduled, test::errorBound(ref) + outputUlp(ref, c.dtype), label);
  }
  for (const auto &[label, knobs] : flashtile::testing::fa3TestSchedules()) {
    OwningOpRef<ModuleOp> sched = flashtile::testing::scheduledFa3(*program, knobs);
    ASSERT_TRUE(sched) << label << ": the FA3 pipeline failed\n" << diags.text;
    ASSERT_FALSE(funcOf(*sched).getBody().getOps<tile::RoleOp>().empty()) << label << ": no roles";
    Outputs out = runChecked(funcOf(*sched), p, in, diags);
    expectMatchesReference(out, ref, p, label);
    expectAgree(out, unscheduled, test::errorBound(ref) + outputUlp(ref, c.dtype), label);
  }
  for (const auto &[label, knobs] : flashtile::testing::fa1TestSchedules()) {
    OwningOpRef<ModuleOp> sched = flashtile::testing::scheduledFa1(*program, knobs);
    ASSERT_TRUE(sched) << label << ": the FA1 pipeline failed\n" << diags.text;
    ASSERT_FALSE(funcOf(*sched).getBody().getOps<tile::StateLoadOp>().empty()) << label << ": no K/V steps";
    Outputs out = runChecked(funcOf(*sched), p, in, diags);
    expectMatchesReference(out, ref, p, label);
    expectAgree(out, unscheduled, test::errorBound(ref) + outputUlp(ref, c.dtype), label);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, InterpreterVsReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.name(); });

//===----------------------------------------------------------------------===//
// The oracle can fail
//===----------------------------------------------------------------------===//

/// Switches the interpreter's protocol checker off for a scope: the tests that plant a hazard show, with it off, that
/// the checker (not something else) catches it.
struct ProtocolCheckerOff {
  ProtocolCheckerOff() { interp::AsyncCopies::enabled() = false; }
  ~ProtocolCheckerOff() { interp::AsyncCopies::enabled() = true; }
};

/// Causal attention, FA2 with small tiles so that the walk has a masked tail and an unmasked interior; one K and
/// one V buffer (stages = 1), the pipeline the published FA2 uses.
struct CausalFixture : ::testing::Test {
  explicit CausalFixture(int stages = 1) : stages(stages) {}
  int stages;
  MLIRContext context;
  DiagnosticCapture diags{context};
  Problem p{2, 128, 128, 2, 2, 64, 64, 0.125f, {}};
  test::Inputs in = test::randomInputs(p, seedFor(::testing::UnitTest::GetInstance()->current_test_info()->name()));
  OwningOpRef<ModuleOp> program = buildProgram(context, "causal", ElementType::BF16, 64);
  OwningOpRef<ModuleOp> sched =
      program ? scheduled(*program, fa2::Fa2Options{.blockM = 64, .blockN = 32, .warps = 4, .stages = stages})
              : nullptr;

  /// The scheduled program's ops of type T with a given operand name, in every K/V loop.
  template <typename T> SmallVector<T> inLoops(ModuleOp module, tile::Operand operand) {
    SmallVector<T> ops;
    funcOf(module).walk([&](T op) {
      if (op->template getParentOfType<tile::KvLoopOp>() && op.getOperand() == operand)
        ops.push_back(op);
    });
    return ops;
  }
  /// Runs `module`, expecting failure; returns the diagnostics.
  std::string runExpectingFailure(ModuleOp module) {
    diags.text.clear();
    std::vector<float> o, lse;
    EXPECT_TRUE(failed(interp::run(funcOf(module), p, in.q, in.k, in.v, o, lse)));
    return diags.text;
  }
};

TEST_F(CausalFixture, DroppingTheMaskOfABoundarySegmentBreaksTheResult) {
  ASSERT_TRUE(sched) << diags.text;
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  Outputs intact = runChecked(funcOf(*sched), p, in, diags);
  expectMatchesReference(intact, ref, p, "intact schedule");

  int interiors = 0, masksDropped = 0;
  for (auto loop : funcOf(*sched).getBody().getOps<tile::KvLoopOp>()) {
    interiors += loop.getSegment() == tile::Segment::Interior;
    if (loop.getSegment() != tile::Segment::TailBoundary)
      continue;
    loop.getBody().walk([&](tile::MaskOp mask) {
      mask.getResult().replaceAllUsesWith(mask.getS());
      mask.erase();
      ++masksDropped;
    });
  }
  ASSERT_EQ(masksDropped, 1);
  ASSERT_EQ(interiors, 1);
  Outputs broken = runChecked(funcOf(*sched), p, in, diags);
  double err = test::maxAbsDiff(broken.o, ref.o), bound = test::errorBound(ref);
  EXPECT_GT(err, 10 * bound) << "a causal program without its boundary mask must not match the reference";
}

/// The waits of every K/V loop body, in order (stages = 1: K(j)'s, then V(j)'s).
SmallVector<tile::WaitOp> waitsInLoops(ModuleOp module, size_t position) {
  SmallVector<tile::WaitOp> waits;
  for (auto loop : funcOf(module).getBody().getOps<tile::KvLoopOp>()) {
    auto inBody = llvm::to_vector(loop.getBody().front().getOps<tile::WaitOp>());
    if (position < inBody.size())
      waits.push_back(inBody[position]);
  }
  return waits;
}

/// The hazards the tests below plant, each caught by the protocol checker (AsyncCopies), not by a later check.
void waitAfterTheLoad(ModuleOp module, SmallVector<tile::LoadOp> loads) {
  auto waits = waitsInLoops(module, 0);
  ASSERT_FALSE(waits.empty());
  ASSERT_EQ(waits.size(), loads.size());
  for (auto [wait, load] : llvm::zip(waits, loads))
    wait->moveAfter(load);
}

TEST_F(CausalFixture, WaitingAfterTheLoadIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  waitAfterTheLoad(*sched, inLoops<tile::LoadOp>(*sched, tile::Operand::K));
  EXPECT_NE(runExpectingFailure(*sched).find(
                "pipeline hazard: load of k tile 1 from slot 0 of buffer 1 but its copy has not landed"),
            std::string::npos)
      << diags.text;
}

TEST_F(CausalFixture, DroppingAWaitIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  // The wait for V is also the barrier after which K's slot may be refilled: without it the copy of the next
  // K tile races with the threads still reading the current one.
  for (auto wait : waitsInLoops(*sched, 1))
    wait.erase();
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("pipeline hazard: copy of k tile 0 overwrites k tile 1 in slot 0 of buffer 1 with no "
                      "tile.wait barrier since it was read"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("in program instance batch 0, head 0, Q tile 0"), std::string::npos) << text;
}

/// Starts the copy of the next K tile (with the index arithmetic and slot it needs) before the current one is loaded.
void copyBeforeTheLoad(SmallVector<tile::CopyAsyncOp> copies, SmallVector<tile::LoadOp> loads) {
  ASSERT_EQ(copies.size(), loads.size());
  std::function<void(Operation *, Operation *)> hoist = [&](Operation *op, Operation *before) {
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && def->getBlock() == before->getBlock() && before->isBeforeInBlock(def))
        hoist(def, before);
    op->moveBefore(before);
  };
  for (auto [copy, load] : llvm::zip(copies, loads))
    hoist(copy, load);
}

TEST_F(CausalFixture, OverwritingTheSingleKSlotBeforeItIsReadIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  copyBeforeTheLoad(inLoops<tile::CopyAsyncOp>(*sched, tile::Operand::K),
                    inLoops<tile::LoadOp>(*sched, tile::Operand::K));
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("pipeline hazard: load of k tile 1 from slot 0 of buffer 1 but the slot holds k tile 1 and "
                      "the copy of k tile 0 into it is in flight"),
            std::string::npos)
      << text;
}

TEST_F(CausalFixture, WaitingOnAnotherCopysTokenIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  // The prologue's wait names the first K tile's token instead of Q's: Q is read before its copy is known to land.
  auto waitQ = *funcOf(*sched).getBody().getOps<tile::WaitOp>().begin();
  auto copies = llvm::to_vector(funcOf(*sched).getBody().getOps<tile::CopyAsyncOp>());
  ASSERT_EQ(copies.size(), 2u);
  ASSERT_EQ(copies[1].getOperand(), tile::Operand::K);
  waitQ.getTokensMutable().assign(copies[1].getToken());
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("pipeline hazard: load of q tile 0 from slot 0 of buffer 0 but its copy has not landed"),
            std::string::npos)
      << text;
}

TEST_F(CausalFixture, TheHazardsAboveAreCaughtByTheProtocolChecker) {
  ASSERT_TRUE(program) << diags.text;
  // With the checker off, each planted hazard runs to the end (the interpreter reads the tiles from global memory,
  // so the numbers even match): the tests above fail without the checker.
  ProtocolCheckerOff off;
  auto fresh = [&] {
    return scheduled(*program, fa2::Fa2Options{.blockM = 64, .blockN = 32, .warps = 4, .stages = 1});
  };
  std::vector<float> o, lse;
  OwningOpRef<ModuleOp> late = fresh();
  waitAfterTheLoad(*late, inLoops<tile::LoadOp>(*late, tile::Operand::K));
  EXPECT_TRUE(succeeded(interp::run(funcOf(*late), p, in.q, in.k, in.v, o, lse))) << diags.text;
  OwningOpRef<ModuleOp> noBarrier = fresh();
  for (auto wait : waitsInLoops(*noBarrier, 1))
    wait.erase();
  EXPECT_TRUE(succeeded(interp::run(funcOf(*noBarrier), p, in.q, in.k, in.v, o, lse))) << diags.text;
  OwningOpRef<ModuleOp> early = fresh();
  copyBeforeTheLoad(inLoops<tile::CopyAsyncOp>(*early, tile::Operand::K),
                    inLoops<tile::LoadOp>(*early, tile::Operand::K));
  EXPECT_TRUE(succeeded(interp::run(funcOf(*early), p, in.q, in.k, in.v, o, lse))) << diags.text;
}

/// The same program with two K and V buffers, Q·Kᵀ one tile ahead of the softmax (stages = 2).
struct CausalQkAheadFixture : CausalFixture {
  CausalQkAheadFixture() : CausalFixture(2) {}
};

TEST_F(CausalQkAheadFixture, MatchesTheReferenceAndCarriesScores) {
  ASSERT_TRUE(sched) << diags.text;
  int carrying = 0;
  for (auto loop : funcOf(*sched).getBody().getOps<tile::KvLoopOp>())
    carrying += llvm::count_if(loop.getCarried(), [](Value v) { return isa<RankedTensorType>(v.getType()); }) == 1;
  EXPECT_EQ(carrying, 2) << "both segments carry their tile's scores";
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  expectMatchesReference(runChecked(funcOf(*sched), p, in, diags), ref, p, "stages = 2");
}

TEST_F(CausalQkAheadFixture, OneSlotPerOperandIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  // The same IR with one slot in K's and V's buffers: the copy of K(j − 2) goes into the slot K(j − 1) has to be
  // read from.
  funcOf(*sched).walk([&](tile::BufferOp buffer) {
    tile::BufferType type = buffer.getBuffer().getType();
    buffer.getBuffer().setType(tile::BufferType::get(&context, type.getTile(), 1));
  });
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("pipeline hazard: load of k tile 1 from slot 0 of buffer 1 but the slot holds k tile 1 and "
                      "the copy of k tile 0 into it is in flight"),
            std::string::npos)
      << text;
}

TEST_F(CausalQkAheadFixture, DroppingTheBarrierAtTheTopOfTheLoopIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  for (auto wait : waitsInLoops(*sched, 0))
    wait.erase();
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("pipeline hazard:"), std::string::npos) << text;
}

TEST_F(CausalQkAheadFixture, RelyingOnTheOrderOfCopiesIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  // The prologue waits for the first K tile only: on sm80 Q's older copy group would land too (cp.async groups
  // complete in order), but a wait covers only the tokens it names, as TMA copies on mbarriers do.
  auto wait = *funcOf(*sched).getBody().getOps<tile::WaitOp>().begin();
  ASSERT_EQ(wait.getTokens().size(), 2u);
  wait.getTokensMutable().assign(wait.getTokens()[1]);
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("pipeline hazard: load of q tile 0 from slot 0 of buffer 0 but its copy has not landed"),
            std::string::npos)
      << text;
}

TEST_F(CausalQkAheadFixture, SoftmaxOfTheNextTilesScoresIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // Feed the softmax the scores computed for the next tile instead of the carried ones: P no longer matches V.
  auto loop = *funcOf(*sched).getBody().getOps<tile::KvLoopOp>().begin();
  Value carried = loop.getCarriedArgs()[0];
  Value next = loop.getYieldedCarried(0); // computed at the top of the body, before the softmax's first use
  carried.replaceAllUsesWith(next);
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("P covers keys from"), std::string::npos) << text;
}

//===----------------------------------------------------------------------===//
// FA3: roles over a ring of slots with full/empty barriers
//===----------------------------------------------------------------------===//

/// Causal attention under FA3 with small tiles and a two-slot ring: each walk reuses every slot several times.
struct Fa3Fixture : CausalFixture {
  schedule::Knobs knobs{{fa3::kBlockM, 64}, {fa3::kBlockN, 16}, {fa3::kStages, 2}, {fa3::kConsumerWarpgroups, 1}};
  OwningOpRef<ModuleOp> fa3 = program ? flashtile::testing::scheduledFa3(*program, knobs) : nullptr;

  tile::RoleOp role(ModuleOp module, StringRef name) {
    for (auto r : funcOf(module).getBody().getOps<tile::RoleOp>())
      if (r.getName() == name)
        return r;
    return {};
  }
  /// The barrier ops of `role` of type T on the barrier of the `operand` buffer that is full (or empty).
  template <typename T>
  SmallVector<T> barrierOps(ModuleOp module, StringRef roleName, tile::Operand operand, bool full) {
    SmallVector<T> ops;
    role(module, roleName).walk([&](T op) {
      auto barrier = op.getBarrier().template getDefiningOp<tile::BarrierOp>();
      if (barrier && barrier.isFull() == full &&
          barrier.getBuffer().template getDefiningOp<tile::BufferOp>().getOperand() == operand)
        ops.push_back(op);
    });
    return ops;
  }
};

TEST_F(Fa3Fixture, RolesMatchTheReference) {
  ASSERT_TRUE(fa3) << diags.text;
  ASSERT_TRUE(role(*fa3, "producer"));
  ASSERT_TRUE(role(*fa3, "consumer"));
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  expectMatchesReference(runChecked(funcOf(*fa3), p, in, diags), ref, p, "fa3");
}

TEST_F(Fa3Fixture, ReadingASlotBeforeItsFullBarrierIsAPipelineHazard) {
  ASSERT_TRUE(fa3) << diags.text;
  auto waits = barrierOps<tile::BarrierWaitOp>(*fa3, "consumer", tile::Operand::K, /*full=*/true);
  ASSERT_FALSE(waits.empty());
  for (auto wait : waits)
    wait.erase();
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("this role has not waited for the slot's full barrier since the tile landed"),
            std::string::npos)
      << text;
}

TEST_F(Fa3Fixture, OverwritingASlotBeforeItsEmptyBarrierIsAPipelineHazard) {
  ASSERT_TRUE(fa3) << diags.text;
  auto waits = barrierOps<tile::BarrierWaitOp>(*fa3, "producer", tile::Operand::V, /*full=*/false);
  ASSERT_EQ(waits.size(), 1u);
  waits.front().erase();
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("before its empty barrier: this role has not waited for the consumers to release round 0"),
            std::string::npos)
      << text;
}

TEST_F(Fa3Fixture, ASlotNeverReleasedDeadlocks) {
  ASSERT_TRUE(fa3) << diags.text;
  // The consumer never releases V's slots: once the ring is full the producer waits forever, and so does the
  // consumer for the next tile.
  for (auto arrive : barrierOps<tile::BarrierArriveOp>(*fa3, "consumer", tile::Operand::V, /*full=*/false))
    arrive.erase();
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("pipeline deadlock: every role waits on a barrier no other role will complete"),
            std::string::npos)
      << text;
}

/// The consumer's waits for its asynchronous Q·Kᵀ (one per K/V loop segment).
SmallVector<tile::MmaWaitOp> qkWaits(ModuleOp module) {
  SmallVector<tile::MmaWaitOp> waits;
  funcOf(module).walk([&](tile::MmaWaitOp wait) {
    if (wait.getTokens().front().getDefiningOp<tile::QkOp>())
      waits.push_back(wait);
  });
  return waits;
}

TEST_F(Fa3Fixture, ReleasingASlotAnMmaStillReadsIsAPipelineHazard) {
  ASSERT_TRUE(fa3) << diags.text;
  // K's slot released before the asynchronous Q·Kᵀ reading it completed: the producer may overwrite it under the MMA.
  auto waits = qkWaits(*fa3);
  ASSERT_FALSE(waits.empty());
  for (auto wait : waits)
    wait->moveAfter(wait->getNextNode()); // after the barrier_arrive on K's empty barrier
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("while an asynchronous MMA still reads it (no tile.mma_wait on its token)"), std::string::npos)
      << text;
}

TEST_F(Fa3Fixture, ReadingAnMmaResultBeforeItsWaitIsAPipelineHazard) {
  ASSERT_TRUE(fa3) << diags.text;
  // The wait (and the release after it) moved past the first op that reads the scores.
  for (auto wait : qkWaits(*fa3)) {
    Operation *release = wait->getNextNode();
    Operation *reader = *wait.getTokens().front().getDefiningOp<tile::QkOp>().getS().getUsers().begin();
    wait->moveAfter(reader);
    release->moveAfter(wait);
  }
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("pipeline hazard: reads the result of an asynchronous MMA before tile.mma_wait on its token"),
            std::string::npos)
      << text;
}

/// The waits for P·V that the intra-warpgroup overlap keeps in flight across the softmax (a tile.softmax_update
/// between the P·V and its wait).
SmallVector<tile::MmaWaitOp> overlappedPvWaits(ModuleOp module) {
  SmallVector<tile::MmaWaitOp> waits;
  funcOf(module).walk([&](tile::MmaWaitOp wait) {
    auto pv = wait.getTokens().front().getDefiningOp<tile::PvOp>();
    if (!pv || pv->getBlock() != wait->getBlock())
      return;
    for (Operation *op = pv->getNextNode(); op != wait.getOperation(); op = op->getNextNode())
      if (isa<tile::SoftmaxUpdateOp>(op)) {
        waits.push_back(wait);
        return;
      }
  });
  return waits;
}

TEST_F(Fa3Fixture, TheSoftmaxRunsUnderPvButTheRescaleWaitsForIt) {
  ASSERT_TRUE(fa3) << diags.text;
  // The overlap is there: a softmax updates m and l while an asynchronous P·V writes the accumulator.
  auto waits = overlappedPvWaits(*fa3);
  ASSERT_FALSE(waits.empty());
  // Rescaling acc before that P·V completed is a hazard: its wait (and V's release) moved past the rescale.
  for (auto wait : waits) {
    Operation *release = wait->getNextNode(), *rescale = release->getNextNode();
    ASSERT_TRUE(isa<tile::RescaleOp>(rescale));
    wait->moveAfter(rescale);
    release->moveAfter(wait);
  }
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("pipeline hazard: reads the accumulator an asynchronous P·V writes before tile.mma_wait"),
            std::string::npos)
      << text;
}

TEST_F(Fa3Fixture, TheBarrierHazardsAreCaughtByTheProtocolChecker) {
  ASSERT_TRUE(program) << diags.text;
  ProtocolCheckerOff off;
  std::vector<float> o, lse;
  OwningOpRef<ModuleOp> noFullWait = flashtile::testing::scheduledFa3(*program, knobs);
  for (auto wait : barrierOps<tile::BarrierWaitOp>(*noFullWait, "consumer", tile::Operand::K, true))
    wait.erase();
  EXPECT_TRUE(succeeded(interp::run(funcOf(*noFullWait), p, in.q, in.k, in.v, o, lse))) << diags.text;
  OwningOpRef<ModuleOp> noEmptyWait = flashtile::testing::scheduledFa3(*program, knobs);
  for (auto wait : barrierOps<tile::BarrierWaitOp>(*noEmptyWait, "producer", tile::Operand::V, false))
    wait.erase();
  EXPECT_TRUE(succeeded(interp::run(funcOf(*noEmptyWait), p, in.q, in.k, in.v, o, lse))) << diags.text;
  OwningOpRef<ModuleOp> earlyRelease = flashtile::testing::scheduledFa3(*program, knobs);
  for (auto wait : qkWaits(*earlyRelease))
    wait->moveAfter(wait->getNextNode());
  EXPECT_TRUE(succeeded(interp::run(funcOf(*earlyRelease), p, in.q, in.k, in.v, o, lse))) << diags.text;
  OwningOpRef<ModuleOp> lateWait = flashtile::testing::scheduledFa3(*program, knobs);
  for (auto wait : overlappedPvWaits(*lateWait)) {
    Operation *release = wait->getNextNode(), *rescale = release->getNextNode();
    wait->moveAfter(rescale);
    release->moveAfter(wait);
  }
  EXPECT_TRUE(succeeded(interp::run(funcOf(*lateWait), p, in.q, in.k, in.v, o, lse))) << diags.text;
}

/// The same program in persistent blocks (tile.work_loop): two blocks over the 2 x 2 x 2 tiles, so each runs four
/// tiles and its ring positions and Q's phases carry from tile to tile.
struct Fa3PersistentFixture : Fa3Fixture {
  Fa3PersistentFixture() {
    knobs[fa3::kPersistent] = 1;
    fa3 = program ? flashtile::testing::scheduledFa3(*program, knobs) : nullptr;
    p.persistentBlocks = 2;
  }
  /// The consumer's release of Q's slot.
  tile::BarrierArriveOp qRelease(ModuleOp module) {
    auto arrives = barrierOps<tile::BarrierArriveOp>(module, "consumer", tile::Operand::Q, /*full=*/false);
    return arrives.size() == 1 ? arrives.front() : tile::BarrierArriveOp();
  }
};

TEST_F(Fa3PersistentFixture, EachRoleLoopsOverTheWorkTilesAndMatchesTheReference) {
  ASSERT_TRUE(fa3) << diags.text;
  for (StringRef name : {"producer", "consumer"})
    EXPECT_EQ(llvm::range_size(role(*fa3, name).getBody().getOps<tile::WorkLoopOp>()), 1u) << name.str();
  ASSERT_TRUE(qRelease(*fa3));
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  interp::RunStats stats;
  Outputs out;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*fa3), p, in.q, in.k, in.v, out.o, out.lse, &stats))) << diags.text;
  expectMatchesReference(out, ref, p, "fa3 persistent");
  // Every tile ran once, in one of the two blocks: causal Q tile t of 64 rows loads the 4 (t + 1) K tiles of 16 keys
  // up to its last row.
  for (size_t i = 0; i < stats.kTileLoads.size(); ++i)
    EXPECT_EQ(stats.kTileLoads[i], 4 * (static_cast<int64_t>(i % stats.qTiles) + 1)) << "tile " << i;
  // One block, or one per tile, gives the same numbers.
  for (int blocks : {1, 8}) {
    p.persistentBlocks = blocks;
    expectMatchesReference(runChecked(funcOf(*fa3), p, in, diags), ref, p, "fa3 persistent");
  }
}

TEST_F(Fa3PersistentFixture, ReleasingQBeforeItsLastReadIsAPipelineHazard) {
  ASSERT_TRUE(fa3) << diags.text;
  // Q released before the K/V loops: the producer copies the next tile's Q over it while Q·Kᵀ still reads it.
  tile::BarrierArriveOp release = qRelease(*fa3);
  ASSERT_TRUE(release);
  tile::LoadOp loadQ;
  role(*fa3, "consumer").walk([&](tile::LoadOp load) {
    if (load.getOperand() == tile::Operand::Q)
      loadQ = load;
  });
  ASSERT_TRUE(loadQ);
  release->moveAfter(loadQ);
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("which a copy refilled after its tile.load"), std::string::npos) << text;
}

TEST_F(Fa3PersistentFixture, QNeverReleasedDeadlocks) {
  ASSERT_TRUE(fa3) << diags.text;
  qRelease(*fa3).erase();
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("pipeline deadlock: every role waits on a barrier no other role will complete"),
            std::string::npos)
      << text;
}

TEST_F(Fa3PersistentFixture, RingPositionsThatRestartEachTileAreCaught) {
  ASSERT_TRUE(fa3) << diags.text;
  // The producer's K/V ring restarts at position 0 each tile while the consumers' runs on: their phases disagree.
  auto loop = *role(*fa3, "producer").getBody().getOps<tile::WorkLoopOp>().begin();
  OpBuilder b(loop);
  Value zero = arith::ConstantIntOp::create(b, loop.getLoc(), 0, 32);
  loop.getCarriedArgs()[0].replaceAllUsesWith(zero);
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("pipeline"), std::string::npos) << text;
}

TEST_F(Fa3PersistentFixture, TheHazardsAboveAreCaughtByTheProtocolChecker) {
  ASSERT_TRUE(fa3) << diags.text;
  ProtocolCheckerOff off;
  std::vector<float> o, lse;
  tile::LoadOp loadQ;
  role(*fa3, "consumer").walk([&](tile::LoadOp load) {
    if (load.getOperand() == tile::Operand::Q)
      loadQ = load;
  });
  qRelease(*fa3)->moveAfter(loadQ);
  EXPECT_TRUE(succeeded(interp::run(funcOf(*fa3), p, in.q, in.k, in.v, o, lse))) << diags.text;
}

//===----------------------------------------------------------------------===//
// O staged through Q's slot (tile.store o ... through)
//===----------------------------------------------------------------------===//

/// The store of O and the slot it is staged through, if any.
tile::StoreOp storeOf(ModuleOp module) {
  tile::StoreOp found;
  funcOf(module).walk([&](tile::StoreOp store) {
    if (store.getOperand() == tile::Output::O)
      found = store;
  });
  return found;
}

TEST_F(CausalFixture, OIsStagedThroughQsSlotAndMatchesTheReference) {
  ASSERT_TRUE(sched) << diags.text;
  tile::StoreOp store = storeOf(*sched);
  ASSERT_TRUE(store && store.getStaging()) << "the fa2 pipeline stages O through Q's slot";
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  expectMatchesReference(runChecked(funcOf(*sched), p, in, diags), ref, p, "fa2, O staged");
}

/// Reads Q's slot again after O was staged in it.
void readQAfterTheStore(tile::StoreOp store) {
  auto slot = store.getStaging().getDefiningOp<tile::SlotOp>();
  OpBuilder b(store->getContext());
  b.setInsertionPointAfter(store);
  RankedTensorType tileType = cast<tile::SlotType>(slot.getType()).getTile();
  tile::LoadOp::create(b, store.getLoc(), tileType, tile::Operand::Q, Value(), slot, Value());
}

TEST_F(CausalFixture, ReadingQAfterOWasStagedInItsSlotIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  readQAfterTheStore(storeOf(*sched));
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("but tile.store staged O in the slot since its tile landed (the staged tile is dead)"),
            std::string::npos)
      << text;
}

TEST_F(CausalFixture, StagingOWhileACopyFillsTheSlotIsAPipelineHazard) {
  ASSERT_TRUE(sched) << diags.text;
  tile::StoreOp store = storeOf(*sched);
  OpBuilder b(store);
  tile::CopyAsyncOp::create(b, store.getLoc(), tile::Operand::Q, Value(), store.getStaging(), Value(), Value(),
                            Value());
  std::string text = runExpectingFailure(*sched);
  EXPECT_NE(text.find("pipeline hazard: tile.store stages O in slot 0 of buffer 0 while the copy of q tile"),
            std::string::npos)
      << text;
}

TEST_F(CausalFixture, TheStagingHazardsAreCaughtByTheProtocolChecker) {
  ASSERT_TRUE(sched) << diags.text;
  ProtocolCheckerOff off;
  readQAfterTheStore(storeOf(*sched));
  std::vector<float> o, lse;
  EXPECT_TRUE(succeeded(interp::run(funcOf(*sched), p, in.q, in.k, in.v, o, lse))) << diags.text;
}

TEST_F(Fa3Fixture, ABlockATileStagesOInTheConsumersQSlot) {
  ASSERT_TRUE(fa3) << diags.text;
  tile::StoreOp store = storeOf(*fa3);
  ASSERT_TRUE(store && store.getStaging());
  EXPECT_TRUE(store->getParentOfType<tile::RoleOp>().getName() == "consumer");
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  expectMatchesReference(runChecked(funcOf(*fa3), p, in, diags), ref, p, "fa3, O staged");
}

TEST_F(Fa3Fixture, StagingOInASlotAnMmaStillReadsIsAPipelineHazard) {
  ASSERT_TRUE(fa3) << diags.text;
  // An asynchronous Q·Qᵀ issued before the store and never waited on still reads Q's slot when O overwrites it.
  tile::StoreOp store = storeOf(*fa3);
  tile::LoadOp loadQ;
  role(*fa3, "consumer").walk([&](tile::LoadOp load) {
    if (load.getOperand() == tile::Operand::Q)
      loadQ = load;
  });
  ASSERT_TRUE(loadQ);
  OpBuilder b(store);
  auto q = cast<RankedTensorType>(loadQ.getType());
  auto scores = RankedTensorType::get({q.getDimSize(0), q.getDimSize(0)}, b.getF32Type());
  tile::QkOp::create(b, store.getLoc(), scores, tile::TokenType::get(&context), loadQ, loadQ);
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("while an asynchronous MMA still reads it (no tile.mma_wait on its token)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tile.store stages O in slot"), std::string::npos) << text;
}

TEST_F(Fa3PersistentFixture, StagingOReleasesQAfterTheStoreAndMatchesTheReference) {
  knobs[fa3::kStageO] = 1;
  fa3 = flashtile::testing::scheduledFa3(*program, knobs);
  ASSERT_TRUE(fa3) << diags.text;
  tile::StoreOp store = storeOf(*fa3);
  ASSERT_TRUE(store && store.getStaging());
  tile::BarrierArriveOp release = qRelease(*fa3);
  ASSERT_TRUE(release);
  EXPECT_EQ(release->getPrevNode(), store.getOperation()) << "Q's slot is released right after O left through it";
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  for (int blocks : {1, 2, 8}) {
    p.persistentBlocks = blocks;
    expectMatchesReference(runChecked(funcOf(*fa3), p, in, diags), ref, p, "fa3 persistent, O staged");
  }
}

TEST_F(Fa3PersistentFixture, StagingOInTheReleasedQSlotIsAPipelineHazard) {
  ASSERT_TRUE(fa3) << diags.text;
  // A persistent block releases Q's slot after its last Q·Kᵀ (the producer refills it for the next tile): staging O
  // there would race with that copy. The pipeline stores O directly; staging it anyway is caught.
  tile::StoreOp store = storeOf(*fa3);
  ASSERT_TRUE(store && !store.getStaging());
  tile::LoadOp loadQ;
  role(*fa3, "consumer").walk([&](tile::LoadOp load) {
    if (load.getOperand() == tile::Operand::Q)
      loadQ = load;
  });
  store.getStagingMutable().assign(loadQ.getSlot());
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("after this role released its tile (round 0) on the empty barrier: a producer may already be "
                      "refilling it"),
            std::string::npos)
      << text;
  ProtocolCheckerOff off;
  std::vector<float> o, lse;
  EXPECT_TRUE(succeeded(interp::run(funcOf(*fa3), p, in.q, in.k, in.v, o, lse))) << diags.text;
}

/// The dynamic scheduler (tile.work_loop dynamic): the producer takes one Q tile a unit, heaviest first, and hands it
/// to the consumers through the work queue; the blocks split the counter's values among them in any order.
struct Fa3DynamicFixture : Fa3Fixture {
  Fa3DynamicFixture() {
    knobs[fa3::kScheduler] = fa3::kDynamicScheduler;
    fa3 = program ? flashtile::testing::scheduledFa3(*program, knobs) : nullptr;
    p.persistentBlocks = 3;
  }
  /// The consumer's release of the work queue's cell.
  SmallVector<tile::BarrierArriveOp> unitReleases(ModuleOp module) {
    SmallVector<tile::BarrierArriveOp> ops;
    role(module, "consumer").walk([&](tile::BarrierArriveOp op) {
      if (op.getBarrier().getDefiningOp<tile::WorkQueueOp>())
        ops.push_back(op);
    });
    return ops;
  }
};

TEST_F(Fa3DynamicFixture, TheProducerHandsOutUnitsAndAnyOrderMatchesTheReference) {
  ASSERT_TRUE(fa3) << diags.text;
  for (StringRef name : {"producer", "consumer"}) {
    auto loops = role(*fa3, name).getBody().getOps<tile::WorkLoopOp>();
    ASSERT_EQ(llvm::range_size(loops), 1u) << name.str();
    EXPECT_TRUE((*loops.begin()).isDynamic()) << name.str();
    EXPECT_EQ((*loops.begin()).getTake(), name == "producer") << name.str();
  }
  ASSERT_EQ(unitReleases(*fa3).size(), 1u);
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  interp::RunStats stats;
  Outputs out;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*fa3), p, in.q, in.k, in.v, out.o, out.lse, &stats))) << diags.text;
  expectMatchesReference(out, ref, p, "fa3 dynamic");
  // Every tile ran once: causal Q tile t of 64 rows loads the 4 (t + 1) K tiles of 16 keys up to its last row.
  for (size_t i = 0; i < stats.kTileLoads.size(); ++i)
    EXPECT_EQ(stats.kTileLoads[i], 4 * (static_cast<int64_t>(i % stats.qTiles) + 1)) << "tile " << i;
  // One block, one per tile, and random splits of the counter's values among the blocks give the same numbers.
  for (int blocks : {1, 2, 8})
    for (unsigned seed : {0u, 7u, 2026u}) {
      p.persistentBlocks = blocks;
      p.workOrderSeed = seed;
      expectMatchesReference(runChecked(funcOf(*fa3), p, in, diags), ref, p,
                             "fa3 dynamic, " + std::to_string(blocks) + " blocks, seed " + std::to_string(seed));
    }
}

TEST_F(Fa3DynamicFixture, AVarlenLaunchSkipsTilesPastEachSequence) {
  ASSERT_TRUE(fa3) << diags.text;
  // Three packed sequences of 100, 28 and 0 query rows (keys 90, 40, 5): the tiles cover the longest, and the
  // producer skips the tiles past the shorter sequences instead of handing them over.
  Problem v = p;
  v.batch = 3;
  v.seqlenQ = 128;
  v.seqlenK = 135;
  v.cuSeqlensQ = {0, 100, 128, 128};
  v.cuSeqlensK = {0, 90, 130, 135};
  Problem packed = v;
  packed.batch = 1; // randomInputs sizes by batch: the packed tensors are one entry of total rows
  test::Inputs pin = test::randomInputs(packed, 11);
  // The same tiles under the static persistent order compute the same numbers; the unscheduled program differs by
  // the schedule's roundings (P in bf16) only.
  schedule::Knobs staticKnobs = knobs;
  staticKnobs.erase(fa3::kScheduler);
  staticKnobs[fa3::kPersistent] = 1;
  OwningOpRef<ModuleOp> persistent = flashtile::testing::scheduledFa3(*program, staticKnobs);
  ASSERT_TRUE(persistent) << diags.text;
  Outputs unscheduled, fixed;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*program), v, pin.q, pin.k, pin.v, unscheduled.o, unscheduled.lse)))
      << diags.text;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*persistent), v, pin.q, pin.k, pin.v, fixed.o, fixed.lse))) << diags.text;
  EXPECT_LE(test::maxAbsDiff(fixed.o, unscheduled.o), 1.6e-2);
  for (int blocks : {1, 3})
    for (unsigned seed : {0u, 5u}) {
      v.persistentBlocks = blocks;
      v.workOrderSeed = seed;
      Outputs dynamic;
      ASSERT_TRUE(succeeded(interp::run(funcOf(*fa3), v, pin.q, pin.k, pin.v, dynamic.o, dynamic.lse))) << diags.text;
      EXPECT_EQ(dynamic.o, fixed.o) << blocks << " blocks, seed " << seed;
      EXPECT_EQ(dynamic.lse, fixed.lse) << blocks << " blocks, seed " << seed;
    }
}

TEST_F(Fa3DynamicFixture, AUnitNeverReleasedDeadlocks) {
  ASSERT_TRUE(fa3) << diags.text;
  for (auto release : unitReleases(*fa3))
    release.erase();
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("pipeline deadlock"), std::string::npos) << text;
  EXPECT_NE(text.find("barrier of slot 0 of buffer -1"), std::string::npos) << text; // the work queue's cell
}

TEST_F(Fa3DynamicFixture, AUnitReleasedTwiceIsAHazardTheCheckerCatches) {
  ASSERT_TRUE(fa3) << diags.text;
  // Released twice per tile: on the GPU the second arrival completes the next phase early, and the producer
  // overwrites the cell before the consumers read the next unit.
  auto releases = unitReleases(*fa3);
  ASSERT_EQ(releases.size(), 1u);
  OpBuilder b(releases.front());
  b.clone(*releases.front());
  std::string text = runExpectingFailure(*fa3);
  EXPECT_NE(text.find("releases round 0 of slot 0 twice"), std::string::npos) << text;
  // The protocol checker, not something else, catches it.
  ProtocolCheckerOff off;
  std::vector<float> o, lse;
  EXPECT_TRUE(succeeded(interp::run(funcOf(*fa3), p, in.q, in.k, in.v, o, lse))) << diags.text;
}

TEST_F(CausalFixture, BadSizesAndUnknownOpsAreDiagnosed) {
  ASSERT_TRUE(program) << diags.text;
  Problem wrongHeads = p;
  wrongHeads.headsKv = 3;
  std::vector<float> o, lse;
  EXPECT_TRUE(failed(interp::run(funcOf(*program), wrongHeads, in.q, in.k, in.v, o, lse)));
  EXPECT_NE(diags.text.find("heads_q (2) must be a positive multiple of heads_kv (3)"), std::string::npos)
      << diags.text;

  std::vector<float> shortQ(in.q.begin(), in.q.end() - 1);
  diags.text.clear();
  EXPECT_TRUE(failed(interp::run(funcOf(*program), p, shortQ, in.k, in.v, o, lse)));
  EXPECT_NE(diags.text.find("q holds 32767 values but batch·seqlen_q·heads_q·head_dim = 2·128·2·64 = 32768"),
            std::string::npos)
      << diags.text;

  // An op the interpreter does not know, inside the mask region.
  tile::MaskOp mask;
  funcOf(*program).walk([&](tile::MaskOp op) { mask = op; });
  ASSERT_TRUE(mask);
  OpBuilder b(mask.getBody().front().getTerminator());
  Value one = arith::ConstantFloatOp::create(b, b.getUnknownLoc(), b.getF32Type(), APFloat(1.0f));
  math::SinOp::create(b, b.getUnknownLoc(), one);
  EXPECT_NE(runExpectingFailure(*program).find("the interpreter does not support 'math.sin'"), std::string::npos)
      << diags.text;
}

//===----------------------------------------------------------------------===//
// Building blocks
//===----------------------------------------------------------------------===//

TEST(InterpreterSoftmax, ARescaleThresholdKeepsMaxesWithHeadroomAndGivesTheSameResult) {
  interp::RoundFn exact = [](float x) { return x; };
  // Rows: max 1 and scores up to 5 (4 of headroom needed: kept at threshold 8), max 1 and scores up to 10 (9:
  // moves), no key yet (moves from -inf).
  interp::RowStats state = interp::RowStats::empty(3);
  state.m = {1.0f, 1.0f, -std::numeric_limits<float>::infinity()};
  state.l = {2.0f, 2.0f, 0.0f};
  interp::Accumulator acc = interp::Accumulator::zeros(3, 2);
  acc.acc = {1.0f, 2.0f, 3.0f, 4.0f, 0.0f, 0.0f};
  interp::Tile s = interp::Tile::zeros(3, 2);
  s.data = {5.0f, -1.0f, 10.0f, 0.0f, 0.5f, 0.25f};
  interp::SoftmaxStep lazy = interp::softmaxUpdate(s, state, 1.0f, exact, 8);
  EXPECT_EQ(lazy.stats.m[0], 1.0f);
  EXPECT_EQ(lazy.alpha.at(0, 0), 1.0f);
  EXPECT_EQ(lazy.p.at(0, 0), 16.0f); // exp2(5 - 1): P above 1, at most 2^8
  EXPECT_EQ(lazy.stats.m[1], 10.0f);
  EXPECT_FLOAT_EQ(lazy.alpha.at(1, 0), std::exp2(1.0f - 10.0f));
  EXPECT_EQ(lazy.stats.m[2], 0.5f);
  EXPECT_EQ(lazy.alpha.at(2, 0), 0.0f);
  interp::SoftmaxStep eager = interp::softmaxUpdate(s, state, 1.0f, exact, 0);
  EXPECT_EQ(eager.stats.m[0], 5.0f);

  // Both policies finalize to the same O and LSE (up to fp32 rounding): P and l share the max.
  interp::Tile v = interp::Tile::zeros(2, 2);
  v.data = {0.5f, -1.0f, 2.0f, 0.25f};
  auto finish = [&](const interp::SoftmaxStep &step) {
    return interp::finalize(step.stats, interp::pv(step.p, v, interp::rescale(acc, step.alpha)), std::nullopt);
  };
  interp::Finalized a = finish(lazy), b = finish(eager);
  for (int r = 0; r < 3; ++r) {
    for (int d = 0; d < 2; ++d)
      EXPECT_NEAR(a.o.at(r, d), b.o.at(r, d), 1e-6f * (1.0f + std::abs(b.o.at(r, d)))) << "row " << r;
    EXPECT_NEAR(a.lse.at(r, 0), b.lse.at(r, 0), 1e-6f * (1.0f + std::abs(b.lse.at(r, 0)))) << "row " << r;
  }
}

TEST(InterpreterRounding, MatchesAPFloatRoundToNearestEven) {
  std::mt19937 rng(seedFor("rounding"));
  auto viaAPFloat = [](float x, const llvm::fltSemantics &sem) {
    bool lost;
    APFloat a(x);
    a.convert(sem, APFloat::rmNearestTiesToEven, &lost);
    a.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven, &lost);
    return a.convertToFloat();
  };
  auto same = [](float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); };
  // Random bit patterns cover every exponent; ties are built on purpose (a kept value plus half its last place).
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           65504.0f,
                           65519.0f,
                           65520.0f,
                           1e-8f,
                           6e-8f,
                           3e-8f,
                           -2.98023224e-8f,
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float x = std::bit_cast<float>(bits);
    if (!std::isnan(x))
      xs.push_back(x);
    xs.push_back(std::bit_cast<float>((bits & 0xffff0000u) | 0x8000u));                // bf16 tie
    xs.push_back(std::ldexp(float(int(rng() % 4096) * 2 + 1), -12 - int(rng() % 30))); // f16 ties and near-ties
  }
  int bad = 0;
  for (float x : xs) {
    if (std::isnan(x))
      continue;
    if (!same(interp::roundToBf16(x), viaAPFloat(x, APFloat::BFloat())) && bad++ < 5)
      ADD_FAILURE() << "bf16(" << x << ") = " << interp::roundToBf16(x);
    if (!same(interp::roundToF16(x), viaAPFloat(x, APFloat::IEEEhalf())) && bad++ < 5)
      ADD_FAILURE() << "f16(" << x << ") = " << interp::roundToF16(x);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(std::isnan(interp::roundToBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(interp::roundToF16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(InterpreterScalarOps, FollowArithSemantics) {
  MLIRContext context;
  context.loadDialect<arith::ArithDialect, math::MathDialect>();
  OpBuilder b(&context);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  Value i = arith::ConstantIntOp::create(b, loc, 0, 32);
  Value f = arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  std::string error;
  auto eval = [&](Operation *op, std::vector<Scalar> in) {
    return interp::evalScalarOp(op, in, [&](const Twine &m) { error = m.str(); });
  };
  auto intOf = [&](Operation *op, int64_t a, int64_t c) {
    FailureOr<Scalar> r = eval(op, {Scalar::integer(a), Scalar::integer(c)});
    EXPECT_TRUE(succeeded(r)) << error;
    return succeeded(r) ? r->i : -12345;
  };
  EXPECT_EQ(intOf(arith::CeilDivSIOp::create(b, loc, i, i), 7, 2), 4);
  EXPECT_EQ(intOf(arith::CeilDivSIOp::create(b, loc, i, i), -7, 2), -3);
  EXPECT_EQ(intOf(arith::CeilDivSIOp::create(b, loc, i, i), -7, -2), 4);
  EXPECT_EQ(intOf(arith::FloorDivSIOp::create(b, loc, i, i), -7, 2), -4);
  EXPECT_EQ(intOf(arith::DivSIOp::create(b, loc, i, i), -7, 2), -3);
  EXPECT_EQ(intOf(arith::RemSIOp::create(b, loc, i, i), -7, 2), -1);
  EXPECT_EQ(intOf(arith::AddIOp::create(b, loc, i, i), INT32_MAX, 1), INT32_MIN); // wraps around
  EXPECT_EQ(intOf(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, i, i), -1, 0), 0);
  EXPECT_NE(intOf(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, i, i), -1, 0), 0);
  EXPECT_TRUE(failed(eval(arith::DivSIOp::create(b, loc, i, i), {Scalar::integer(1), Scalar::integer(0)})));
  EXPECT_NE(error.find("division by zero"), std::string::npos);

  float nan = std::numeric_limits<float>::quiet_NaN();
  auto realOf = [&](Operation *op, float a, float c) {
    FailureOr<Scalar> r = eval(op, {Scalar::real(a), Scalar::real(c)});
    EXPECT_TRUE(succeeded(r)) << error;
    return succeeded(r) ? (r->isFloat ? r->f : float(r->i)) : -12345.0f;
  };
  EXPECT_NE(realOf(arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UGT, f, f), nan, 1.0f), 0.0f);
  EXPECT_EQ(realOf(arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, f, f), nan, 1.0f), 0.0f);
  EXPECT_FALSE(std::signbit(realOf(arith::MaximumFOp::create(b, loc, f, f), -0.0f, 0.0f)));
  EXPECT_TRUE(std::isnan(realOf(arith::MaximumFOp::create(b, loc, f, f), nan, 1.0f)));
  EXPECT_TRUE(failed(eval(arith::ShLIOp::create(b, loc, i, i), {Scalar::integer(1), Scalar::integer(1)})));
  EXPECT_NE(error.find("does not support 'arith.shli'"), std::string::npos);
}

} // namespace
