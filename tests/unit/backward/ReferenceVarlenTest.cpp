// ReferenceVarlenTest.cpp — the fp64 oracle on packed sequences (varlen, cu_seqlens): its gradients against central
// finite differences of its own varlen forward, and that forward against the interpreter's varlen forward, for every
// built-in variant, with a sequence that has no key and one that has no query. Also the numerics of the backward's
// tile ops (BackwardMath.h), where the kernels round.
#include "BackwardTestSupport.h"

#include "interpreter/BackwardMath.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"

#include <limits>

using namespace mlir;
using namespace flashtile;
using namespace flashtile::backward_test;

namespace {

constexpr double kStep = 1e-5;         // central differences: truncation ~ kStep², rounding ~ 1e-16 / kStep
constexpr double kRelTolerance = 1e-6; // of max(1, |gradient|)

/// Query lengths 3, 2, 0, 4 and key lengths 4, 0, 2, 3: sequence 1 sees no key, sequence 2 has no query.
const std::vector<int32_t> kCuQ = {0, 3, 5, 5, 9}, kCuK = {0, 4, 4, 6, 9};
const Shape kPacked{4, 9, 9, 2, 1, 3, 2}; // MQA; seqlenQ and seqlenK are the totals

/// problemFor on the packed rows, with document starts within each sequence and the offsets.
interp::ReferenceProblem varlenProblem(const Variant &variant, std::mt19937_64 &rng) {
  interp::ReferenceProblem p = problemFor(variant, kPacked, rng);
  p.cuSeqlensQ = kCuQ;
  p.cuSeqlensK = kCuK;
  for (interp::WideInput &input : p.inputs)
    if (auto *starts = std::get_if<std::vector<int32_t>>(&input)) {
      starts->assign(kPacked.seqlenK, 0);
      for (int b = 0; b < kPacked.batch; ++b)
        for (int t = 1; t < kCuK[b + 1] - kCuK[b]; ++t)
          (*starts)[kCuK[b] + t] = t % 2 == 0 ? t : (*starts)[kCuK[b] + t - 1];
    }
  return p;
}

class ReferenceVarlen : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceVarlen, GradientsMatchFiniteDifferences) {
  Variant variant = *variants::byName(GetParam());
  MLIRContext context;
  OwningOpRef<ModuleOp> module = programOf(context, variant, Form::AsBuilt);
  ASSERT_TRUE(module);
  tile::FuncOp func = funcOf(*module);
  std::mt19937_64 rng(flashtile::testing::seedFor(GetParam()));
  interp::ReferenceProblem p = varlenProblem(variant, rng);
  const Shape &s = kPacked;
  std::vector<double> q = uniform(size_t(s.seqlenQ) * s.headsQ * s.headDim, -1.5, 1.5, rng);
  std::vector<double> k = uniform(size_t(s.seqlenK) * s.headsKv * s.headDim, -1.5, 1.5, rng);
  std::vector<double> v = uniform(size_t(s.seqlenK) * s.headsKv * s.headDimV, -1, 1, rng);
  std::vector<double> dO = uniform(size_t(s.seqlenQ) * s.headsQ * s.headDimV, -1, 1, rng);
  auto grads = interp::referenceBackward(func, p, q, k, v, dO);
  ASSERT_TRUE(succeeded(grads));
  auto loss = [&] {
    auto fwd = interp::referenceForward(func, p, q, k, v);
    EXPECT_TRUE(succeeded(fwd));
    double sum = 0;
    for (size_t i = 0; succeeded(fwd) && i < fwd->o.size(); ++i)
      sum += dO[i] * fwd->o[i];
    return sum;
  };
  double largest = 0;
  for (auto [name, analytic, x] :
       {std::tuple{"dQ", &grads->dq, &q}, std::tuple{"dK", &grads->dk, &k}, std::tuple{"dV", &grads->dv, &v}})
    for (size_t i = 0; i < analytic->size(); ++i) {
      const double saved = (*x)[i];
      (*x)[i] = saved + kStep;
      const double up = loss();
      (*x)[i] = saved - kStep;
      const double down = loss();
      (*x)[i] = saved;
      const double fd = (up - down) / (2 * kStep);
      EXPECT_LE(std::abs((*analytic)[i] - fd), kRelTolerance * std::max(1.0, std::abs(fd)))
          << name << "[" << i << "]: analytic " << (*analytic)[i] << ", finite differences " << fd;
      largest = std::max(largest, std::abs(fd));
    }
  EXPECT_GT(largest, 1e-2) << "every gradient is zero: the check would be vacuous";
  // The query rows of sequence 1 see no key: O = 0 and a zero dQ (a sink still gives them an LSE).
  for (int i = kCuQ[1]; i < kCuQ[2]; ++i)
    for (int h = 0; h < s.headsQ; ++h)
      for (int d = 0; d < s.headDim; ++d)
        EXPECT_EQ(grads->dq[(size_t(i) * s.headsQ + h) * s.headDim + d], 0.0);
  // The keys of sequence 2 meet no query: zero dK and dV.
  for (int j = kCuK[2]; j < kCuK[3]; ++j)
    for (int d = 0; d < s.headDim; ++d)
      EXPECT_EQ(grads->dk[size_t(j) * s.headDim + d], 0.0);
}

