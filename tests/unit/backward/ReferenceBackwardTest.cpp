// ReferenceBackwardTest.cpp — the fp64 oracle of the backward pass: its gradients (built from the compiler's
// derivative IR) against central finite differences of its forward, for every built-in variant and a user's hook;
// its forward against the interpreter; an undifferentiable hook is an error naming the op.
#include "BackwardTestSupport.h"

#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"

#include "mlir/Parser/Parser.h"

#include <algorithm>
#include <functional>

using namespace mlir;
using namespace flashtile;
using namespace flashtile::backward_test;

namespace {

constexpr double kStep = 1e-5;         // central differences: truncation ~ kStep², rounding ~ 1e-16 / kStep
constexpr double kRelTolerance = 1e-6; // of max(1, |gradient|)
const Shape kShapes[] = {
    {2, 5, 7, 4, 2, 3, 2}, // GQA (2 query heads per K/V head), Sq < Sk
    {1, 7, 4, 2, 1, 2, 3}, // MQA, Sq > Sk: bottom-right causal rows before the first key see nothing
};

struct Tensors {
  std::vector<double> q, k, v, dO;
};

/// Σ dO∘O of the forward on (possibly perturbed) tensors and problem.
double loss(tile::FuncOp func, const interp::ReferenceProblem &p, const Tensors &t) {
  auto fwd = interp::referenceForward(func, p, t.q, t.k, t.v);
  EXPECT_TRUE(succeeded(fwd));
  if (failed(fwd))
    return 0;
  double sum = 0;
  for (size_t i = 0; i < fwd->o.size(); ++i)
    sum += t.dO[i] * fwd->o[i];
  return sum;
}

/// Checks `analytic` against central differences of the loss over every element `perturb` can reach.
void expectGradient(const std::string &what, const std::vector<double> &analytic,
                    const std::function<double &(size_t)> &element, const std::function<double()> &lossNow) {
  double worst = 0;
  size_t worstAt = 0;
  double worstFd = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    double &x = element(i);
    double saved = x;
    x = saved + kStep;
    double up = lossNow();
    x = saved - kStep;
    double down = lossNow();
    x = saved;
    double fd = (up - down) / (2 * kStep);
    double error = std::abs(analytic[i] - fd) / std::max(1.0, std::abs(fd));
    if (error > worst) {
      worst = error;
      worstAt = i;
      worstFd = fd;
    }
  }
  EXPECT_LE(worst, kRelTolerance) << what << "[" << worstAt << "]: analytic " << analytic[worstAt]
                                  << ", finite differences " << worstFd;
}

