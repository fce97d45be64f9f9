//===- PositionOffsetsTest.cpp - blocks of a larger problem on the interpreter ===//
//
// A program compiled with position offsets (tile-offset-positions) and run on a block of a larger problem — some of
// its query rows against some of its keys, placed by Problem::positions — must give what the whole problem gives
// those rows: the blocks of a query chunk, merged by their LSE, equal the whole problem's rows (O within bf16's
// rounding, LSE within 1e-4). Checked unscheduled and FA2-scheduled (64-row Q tiles, 32-key K/V tiles: the tile walk
// skips what the rules exclude) for causal, a sliding window, ALiBi, a document mask and a user score_mod that reads
// positions and sizes. The same blocks run without offsets must differ (the check can fail), and a causal block
// above the diagonal loads no K/V tile. The backward likewise: each block's dQ, dK and dV from the whole problem's O
// and LSE rows, summed over the other chunks, equal the whole problem's gradients (within bf16's rounding).
//===----------------------------------------------------------------------===//
#include "AttentionReference.h"
#include "TestSupport.h"

#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/Interpreter.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/Transforms/Passes.h"
#include "schedules/fa2/Fa2Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir;
using namespace flashtile;
using flashtile::interp::Problem;

namespace {

constexpr int kSeqlen = 128, kHeads = 2, kHeadDim = 64, kChunk = 64;
constexpr float kInf = std::numeric_limits<float>::infinity();

/// A user's variant whose score hook reads the query row, the key, the head and the sequence sizes.
Variant positionalScore() {
  return Variant("positional_score").score([](dsl::Expr s, const dsl::Coords &c, const dsl::Params &) {
    return s + s.literal(0.05) * dsl::toFloat(c.kv - c.qAligned()) + s.literal(0.25) * dsl::toFloat(c.h) +
           s.literal(0.01) * dsl::toFloat(c.sizes.seqlenK - c.q);
  });
}

struct Case {
  std::string name;
  Variant variant;
  std::vector<float> params{};
  std::vector<interp::InputArray> inputs{};
};

std::vector<Case> cases() {
  std::vector<int32_t> docStart(kSeqlen);
  for (int t = 0; t < kSeqlen; ++t)
    docStart[t] = t < 40 ? 0 : t < 100 ? 40 : 100; // documents [0, 40), [40, 100), [100, 128)
  return {{"causal", variants::causal()},
          {"sliding_window", variants::slidingWindow(20, 10), {20, 10}},
          {"alibi", variants::alibi(), {}, {std::vector<float>{0.5f, 0.125f}}},
          {"document_mask", variants::documentMask(), {}, {docStart}},
          {"positional_score", positionalScore()}};
}

/// The variant's program, unscheduled and FA2-scheduled, with or without position offsets.
struct Programs {
  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler{&context, [this](Diagnostic &d) {
                                    diagnostics += d.str() + "\n";
                                    return success();
                                  }};
  OwningOpRef<ModuleOp> unscheduled, scheduled;