/// The varlen forward is the program's: the interpreter's varlen forward agrees (bf16-exact inputs; P and O rounded
/// to bf16 in the program, values below 1.5: 2e-2 covers those roundings).
TEST_P(ReferenceVarlen, ForwardMatchesTheInterpreter) {
  Variant variant = *variants::byName(GetParam());
  MLIRContext context;
  constexpr int kHeadDim = 8; // the smallest the programs take
  OwningOpRef<ModuleOp> module = programOf(context, variant, Form::AsBuilt, kHeadDim);
  ASSERT_TRUE(module);
  std::mt19937_64 rng(flashtile::testing::seedFor(GetParam()) + 1);
  Shape s = kPacked;
  s.headDim = s.headDimV = kHeadDim;
  interp::ReferenceProblem p = varlenProblem(variant, rng);
  p.headDim = p.headDimV = kHeadDim;
  p.softmaxScale = static_cast<float>(1 / std::sqrt(double(kHeadDim)));
  auto bf16 = [](std::vector<double> x) {
    for (double &e : x)
      e = interp::roundToBf16(static_cast<float>(e));
    return x;
  };
  std::vector<double> q = bf16(uniform(size_t(s.seqlenQ) * s.headsQ * s.headDim, -1.5, 1.5, rng));
  std::vector<double> k = bf16(uniform(size_t(s.seqlenK) * s.headsKv * s.headDim, -1.5, 1.5, rng));
  std::vector<double> v = bf16(uniform(size_t(s.seqlenK) * s.headsKv * s.headDimV, -1, 1, rng));
  auto reference = interp::referenceForward(funcOf(*module), p, q, k, v);
  ASSERT_TRUE(succeeded(reference));

  interp::Problem ip;
  ip.batch = s.batch, ip.seqlenQ = s.seqlenQ, ip.seqlenK = s.seqlenK, ip.headsQ = s.headsQ, ip.headsKv = s.headsKv;
  ip.headDim = s.headDim, ip.headDimV = s.headDimV, ip.softmaxScale = static_cast<float>(p.softmaxScale);
  ip.params.assign(p.params.begin(), p.params.end());
  for (const interp::WideInput &input : p.inputs)
    if (auto *f = std::get_if<std::vector<double>>(&input))
      ip.inputs.push_back(std::vector<float>(f->begin(), f->end()));
    else
      ip.inputs.push_back(std::get<std::vector<int32_t>>(input));
  ip.cuSeqlensQ = kCuQ;
  ip.cuSeqlensK = kCuK;
  auto narrow = [](const std::vector<double> &x) { return std::vector<float>(x.begin(), x.end()); };
  std::vector<float> o, lse;
  DiagnosticCapture diagnostics(context);
  ASSERT_TRUE(succeeded(interp::run(funcOf(*module), ip, narrow(q), narrow(k), narrow(v), o, lse))) << diagnostics.text;
  constexpr double kBf16Tolerance = 2e-2;
  for (size_t i = 0; i < o.size(); ++i)
    EXPECT_NEAR(o[i], reference->o[i], kBf16Tolerance) << "O[" << i << "]";
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(reference->lse[i]))
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "LSE[" << i << "]";
    else
      EXPECT_NEAR(lse[i], reference->lse[i], kBf16Tolerance) << "LSE[" << i << "]";
  }
}

