// BackwardProgramsTest.cpp — the backward module the DSL builds (preprocess, main, postprocess) run by the CPU
// interpreter against the fp64 oracle of the forward program (interpreter/ReferenceBackward.h): D, dQ, dK and dV
// for every built-in variant, GQA and MQA, Sq < Sk and Sq > Sk, bf16 and fp16, tiles that end inside a sequence;
// and the check fails when the compiler's derivative of the score hook is left out.
#include "BackwardTestSupport.h"
#include "interpreter/BackwardInterpreter.h"
#include "interpreter/Rounding.h"

#include <algorithm>

using namespace mlir;
using namespace flashtile;
using namespace flashtile::backward_test;

namespace {

const Shape kShapes[] = {
    {2, 9, 11, 4, 2, 16, 16}, // GQA (2 query heads per K/V head), Sq < Sk
    {1, 13, 6, 2, 1, 16, 16}, // MQA, Sq > Sk: bottom-right causal rows before the first key see nothing
    {1, 7, 7, 2, 2, 32, 16},  // head dims 32:16
};

/// max |x − ref| / max(1, max |ref|): the error relative to the tensor's scale.
double relativeError(const std::vector<float> &x, const std::vector<double> &ref) {
  double worst = 0, scale = 1;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, std::abs(double(x[i]) - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return worst / scale;
}

struct Errors {
  double delta = 0, dq = 0, dk = 0, dv = 0;
};

/// Runs `variant`'s backward module (`mutate` may change it first) on one shape and compares it with the oracle.
std::optional<Errors> errorsOf(const Variant &variant, const Shape &shape, ElementType dtype, uint64_t seed,
                               const std::function<void(ModuleOp)> &mutate = {}) {
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  ProgramOptions options{dtype, shape.headDim, shape.headDimV};
  auto forward = buildAttentionProgram(context, variant, options);
  auto backward = buildProgram(context, variant, options, "backward");
  if (failed(forward) || failed(backward)) {
    ADD_FAILURE() << variant.name() << ": " << diagnostics.text;
    return std::nullopt;
  }
  if (mutate)
    mutate(**backward);
  std::mt19937_64 rng(seed);
  interp::ReferenceProblem p = problemFor(variant, shape, rng);
  size_t qn = size_t(shape.batch) * shape.seqlenQ * shape.headsQ,
         kn = size_t(shape.batch) * shape.seqlenK * shape.headsKv;
  // Inputs in the program's dtype, so that the oracle and the interpreter see the same numbers.
  interp::RoundFn round = dtype == ElementType::BF16 ? interp::roundToBf16 : interp::roundToF16;
  auto rounded = [&](std::vector<double> x) {
    for (double &e : x)
      e = round(float(e));
    return x;
  };
  std::vector<double> q = rounded(uniform(qn * shape.headDim, -1.5, 1.5, rng)),
                      k = rounded(uniform(kn * shape.headDim, -1.5, 1.5, rng)),
                      v = rounded(uniform(kn * shape.headDimV, -1, 1, rng)),
                      dO = rounded(uniform(qn * shape.headDimV, -1, 1, rng));
  auto ref = interp::referenceBackward(funcOf(**forward), p, q, k, v, dO);
  if (failed(ref)) {
    ADD_FAILURE() << variant.name() << ": " << diagnostics.text;
    return std::nullopt;
  }
  auto floats = [](const std::vector<double> &x) { return std::vector<float>(x.begin(), x.end()); };
  interp::BackwardTensors t{floats(q), floats(k), floats(v), floats(ref->o), floats(ref->lse), floats(dO)};
  // Tiles of 4 query rows and 3 keys: several of each, the last ones partial.
  auto out = interp::runBackward(**backward, p, t, /*blockM=*/4, /*blockN=*/3);
  if (failed(out)) {
    ADD_FAILURE() << variant.name() << ": " << diagnostics.text;
    return std::nullopt;
  }
  // D of rows that see no key is 0 in both (O = 0).
  return Errors{relativeError(out->delta, ref->d), relativeError(out->dq, ref->dq), relativeError(out->dk, ref->dk),
                relativeError(out->dv, ref->dv)};
}

/// The 16-bit roundings (inputs, P and dS before their products, the gradients) against the fp64 oracle.
double toleranceFor(ElementType dtype) { return dtype == ElementType::BF16 ? 2e-2 : 4e-3; }

TEST(BackwardPrograms, EveryVariantsGradientsMatchTheOracle) {
  uint64_t seed = 1;
  for (const std::string &name : variants::names()) {
    const Variant variant = *variants::byName(name);
    for (const Shape &shape : kShapes) {
      for (ElementType dtype : {ElementType::BF16, ElementType::F16}) {
        std::optional<Errors> e = errorsOf(variant, shape, dtype, seed++);
        ASSERT_TRUE(e) << name;
        double tolerance = toleranceFor(dtype);
        std::string where = name + (dtype == ElementType::BF16 ? " bf16" : " f16") + " Sq " +
                            std::to_string(shape.seqlenQ) + " Sk " + std::to_string(shape.seqlenK);
        EXPECT_LE(e->delta, tolerance) << where;
        EXPECT_LE(e->dq, tolerance) << where;
        EXPECT_LE(e->dk, tolerance) << where;
        EXPECT_LE(e->dv, tolerance) << where;
      }
    }
  }
}

// The check can fail: without the chain rule through softcap's hook (tile.score_grad replaced by its dS'), dQ and dK
// are off, dV is not (it does not go through the hook's derivative).
TEST(BackwardPrograms, LeavingOutTheHooksDerivativeIsCaught) {
  auto dropDerivative = [](ModuleOp module) {
    module.walk([](tile::ScoreGradOp grad) {
      grad.getResult().replaceAllUsesWith(grad.getDs());
      grad.erase();
    });
  };
  std::optional<Errors> e =
      errorsOf(*variants::byName("softcap"), kShapes[0], ElementType::F16, 7, dropDerivative);
  ASSERT_TRUE(e);
  EXPECT_GT(e->dq, 10 * toleranceFor(ElementType::F16));
  EXPECT_GT(e->dk, 10 * toleranceFor(ElementType::F16));
  EXPECT_LE(e->dv, toleranceFor(ElementType::F16));
}

// The interpreter refuses what it does not run, naming the op.
TEST(BackwardPrograms, AForwardModuleIsRefused) {
  MLIRContext context;
  DiagnosticCapture diagnostics(context);
  auto forward = buildAttentionProgram(context, variants::causal(), ProgramOptions{ElementType::BF16, 16, 16});
  ASSERT_TRUE(succeeded(forward));
  interp::ReferenceProblem p{1, 2, 2, 1, 1, 16, 16, 0.25, {}, {}};
  interp::BackwardTensors t;
  EXPECT_TRUE(failed(interp::runBackward(**forward, p, t, 4, 4)));
  EXPECT_NE(diagnostics.text.find("the module needs one program of each backward kind"), std::string::npos)
      << diagnostics.text;
}

} // namespace