  Programs(const Variant &variant, bool offsets) {
    auto built = buildAttentionProgram(context, variant, ProgramOptions{ElementType::BF16, kHeadDim, kHeadDim});
    EXPECT_TRUE(succeeded(built)) << diagnostics;
    if (failed(built))
      return;
    unscheduled = std::move(*built);
    if (offsets) {
      PassManager pm(&context);
      pm.addNestedPass<tile::FuncOp>(tile::createTileOffsetPositions());
      EXPECT_TRUE(succeeded(pm.run(*unscheduled))) << diagnostics;
    }
    scheduled = unscheduled->clone();
    PassManager pm(&context);
    fa2::buildPipeline(pm, fa2::Fa2Options{.blockM = 64, .blockN = 32, .warps = 4});
    EXPECT_TRUE(succeeded(pm.run(*scheduled))) << diagnostics;
  }
  tile::FuncOp func(bool wantScheduled) {
    return *(wantScheduled ? scheduled : unscheduled)->getOps<tile::FuncOp>().begin();
  }
};

Problem problemOf(const Case &c, int seqlenQ, int seqlenK) {
  Problem p;
  p.seqlenQ = seqlenQ;
  p.seqlenK = seqlenK;
  p.headsQ = p.headsKv = kHeads;
  p.headDim = p.headDimV = kHeadDim;
  p.softmaxScale = 1.0f / std::sqrt(float(kHeadDim));
  p.params = c.params;
  p.inputs = c.inputs;
  return p;
}

/// Rows [begin, begin + count) of a (seqlen x heads x dim) tensor.
std::vector<float> rows(const std::vector<float> &t, int begin, int count, int width) {
  return std::vector<float>(t.begin() + int64_t{begin} * width, t.begin() + int64_t{begin + count} * width);
}

struct Result {
  std::vector<float> o, lse;
  int64_t kTileLoads = 0;
};

Result runBlock(tile::FuncOp func, Problem p, const test::Inputs &whole, int q0, int k0, bool offsets) {
  const int width = kHeads * kHeadDim;
  if (offsets)
    p.positions = {.qOffset = q0, .kOffset = k0, .seqlenQGlobal = kSeqlen, .seqlenKGlobal = kSeqlen};
  Result r;
  interp::RunStats stats;
  EXPECT_TRUE(succeeded(interp::run(func, p, rows(whole.q, q0, kChunk, width), rows(whole.k, k0, kChunk, width),
                                    rows(whole.v, k0, kChunk, width), r.o, r.lse, &stats)));
  r.kTileLoads = std::accumulate(stats.kTileLoads.begin(), stats.kTileLoads.end(), int64_t{0});
  return r;
}

/// The largest LSE and O differences between the whole problem's rows of query chunk q0 and its blocks against
/// every key chunk, merged by their LSE.
std::pair<double, double> mergedError(tile::FuncOp block, const Case &c, const test::Inputs &whole,
                                      const Result &ref, int q0, bool offsets, int64_t *loadsAbove = nullptr) {
  std::vector<Result> parts;
  for (int k0 = 0; k0 < kSeqlen; k0 += kChunk) {
    parts.push_back(runBlock(block, problemOf(c, kChunk, kChunk), whole, q0, k0, offsets));
    if (loadsAbove && k0 > q0)
      *loadsAbove += parts.back().kTileLoads;
  }
  double lseErr = 0, oErr = 0;
  for (int h = 0; h < kHeads; ++h)
    for (int i = 0; i < kChunk; ++i) {
      float m = -kInf;
      for (const Result &part : parts)
        m = std::max(m, part.lse[h * kChunk + i]);
      double sum = 0;
      for (const Result &part : parts)
        sum += m == -kInf ? 0.0 : std::exp(double(part.lse[h * kChunk + i]) - m);
      double lse = sum > 0 ? m + std::log(sum) : -kInf;
      float want = ref.lse[h * kSeqlen + q0 + i];
      lseErr = std::max(lseErr, want == -kInf && lse == -kInf ? 0.0 : std::fabs(lse - want));
      for (int d = 0; d < kHeadDim; ++d) {
        double o = 0;
        for (const Result &part : parts) {
          float l = part.lse[h * kChunk + i];
          if (l != -kInf)
            o += std::exp(double(l) - lse) * part.o[(i * kHeads + h) * kHeadDim + d];
        }
        oErr = std::max(oErr, std::fabs(o - ref.o[((q0 + i) * kHeads + h) * kHeadDim + d]));
      }
    }
  return {lseErr, oErr};
}

class PositionOffsets : public ::testing::TestWithParam<int> {};

TEST_P(PositionOffsets, BlocksEqualTheWholeProblem) {
  const Case c = cases()[GetParam()];
  SCOPED_TRACE(c.name);
  Programs plain(c.variant, /*offsets=*/false), placed(c.variant, /*offsets=*/true);
  ASSERT_TRUE(plain.scheduled && placed.scheduled) << plain.diagnostics << placed.diagnostics;
  const Problem whole = problemOf(c, kSeqlen, kSeqlen);
  const test::Inputs in = test::randomInputs(whole, flashtile::testing::seedFor(c.name));
  for (bool scheduled : {false, true}) {
    SCOPED_TRACE(scheduled ? "fa2-scheduled" : "unscheduled");
    Result ref;
    ASSERT_TRUE(succeeded(interp::run(plain.func(scheduled), whole, in.q, in.k, in.v, ref.o, ref.lse)))
        << plain.diagnostics;
    double worstWithout = 0;
    int64_t loadsAbove = 0;
    for (int q0 = 0; q0 < kSeqlen; q0 += kChunk) {
      auto [lseErr, oErr] = mergedError(placed.func(scheduled), c, in, ref, q0, true, &loadsAbove);
      EXPECT_LE(lseErr, 1e-4) << "query chunk " << q0 << ": LSE of the merged blocks" << placed.diagnostics;
      EXPECT_LE(oErr, 2e-2) << "query chunk " << q0 << ": O of the merged blocks";
      worstWithout = std::max(worstWithout, mergedError(plain.func(scheduled), c, in, ref, q0, false).first);
    }
    // Without offsets the blocks see local positions: wrong, so the comparison above can fail.
    EXPECT_GT(worstWithout, 1e-2) << "the blocks without offsets agree too: the check cannot fail";
    if (scheduled && c.name == "causal") {
      EXPECT_EQ(loadsAbove, 0) << "a causal block above the diagonal must load no K/V tile";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, PositionOffsets, ::testing::Range(0, 5),
                         [](const ::testing::TestParamInfo<int> &info) { return cases()[info.param].name; });

TEST(PositionOffsetsPass, RefusesAProgramPlacedTwice) {
  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &d) {
    diagnostics += d.str();
    return success();
  });
  auto built = buildAttentionProgram(context, variants::causal(), ProgramOptions{ElementType::BF16, 64, 64});
  ASSERT_TRUE(succeeded(built));
  PassManager pm(&context);
  pm.addNestedPass<tile::FuncOp>(tile::createTileOffsetPositions());
  pm.addNestedPass<tile::FuncOp>(tile::createTileOffsetPositions());
  EXPECT_TRUE(failed(pm.run(**built)));
  EXPECT_NE(diagnostics.find("already takes position offsets"), std::string::npos) << diagnostics;
}

} // namespace