INSTANTIATE_TEST_SUITE_P(BuiltinVariants, ReferenceVarlen, ::testing::ValuesIn(variants::names()),
                         [](const auto &info) { return info.param; });

TEST(ReferenceVarlenErrors, BadOffsetsAreAnError) {
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  OwningOpRef<ModuleOp> module = programOf(context, *variants::byName("none"), Form::AsBuilt, 8);
  ASSERT_TRUE(module);
  interp::ReferenceProblem p{2, 3, 3, 1, 1, 8, 8, 1.0, {}, {}, {0, 2, 1}, {0, 1, 3}};
  std::vector<double> x(3 * 8, 0.5);
  EXPECT_TRUE(failed(interp::referenceForward(funcOf(*module), p, x, x, x)));
  EXPECT_NE(diagnostics.text.find("cu_seqlens_q and cu_seqlens_k must be batch + 1 non-decreasing offsets"),
            std::string::npos)
      << diagnostics.text;
}

//===----------------------------------------------------------------------===//
// The backward ops' numerics
//===----------------------------------------------------------------------===//

interp::Tile tileOf(int64_t rows, int64_t cols, std::vector<float> data, int64_t rowBase = 0, int64_t colBase = 0) {
  return interp::Tile{rows, cols, rowBase, colBase, std::move(data)};
}

TEST(BackwardMath, ProbsAreZeroForMaskedScoresAndRowsWithoutKeys) {
  const float inf = std::numeric_limits<float>::infinity();
  interp::Tile s = tileOf(2, 2, {1.0f, -inf, 0.5f, -inf}, 4, 8);
  interp::Tile lse = tileOf(2, 1, {2.0f, -inf}, 4);
  interp::Tile p = interp::probs(s, lse);
  EXPECT_FLOAT_EQ(p.at(0, 0), std::exp(-1.0f));
  EXPECT_EQ(p.at(0, 1), 0.0f);
  EXPECT_EQ(p.at(1, 0), 0.0f); // LSE -inf: the row saw no key
  EXPECT_EQ(p.at(1, 1), 0.0f);
  EXPECT_EQ(p.rowBase, 4);
  EXPECT_EQ(p.colBase, 8);
}

TEST(BackwardMath, RowDotAndSoftmaxGrad) {
  interp::Tile d = interp::rowDot(tileOf(2, 2, {1, 2, 3, 4}), tileOf(2, 2, {5, 6, 7, 8}));
  EXPECT_EQ(d.at(0, 0), 17.0f);
  EXPECT_EQ(d.at(1, 0), 53.0f);
  interp::Tile ds = interp::softmaxGrad(tileOf(1, 2, {0.25f, 0.75f}), tileOf(1, 2, {2, 4}), tileOf(1, 1, {1}));
  EXPECT_EQ(ds.at(0, 0), 0.25f);
  EXPECT_EQ(ds.at(0, 1), 2.25f);
}

/// dot_tn and accumulate round their A operand to B's dtype (as P is rounded for P·V); B and the sums stay exact.
TEST(BackwardMath, GemmsRoundTheirFirstOperand) {
  const float a = 1.0f + 1.0f / 512; // halfway between two bf16 values: rounds to even, 1
  interp::Accumulator acc = interp::Accumulator::zeros(1, 1);
  acc = interp::dotTn(tileOf(2, 1, {a, a}), interp::roundToBf16, tileOf(2, 1, {1, 1}), acc);
  EXPECT_EQ(acc.acc[0], 2.0f);
  acc = interp::dotTn(tileOf(2, 1, {a, a}), interp::roundToF16, tileOf(2, 1, {1, 1}), acc);
  EXPECT_EQ(acc.acc[0], 2.0f + 2 * a); // exact in fp16
  std::vector<float> row = interp::rowTimes(tileOf(1, 2, {a, 3}), interp::roundToBf16, tileOf(2, 1, {2, 1}), 0);
  EXPECT_EQ(row[0], 5.0f);
}

} // namespace
