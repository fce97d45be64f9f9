//===- ShapeTest.cpp - head dims, GQA/MQA and varlen on the CPU interpreter ===//
//
// The shapes every schedule must honor, checked on the interpreter (unscheduled and FA2-scheduled) against the
// naive reference: every supported head dim and the 192/128 pair, multi- and grouped-query heads, and packed
// sequences (flash_attn_varlen_func) checked sequence by sequence against a dense reference of that sequence alone,
// empty sequences included. Inputs are random; FLASHTILE_TEST_SEED changes every case's seed.
//===----------------------------------------------------------------------===//
#include "Printers.h"
#include "AttentionReference.h"
#include "TestSupport.h"

#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "passes/IR/TileDialect.h"
#include "schedules/fa2/Fa2Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>

using namespace mlir;
using namespace flashtile;
using flashtile::interp::Problem;

namespace {

using flashtile::testing::DiagnosticCapture;
using flashtile::testing::seedFor;

/// A variant's program, and its FA2-scheduled copies, in one context that collects diagnostics.
struct Programs {
  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler{&context, [this](Diagnostic &d) {
                                    diagnostics += d.str() + "\n";
                                    for (Diagnostic &note : d.getNotes())
                                      diagnostics += "  note: " + note.str() + "\n";
                                    return success();
                                  }};
  OwningOpRef<ModuleOp> unscheduled;
  std::vector<std::pair<std::string, OwningOpRef<ModuleOp>>> scheduled;

  Programs(const std::string &variant, ElementType dtype, int headDim, int headDimV) {
    auto built = buildAttentionProgram(context, *variants::byName(variant), ProgramOptions{dtype, headDim, headDimV});
    EXPECT_TRUE(succeeded(built)) << diagnostics;
    if (failed(built))
      return;
    unscheduled = std::move(*built);
    for (const auto &[label, options] : flashtile::testing::fa2TestSchedules()) {
      OwningOpRef<ModuleOp> copy = unscheduled->clone();
      PassManager pm(&context);
      fa2::buildPipeline(pm, options);
      EXPECT_TRUE(succeeded(pm.run(*copy))) << label << ": the FA2 pipeline failed\n" << diagnostics;
      scheduled.emplace_back(label, std::move(copy));
    }
  }