/// The whole check of one program on one shape.
void checkGradients(tile::FuncOp func, const Variant &variant, const Shape &shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  interp::ReferenceProblem p = problemFor(variant, shape, rng);
  size_t qn = size_t(shape.batch) * shape.seqlenQ * shape.headsQ,
         kn = size_t(shape.batch) * shape.seqlenK * shape.headsKv;
  Tensors t{uniform(qn * shape.headDim, -1.5, 1.5, rng), uniform(kn * shape.headDim, -1.5, 1.5, rng),
            uniform(kn * shape.headDimV, -1, 1, rng), uniform(qn * shape.headDimV, -1, 1, rng)};
  auto grads = interp::referenceBackward(func, p, t.q, t.k, t.v, t.dO);
  ASSERT_TRUE(succeeded(grads));
  auto lossNow = [&] { return loss(func, p, t); };
  // D = rowsum(dO∘O), laid out as LSE.
  for (int b = 0; b < shape.batch; ++b)
    for (int i = 0; i < shape.seqlenQ; ++i)
      for (int h = 0; h < shape.headsQ; ++h) {
        double d = 0;
        size_t o = ((size_t(b) * shape.seqlenQ + i) * shape.headsQ + h) * shape.headDimV;
        for (int e = 0; e < shape.headDimV; ++e)
          d += t.dO[o + e] * grads->o[o + e];
        EXPECT_NEAR(grads->d[(size_t(b) * shape.headsQ + h) * shape.seqlenQ + i], d, 1e-12);
      }
  expectGradient(
      "dQ", grads->dq, [&](size_t i) -> double & { return t.q[i]; }, lossNow);
  expectGradient(
      "dK", grads->dk, [&](size_t i) -> double & { return t.k[i]; }, lossNow);
  expectGradient(
      "dV", grads->dv, [&](size_t i) -> double & { return t.v[i]; }, lossNow);
  for (size_t n = 0; n < p.inputs.size(); ++n) {
    auto *values = std::get_if<std::vector<double>>(&p.inputs[n]);
    if (!values)
      continue; // int32 inputs get no gradient
    std::string name = variant.inputs()[n].first;
    expectGradient(
        "d" + name, grads->dInputs[n], [&](size_t i) -> double & { return (*values)[i]; }, lossNow);
    double largest = 0;
    for (double g : grads->dInputs[n])
      largest = std::max(largest, std::abs(g));
    EXPECT_GT(largest, 1e-3) << "the gradient of input '" << name << "' is zero: the check would be vacuous";
  }
  for (size_t n = 0; n < p.params.size(); ++n) {
    const std::string &name = variant.params()[n].first;
    // Window sizes are integers (toInt): piecewise constant, and a finite difference at a whole number straddles
    // the step. Their derivative is 0 and the mask does not move.
    if (name == "left" || name == "right") {
      EXPECT_EQ(grads->dParams[n], 0.0) << name;
      continue;
    }
    expectGradient(
        "d" + name, {grads->dParams[n]}, [&](size_t) -> double & { return p.params[n]; }, lossNow);
  }
}

/// The program as built and canonicalized (the scale moved into the score hook): the oracle follows either.
void checkVariant(const Variant &variant) {
  for (Form form : {Form::AsBuilt, Form::Canonical}) {
    bool canonical = form == Form::Canonical;
    MLIRContext context;
    OwningOpRef<ModuleOp> module = programOf(context, variant, form);
    ASSERT_TRUE(module);
    for (const Shape &shape : kShapes) {
      SCOPED_TRACE(variant.name() + (canonical ? " (canonicalized)" : "") + ", Sq " + std::to_string(shape.seqlenQ) +
                   ", Sk " + std::to_string(shape.seqlenK));
      checkGradients(funcOf(*module), variant, shape, 0x5eed + shape.seqlenQ);
    }
  }
}

class ReferenceBackwardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceBackwardTest, MatchesFiniteDifferences) {
  std::optional<Variant> variant = variants::byName(GetParam());
  ASSERT_TRUE(variant);
  checkVariant(*variant);
}

INSTANTIATE_TEST_SUITE_P(BuiltinVariants, ReferenceBackwardTest, ::testing::ValuesIn(variants::names()),
                         [](const auto &info) { return info.param; });

/// A user's hook with most of the DSL's float ops, a bias table, a parameter and a sink that reads both.
Variant userVariant() {
  return Variant("user_mix")
      .param("temp", 1.3f)
      .input("bias", dsl::ElementKind::F32)
      .input("sink_logits", dsl::ElementKind::F32)
      .score([](dsl::Expr s, const dsl::Coords &c, const dsl::Params &p) {
        dsl::Expr bias = p.load("bias", c.h * c.sizes.seqlenK + c.kv);
        dsl::Expr x = s / p["temp"] + bias * dsl::toFloat(c.q - c.kv) * 0.25;
        // log(1 + x) and e^x − 1 meet at 0 with equal slopes: smooth through the select.
        dsl::Expr y = dsl::select(x > 0.0, dsl::log(1.0 + x), dsl::exp(x) - 1.0);
        return dsl::max(y, -2.0 * dsl::abs(bias)) + dsl::sqrt(s * s + 1.0) * 0.1 - dsl::tanh(-s) * dsl::exp2(bias) +
               dsl::min(s, -(bias * bias));
      })
      .sink([](const dsl::HeadCoords &c, const dsl::Params &p) { return p.load("sink_logits", c.h) * p["temp"]; });
}