/// Rows [begin, begin + count) of each head's LSE (heads x seqlen, laid out as interp::run writes it).
std::vector<float> lseRows(const std::vector<float> &lse, int seqlen, int begin, int count) {
  std::vector<float> out;
  for (int h = 0; h < kHeads; ++h)
    out.insert(out.end(), lse.begin() + int64_t{h} * seqlen + begin, lse.begin() + int64_t{h} * seqlen + begin + count);
  return out;
}

/// The backward module of `variant` (unscheduled), with or without position offsets.
OwningOpRef<ModuleOp> backwardModule(MLIRContext &context, const Variant &variant, bool offsets) {
  auto built = buildProgram(context, variant, ProgramOptions{ElementType::BF16, kHeadDim, kHeadDim},
                            tile::kBackwardModule);
  EXPECT_TRUE(succeeded(built));
  if (failed(built))
    return {};
  if (offsets) {
    PassManager pm(&context);
    pm.addNestedPass<tile::FuncOp>(tile::createTileOffsetPositions());
    EXPECT_TRUE(succeeded(pm.run(**built)));
  }
  return std::move(*built);
}

// The backward of a block of a larger problem: given the whole problem's O and LSE rows, each block (a query chunk
// against a key chunk) computes its share of dQ, dK and dV; the shares summed over the other chunks equal the whole
// problem's gradients (within bf16's rounding of each share). Without offsets the blocks' sums differ.
TEST_P(PositionOffsets, BackwardBlocksSumToTheWholeProblemsGradients) {
  const Case c = cases()[GetParam()];
  SCOPED_TRACE(c.name);
  Programs forward(c.variant, /*offsets=*/false);
  ASSERT_TRUE(forward.unscheduled) << forward.diagnostics;
  MLIRContext &context = forward.context;
  OwningOpRef<ModuleOp> plain = backwardModule(context, c.variant, false),
                        placed = backwardModule(context, c.variant, true);
  ASSERT_TRUE(plain && placed) << forward.diagnostics;
  const Problem whole = problemOf(c, kSeqlen, kSeqlen);
  const test::Inputs in = test::randomInputs(whole, flashtile::testing::seedFor(c.name + "_bwd"));
  Result fwd;
  ASSERT_TRUE(succeeded(interp::run(forward.func(false), whole, in.q, in.k, in.v, fwd.o, fwd.lse)))
      << forward.diagnostics;
  std::vector<float> dO(in.q.size());
  for (size_t i = 0; i < dO.size(); ++i)
    dO[i] = float(std::sin(0.37 * double(i))) * 0.5f;
  interp::Gradients ref;
  ASSERT_TRUE(succeeded(interp::runBackward(*plain, whole, {in.q, in.k, in.v, fwd.o, dO, fwd.lse}, ref)))
      << forward.diagnostics;
  double scale = 0;
  for (const std::vector<float> *g : {&ref.dq, &ref.dk, &ref.dv})
    for (float x : *g)
      scale = std::max(scale, double(std::fabs(x)));
  ASSERT_GT(scale, 0.0);

  const int width = kHeads * kHeadDim;
  auto blockSums = [&](ModuleOp module, bool offsets) {
    interp::Gradients sum{std::vector<float>(ref.dq.size()), std::vector<float>(ref.dk.size()),
                          std::vector<float>(ref.dv.size()), {}};
    for (int q0 = 0; q0 < kSeqlen; q0 += kChunk)
      for (int k0 = 0; k0 < kSeqlen; k0 += kChunk) {
        Problem p = problemOf(c, kChunk, kChunk);
        if (offsets)
          p.positions = {.qOffset = q0, .kOffset = k0, .seqlenQGlobal = kSeqlen, .seqlenKGlobal = kSeqlen};
        interp::BackwardTensors t{rows(in.q, q0, kChunk, width),  rows(in.k, k0, kChunk, width),
                                  rows(in.v, k0, kChunk, width),  rows(fwd.o, q0, kChunk, width),
                                  rows(dO, q0, kChunk, width),    lseRows(fwd.lse, kSeqlen, q0, kChunk)};
        interp::Gradients part;
        EXPECT_TRUE(succeeded(interp::runBackward(module, p, t, part))) << forward.diagnostics;
        for (int i = 0; i < kChunk * width; ++i) {
          sum.dq[int64_t{q0} * width + i] += std::isnan(part.dq[i]) ? 0.f : part.dq[i];
          sum.dk[int64_t{k0} * width + i] += std::isnan(part.dk[i]) ? 0.f : part.dk[i];
          sum.dv[int64_t{k0} * width + i] += std::isnan(part.dv[i]) ? 0.f : part.dv[i];
        }
      }
    return sum;
  };
  auto worst = [&](const interp::Gradients &got) {
    double err = 0;
    for (auto [a, b] : {std::pair{&got.dq, &ref.dq}, {&got.dk, &ref.dk}, {&got.dv, &ref.dv}})
      for (size_t i = 0; i < a->size(); ++i)
        err = std::max(err, std::fabs(double((*a)[i]) - double((*b)[i])));
    return err / scale;
  };
  // Each block's gradients are rounded to bf16 (2^-8 relative) before the sum over 2 chunks.
  EXPECT_LE(worst(blockSums(*placed, true)), 2e-2) << "the placed blocks' gradients, relative to the largest";
  EXPECT_GT(worst(blockSums(*plain, false)), 5e-2) << "the blocks without offsets agree too: the check cannot fail";
}