  /// (label, tile.func) of the unscheduled program and of each schedule.
  std::vector<std::pair<std::string, tile::FuncOp>> all() {
    std::vector<std::pair<std::string, tile::FuncOp>> out = {
        {"unscheduled", *unscheduled->getOps<tile::FuncOp>().begin()}};
    for (auto &[label, module] : scheduled)
      out.emplace_back(label, *module->getOps<tile::FuncOp>().begin());
    return out;
  }
};

/// A dense problem (no variant numbers or inputs).
Problem problem(int batch, int seqlenQ, int seqlenK, int headsQ, int headsKv, int headDim, int headDimV) {
  Problem p;
  p.batch = batch;
  p.seqlenQ = seqlenQ;
  p.seqlenK = seqlenK;
  p.headsQ = headsQ;
  p.headsKv = headsKv;
  p.headDim = headDim;
  p.headDimV = headDimV;
  p.softmaxScale = 1.0f / std::sqrt(float(headDim));
  return p;
}

interp::RoundFn roundFor(ElementType dtype) {
  return dtype == ElementType::BF16 ? interp::roundToBf16 : interp::roundToF16;
}

/// O (rows x Hq x Dv) and LSE (Hq x rows) of one dense batch entry against the reference: FlashAttention's bound,
/// LSE within 1e-4 relative, rows that see no key exactly O = 0 and LSE = -inf.
void expectMatches(const std::vector<float> &o, const std::vector<float> &lse, const test::Reference &ref,
                   const Problem &p, const std::string &what) {
  double bound = test::errorBound(ref), err = test::maxAbsDiff(o, ref.o);
  EXPECT_LE(err, bound) << what << ": max |O - ref| = " << err << " exceeds 2·max|ref_lowp - ref| + 1e-5 = " << bound;
  ASSERT_EQ(lse.size(), ref.lse.size()) << what;
  int bad = 0;
  for (size_t row = 0; row < ref.lse.size(); ++row) {
    int64_t h = row / p.seqlenQ, i = row % p.seqlenQ;
    const float *oRow = &o[(i * p.headsQ + h) * p.headDimV];
    bool ok = ref.noKeys[row] ? lse[row] == -std::numeric_limits<float>::infinity() &&
                                    std::all_of(oRow, oRow + p.headDimV, [](float x) { return x == 0.0f; })
                              : std::fabs(lse[row] - ref.lse[row]) <= 1e-4 * std::max(1.0, std::fabs(ref.lse[row]));
    if (!ok && bad++ < 3)
      ADD_FAILURE() << what << ": row (h " << h << ", q " << i << "): LSE " << lse[row] << ", reference "
                    << ref.lse[row] << (ref.noKeys[row] ? " (sees no key: O must be 0)" : "");
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " rows with a wrong LSE or a nonzero fully masked O";
}

//===----------------------------------------------------------------------===//
// Head dims and head counts
//===----------------------------------------------------------------------===//

struct HeadCase {
  std::string variant;
  ElementType dtype;
  int headDim, headDimV, headsQ, headsKv, seqlenQ, seqlenK;

  std::string name() const {
    return variant + (dtype == ElementType::BF16 ? "_bf16" : "_f16") + "_d" + std::to_string(headDim) +
           (headDimV != headDim ? "_dv" + std::to_string(headDimV) : "") + "_h" + std::to_string(headsQ) + "x" +
           std::to_string(headsKv) + "_s" + std::to_string(seqlenQ) + "x" + std::to_string(seqlenK);
  }
};

void PrintTo(const HeadCase &c, std::ostream *os) { *os << c.name(); }

/// Every supported head dim (64 and 128 are covered by InterpreterTest.cpp) and 192/128, small sequences that still
/// span several K/V tiles and a partial Q tile; multi-query (one K/V head) and grouped-query heads.
std::vector<HeadCase> headCases() {
  std::vector<HeadCase> out;
  for (auto [d, dv] : {std::pair{32, 32}, {96, 96}, {192, 192}, {256, 256}, {192, 128}})
    for (const char *variant : {"none", "causal"})
      out.push_back({variant, ElementType::BF16, d, dv, 2, 1, 70, 90});
  out.push_back({"causal", ElementType::F16, 192, 128, 4, 2, 90, 70});
  out.push_back({"causal", ElementType::F16, 32, 32, 3, 1, 130, 130});
  out.push_back({"none", ElementType::BF16, 64, 64, 8, 1, 33, 65});
  return out;
}

class HeadShapes : public ::testing::TestWithParam<HeadCase> {};

TEST_P(HeadShapes, UnscheduledAndFa2ScheduledMatchTheReference) {
  const HeadCase &c = GetParam();
  Programs programs(c.variant, c.dtype, c.headDim, c.headDimV);
  ASSERT_TRUE(programs.unscheduled) << programs.diagnostics;
  Problem p = problem(1, c.seqlenQ, c.seqlenK, c.headsQ, c.headsKv, c.headDim, c.headDimV);
  uint64_t seed = seedFor(c.name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Inputs in = test::randomInputs(p, seed);
  test::Reference ref =
      test::referenceAttention(p, in, c.variant == "causal" ? test::Mask::Causal : test::Mask::None, roundFor(c.dtype));
  for (auto [label, func] : programs.all()) {
    std::vector<float> o, lse;
    ASSERT_TRUE(succeeded(interp::run(func, p, in.q, in.k, in.v, o, lse))) << label << "\n" << programs.diagnostics;
    expectMatches(o, lse, ref, p, label);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, HeadShapes, ::testing::ValuesIn(headCases()),
                         [](const ::testing::TestParamInfo<HeadCase> &info) { return info.param.name(); });

//===----------------------------------------------------------------------===//
// Varlen: packed sequences with cu_seqlens
//===----------------------------------------------------------------------===//

struct VarlenCase {
  std::string variant;
  int headDim, headDimV;
  std::vector<int> lengthsQ, lengthsK;

  std::string name() const {
    auto join = [](const std::vector<int> &xs) {
      std::string s;
      for (int x : xs) {
        if (!s.empty())
          s += "_";
        s += std::to_string(x);
      }
      return s;
    };
    return variant + "_d" + std::to_string(headDim) + "_dv" + std::to_string(headDimV) + "_q" + join(lengthsQ) + "_k" +
           join(lengthsK);
  }
};

void PrintTo(const VarlenCase &c, std::ostream *os) { *os << c.name(); }

std::vector<int> offsetsOf(const std::vector<int> &lengths) {
  std::vector<int> offsets(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), offsets.begin() + 1);
  return offsets;
}

/// Sequences of different lengths with Sq_b != Sk_b both ways, an empty query sequence (nothing to write), an
/// empty key sequence (O = 0, LSE = -inf) and one longer than the FA2 Q tile.
std::vector<VarlenCase> varlenCases() {
  const std::vector<int> q = {37, 0, 150, 5, 20}, k = {50, 9, 0, 131, 20};
  std::vector<VarlenCase> out;
  for (const char *variant : {"none", "causal"}) {
    out.push_back({variant, 64, 64, q, k});
    out.push_back({variant, 192, 128, {3, 70}, {90, 2}});
  }
  out.push_back({"causal", 32, 32, {1}, {1}});
  out.push_back({"none", 128, 128, {0, 0}, {4, 0}});
  return out;
}

class Varlen : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(Varlen, EverySequenceMatchesItsOwnReference) {
  const VarlenCase &c = GetParam();
  constexpr ElementType kDtype = ElementType::BF16;
  Programs programs(c.variant, kDtype, c.headDim, c.headDimV);
  ASSERT_TRUE(programs.unscheduled) << programs.diagnostics;
  const int batch = static_cast<int>(c.lengthsQ.size());
  Problem p = problem(batch, 0, 0, 4, 2, c.headDim, c.headDimV);
  p.cuSeqlensQ = offsetsOf(c.lengthsQ);
  p.cuSeqlensK = offsetsOf(c.lengthsK);
  p.seqlenQ = p.cuSeqlensQ.back();
  p.seqlenK = p.cuSeqlensK.back();
  Problem packed = p; // the sizes of the packed tensors: one batch entry of total_q (total_k) rows
  packed.batch = 1;
  uint64_t seed = seedFor(c.name());
  SCOPED_TRACE("seed " + std::to_string(seed));
  test::Inputs in = test::randomInputs(packed, seed);

  for (auto [label, func] : programs.all()) {
    std::vector<float> o, lse;
    ASSERT_TRUE(succeeded(interp::run(func, p, in.q, in.k, in.v, o, lse))) << label << "\n" << programs.diagnostics;
    ASSERT_EQ(o.size(), size_t(p.seqlenQ) * p.headsQ * p.headDimV);
    ASSERT_EQ(lse.size(), size_t(p.headsQ) * p.seqlenQ);
    for (int b = 0; b < batch; ++b) {
      // Sequence b alone, as a dense problem: rows [cu[b], cu[b + 1]) of the packed tensors are contiguous.
      Problem one = problem(1, c.lengthsQ[b], c.lengthsK[b], p.headsQ, p.headsKv, p.headDim, p.headDimV);
      auto rows = [](const std::vector<float> &x, int64_t first, int64_t count, int64_t width) {
        return std::vector<float>(x.begin() + first * width, x.begin() + (first + count) * width);
      };
      int64_t q0 = p.cuSeqlensQ[b], k0 = p.cuSeqlensK[b];
      test::Inputs seq{rows(in.q, q0, one.seqlenQ, p.headsQ * p.headDim),
                       rows(in.k, k0, one.seqlenK, p.headsKv * p.headDim),
                       rows(in.v, k0, one.seqlenK, p.headsKv * p.headDimV)};
      test::Reference ref = test::referenceAttention(
          one, seq, c.variant == "causal" ? test::Mask::Causal : test::Mask::None, roundFor(kDtype));
      // LSE is Hq x total_q: sequence b's rows of head h are columns [q0, q0 + Sq_b) of row h.
      std::vector<float> seqLse;
      for (int h = 0; h < p.headsQ; ++h)
        seqLse.insert(seqLse.end(), lse.begin() + h * p.seqlenQ + q0, lse.begin() + h * p.seqlenQ + q0 + one.seqlenQ);
      expectMatches(rows(o, q0, one.seqlenQ, p.headsQ * p.headDimV), seqLse, ref, one,
                    label + ", sequence " + std::to_string(b));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Varlen, ::testing::ValuesIn(varlenCases()),
                         [](const ::testing::TestParamInfo<VarlenCase> &info) { return info.param.name(); });

TEST(VarlenProblem, BadOffsetsAreDiagnosed) {
  Programs programs("none", ElementType::BF16, 64, 64);
  ASSERT_TRUE(programs.unscheduled) << programs.diagnostics;
  tile::FuncOp func = programs.all().front().second;
  Problem p = problem(2, 8, 8, 1, 1, 64, 64);
  p.cuSeqlensQ = {0, 5, 8};
  p.cuSeqlensK = {0, 6, 8};
  Problem packed = p;
  packed.batch = 1;
  test::Inputs in = test::randomInputs(packed, 1);
  std::vector<float> o, lse;
  ASSERT_TRUE(succeeded(interp::run(func, p, in.q, in.k, in.v, o, lse))) << programs.diagnostics;

  const std::pair<std::function<void(Problem &)>, std::string> bad[] = {
      {[](Problem &q) {
         q.cuSeqlensQ = {0, 6, 5};
       },
       "cu_seqlens_q[2] = 5 is outside [6, 8]"},
      {[](Problem &q) {
         q.cuSeqlensK = {0, 6, 9};
       },
       "cu_seqlens_k[2] = 9 is outside [6, 8]"},
      {[](Problem &q) {
         q.cuSeqlensK = {0, 8};
       },
       "cu_seqlens_k has 2 offsets; varlen needs batch + 1 = 3"},
      {[](Problem &q) { q.cuSeqlensQ.clear(); }, "cu_seqlens_q has 0 offsets"},
  };
  for (const auto &[mutate, message] : bad) {
    Problem q = p;
    mutate(q);
    programs.diagnostics.clear();
    EXPECT_TRUE(failed(interp::run(func, q, in.q, in.k, in.v, o, lse)));
    EXPECT_NE(programs.diagnostics.find(message), std::string::npos) << programs.diagnostics;
  }
}

} // namespace