TEST(ReferenceBackwardTest, UserHookMatchesFiniteDifferences) { checkVariant(userVariant()); }

TEST(ReferenceBackwardTest, UndifferentiableHookIsNamed) {
  MLIRContext context;
  loadProgramDialects(context);
  const char *text = R"mlir(
    tile.func @attention attributes {dtype = bf16, head_dim = 8 : i64, head_dim_v = 8 : i64, params = [], variant = "wavy"} {
      %q = tile.load q : tensor<?x8xbf16>
      %s = tile.qk %q, %q : tensor<?x8xbf16>, tensor<?x8xbf16> -> tensor<?x?xf32>
      %s1 = tile.score_mod %s : tensor<?x?xf32> {
      ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
        %y = math.sin %score : f32
        tile.yield %y : f32
      }
    })mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(module);
  std::mt19937_64 rng(1);
  interp::ReferenceProblem p{1, 2, 2, 1, 1, 8, 8, 0.5, {}, {}};
  std::vector<double> q = uniform(16, -1, 1, rng), k = q, v = q, dO = q;
  DiagnosticCapture diagnostics(context);
  EXPECT_TRUE(failed(interp::referenceBackward(funcOf(*module), p, q, k, v, dO)));
  EXPECT_NE(diagnostics.text.find("cannot differentiate 'math.sin' in variant 'wavy''s score hook"), std::string::npos)
      << diagnostics.text;
}

/// The oracle's forward is the program's: the interpreter (fp32, bf16 inputs and P) agrees on bf16-exact inputs.
TEST(ReferenceBackwardTest, ForwardMatchesInterpreter) {
  for (const std::string &name : variants::names()) {
    SCOPED_TRACE(name);
    Variant variant = *variants::byName(name);
    MLIRContext context;
    constexpr int kHeadDim = 8; // the smallest the programs take
    OwningOpRef<ModuleOp> module = programOf(context, variant, Form::AsBuilt, kHeadDim);
    ASSERT_TRUE(module);
    const Shape s{2, 5, 7, 4, 2, kHeadDim, kHeadDim};
    std::mt19937_64 rng(7);
    interp::ReferenceProblem p = problemFor(variant, s, rng);
    size_t qn = size_t(s.batch) * s.seqlenQ * s.headsQ, kn = size_t(s.batch) * s.seqlenK * s.headsKv;
    auto bf16 = [&](std::vector<double> x) {
      for (double &e : x)
        e = interp::roundToBf16(static_cast<float>(e));
      return x;
    };
    std::vector<double> q = bf16(uniform(qn * s.headDim, -1.5, 1.5, rng)),
                        k = bf16(uniform(kn * s.headDim, -1.5, 1.5, rng)),
                        v = bf16(uniform(kn * s.headDimV, -1, 1, rng));
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
    auto narrow = [](const std::vector<double> &x) { return std::vector<float>(x.begin(), x.end()); };
    std::vector<float> o, lse;
    ASSERT_TRUE(succeeded(interp::run(funcOf(*module), ip, narrow(q), narrow(k), narrow(v), o, lse)));
    constexpr double kBf16Tolerance = 2e-2; // P and O are rounded to bf16 in the program
    for (size_t i = 0; i < o.size(); ++i)
      EXPECT_NEAR(o[i], reference->o[i], kBf16Tolerance) << "O[" << i << "]";
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isinf(reference->lse[i]))
        EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "LSE[" << i << "]";
      else
        EXPECT_NEAR(lse[i], reference->lse[i], kBf16Tolerance) << "LSE[" << i << "]";
    }
  }
}

} // namespace
