// BackwardTestSupport.h — what the backward tests share: a variant's program, and a small problem whose numbers
// make every variant's rules bite at a handful of rows and keys (diagnostics capture: the compiler tests').
#ifndef FLASHTILE_TESTS_UNIT_BACKWARD_BACKWARDTESTSUPPORT_H
#define FLASHTILE_TESTS_UNIT_BACKWARD_BACKWARDTESTSUPPORT_H

#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/ReferenceBackward.h"
#include "passes/IR/TileDialect.h"
#include "tests/unit/compiler/TestSupport.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace flashtile::backward_test {

using testing::DiagnosticCapture;
using testing::funcOf;

/// The sizes of a test problem.
struct Shape {
  int batch, seqlenQ, seqlenK, headsQ, headsKv, headDim, headDimV;
};

/// How a program is checked: as the DSL builds it, or after canonicalization, which moves the scale into the score
/// hook (the inverse scale inside it, fold_scale on the softmax) and hoists the hooks' constants out of their regions.
enum class Form { AsBuilt, Canonical };

/// The variant's forward program (bf16, head dims `headDim`) in `form`, or null after a test failure.
inline mlir::OwningOpRef<mlir::ModuleOp> programOf(mlir::MLIRContext &context, const Variant &variant,
                                                   Form form = Form::AsBuilt, int headDim = 128) {
  auto module = buildAttentionProgram(context, variant, ProgramOptions{ElementType::BF16, headDim, headDim});
  EXPECT_TRUE(mlir::succeeded(module)) << "variant " << variant.name();
  if (mlir::failed(module))
    return {};
  if (form == Form::Canonical) {
    mlir::PassManager pm(&context);
    pm.addPass(mlir::createCanonicalizerPass());
    if (mlir::failed(pm.run(**module))) {
      ADD_FAILURE() << "canonicalizing variant " << variant.name();
      return {};
    }
  }
  return std::move(*module);
}

inline std::vector<double> uniform(size_t n, double lo, double hi, std::mt19937_64 &rng) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> x(n);
  for (double &e : x)
    e = dist(rng);
  return x;
}

/// Window sizes and caps that matter at a few keys: left 2 (right 1 where bounded), cap 0.7.
inline double testValue(const std::string &param, double declared) {
  if (param == "left")
    return 2;
  if (param == "right")
    return declared < 0 ? declared : 1;
  if (param == "cap")
    return 0.7;
  return declared;
}

/// A problem for `variant` of `shape`: its parameters (testValue), f32 inputs of batch·headsQ·seqlenK random
/// elements away from 0 (enough for any built-in index rule: per head, per (batch, head), per key), int32 inputs as
/// document starts (documents of random lengths, restarting at each sequence).
inline interp::ReferenceProblem problemFor(const Variant &variant, const Shape &s, std::mt19937_64 &rng) {
  interp::ReferenceProblem p{s.batch,   s.seqlenQ, s.seqlenK,  s.headsQ,
                             s.headsKv, s.headDim, s.headDimV, 1.0 / std::sqrt(double(s.headDim)),
                             {},        {}};
  for (const auto &[name, value] : variant.params())
    p.params.push_back(testValue(name, value));
  std::bernoulli_distribution newDocument(0.3);
  for (const auto &[name, kind] : variant.inputs()) {
    if (kind == dsl::ElementKind::F32) {
      std::vector<double> x = uniform(size_t(s.batch) * s.headsQ * s.seqlenK, 0.2, 1.0, rng);
      for (double &e : x)
        e = newDocument(rng) ? -e : e; // both signs, never near 0 (abs and max have a kink there)
      p.inputs.push_back(std::move(x));
      continue;
    }
    std::vector<int32_t> starts(size_t(s.batch) * s.seqlenK);
    for (int b = 0; b < s.batch; ++b)
      for (int t = 0, start = 0; t < s.seqlenK; ++t) {
        if (t > 0 && newDocument(rng))
          start = t;
        starts[size_t(b) * s.seqlenK + t] = start;
      }
    p.inputs.push_back(std::move(starts));
  }
  return p;
}

} // namespace flashtile::backward_test

#endif // FLASHTILE_TESTS_UNIT_BACKWARD_BACKWARDTESTSUPPORT_H
