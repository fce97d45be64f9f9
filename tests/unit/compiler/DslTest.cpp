// DslTest.cpp — the variant DSL builds the program the design describes, and rejects ill-typed hooks.
#include "Printers.h"
#include "examples/variants/Variants.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/KernelInfo.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileDialect.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace {

using namespace flashtile;

/// Builds `variant` and returns the diagnostics (empty on success) and the op names of the program in order.
struct Built {
  bool ok = false;
  std::string diagnostics;
  std::vector<std::string> ops;
};

Built build(const Variant &variant, ProgramOptions options = {}) {
  mlir::MLIRContext context;
  Built out;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    out.diagnostics += d.str() + "\n";
    return mlir::success();
  });
  auto module = buildAttentionProgram(context, variant, options);
  out.ok = mlir::succeeded(module);
  if (out.ok)
    (*module)->walk<mlir::WalkOrder::PreOrder>(
        [&](mlir::Operation *op) { out.ops.push_back(op->getName().getStringRef().str()); });
  return out;
}

int count(const Built &b, const std::string &name) { return std::count(b.ops.begin(), b.ops.end(), name); }

TEST(Dsl, FullVariantBuildsTheAttentionProgram) {
  Built b = build(variants::full());
  ASSERT_TRUE(b.ok) << b.diagnostics;
  EXPECT_EQ(count(b, "tile.func"), 1);
  EXPECT_EQ(count(b, "tile.kv_range"), 2); // "may" and "full"
  EXPECT_EQ(count(b, "tile.kv_loop"), 1);
  EXPECT_EQ(count(b, "tile.qk"), 1);
  EXPECT_EQ(count(b, "tile.scale"), 1);
  EXPECT_EQ(count(b, "tile.score_mod"), 0); // no score hook: no op
  EXPECT_EQ(count(b, "tile.mask"), 1);      // still there: it drops keys past seqlen_k
  EXPECT_EQ(count(b, "tile.softmax_update"), 1);
  EXPECT_EQ(count(b, "tile.rescale"), 1);
  EXPECT_EQ(count(b, "tile.pv"), 1);
  EXPECT_EQ(count(b, "tile.finalize"), 1);
  EXPECT_EQ(count(b, "tile.store"), 2);
}

TEST(Dsl, ScoreHookAndParamsBecomeIr) {
  Variant softcap =
      Variant("softcap").param("cap", 30.f).score([](dsl::Expr s, const dsl::Coords &, const dsl::Params &p) {
        return p["cap"] * dsl::tanh(s / p["cap"]);
      });
  Built b = build(softcap);
  ASSERT_TRUE(b.ok) << b.diagnostics;
  EXPECT_EQ(count(b, "tile.score_mod"), 1);
  EXPECT_EQ(count(b, "math.tanh"), 1);
  EXPECT_EQ(count(b, "tile.param"), 2);
  EXPECT_EQ(softcap.paramValues(), std::vector<float>{30.f});
}

TEST(Dsl, MaskMustBeAPredicate) {
  Variant bad = Variant("bad").mask([](const dsl::Coords &c, const dsl::Params &) { return c.kv + 1; });
  Built b = build(bad);
  EXPECT_FALSE(b.ok);
  EXPECT_NE(b.diagnostics.find("variant 'bad': the mask predicate must be 'i1', got 'i32'"), std::string::npos)
      << b.diagnostics;
}

TEST(Dsl, ScoreModifierMustReturnAFloat) {
  Variant bad = Variant("bad").score([](dsl::Expr, const dsl::Coords &c, const dsl::Params &) { return c.q; });
  Built b = build(bad);
  EXPECT_FALSE(b.ok);
  EXPECT_NE(b.diagnostics.find("the score modifier's result must be 'f32', got 'i32'"), std::string::npos)
      << b.diagnostics;
}

TEST(Dsl, UndeclaredParameterIsRejected) {
  Variant bad =
      Variant("bad").score([](dsl::Expr s, const dsl::Coords &, const dsl::Params &p) { return s * p["slope"]; });
  Built b = build(bad);
  EXPECT_FALSE(b.ok);
  EXPECT_NE(b.diagnostics.find("'slope' is not a parameter of @attention"), std::string::npos) << b.diagnostics;
}

TEST(Dsl, UnsupportedHeadDimIsRejected) {
  Built b = build(variants::full(), ProgramOptions{ElementType::BF16, 100, 100});
  EXPECT_FALSE(b.ok);
  EXPECT_NE(b.diagnostics.find("head_dim must be a multiple of 8 in [8, 512], got 100"), std::string::npos)
      << b.diagnostics;
}

TEST(Dsl, VariantIdHashesTheHooksNotTheName) {
  auto a = variantId(variants::causal());
  auto again = variantId(variants::causal());
  Variant sameNameOtherBody =
      Variant("causal").mask([](const dsl::Coords &c, const dsl::Params &) { return c.kv <= c.q; });
  auto other = variantId(sameNameOtherBody);
  ASSERT_TRUE(mlir::succeeded(a) && mlir::succeeded(again) && mlir::succeeded(other));
  EXPECT_EQ(*a, *again);
  EXPECT_NE(*a, *other);
  EXPECT_EQ(a->rfind("causal#", 0), 0u) << *a;
}

} // namespace

namespace {

/// Whether `diagnostics` point at DslTest.cpp on a line in [first, last] (the lines of a variant's definition:
/// compilers differ on which line of a multi-line call std::source_location names).
bool pointsAtLines(const std::string &diagnostics, int first, int last) {
  const std::string file = "DslTest.cpp\":";
  for (size_t at = diagnostics.find(file); at != std::string::npos; at = diagnostics.find(file, at + 1)) {
    int line = std::atoi(diagnostics.c_str() + at + file.size());
    if (line >= first && line <= last)
      return true;
  }
  return false;
}

/// Builds `variant` and returns each diagnostic as "location: message".
std::string locatedDiagnostics(const Variant &variant, bool &ok) {
  mlir::MLIRContext context;
  std::string text;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    llvm::raw_string_ostream os(text);
    os << d.getLocation() << ": " << d.str() << "\n";
    return mlir::success();
  });
  ok = mlir::succeeded(buildAttentionProgram(context, variant, ProgramOptions{}));
  return text;
}

} // namespace

// A misuse of the DSL inside a hook is a diagnostic at the line of the user's code that gave the hook, in every
// build type (it was an assert, gone in Release), and the program is not built.
TEST(Dsl, MisuseInAHookIsReportedAtTheUsersLine) {
  int first = __LINE__;
  Variant mixed = Variant("mixed").score(
      [](dsl::Expr s, const dsl::Coords &c, const dsl::Params &) { return s + c.kv; }); // f32 + i32
  int last = __LINE__;
  bool ok = true;
  std::string diagnostics = locatedDiagnostics(mixed, ok);
  EXPECT_FALSE(ok);
  EXPECT_TRUE(pointsAtLines(diagnostics, first, last)) << diagnostics;
  EXPECT_NE(diagnostics.find("misuse of the variant DSL in the score modifier of variant 'mixed': '+' of f32 and "
                             "i32: convert one side with toFloat or toInt"),
            std::string::npos)
      << diagnostics;

  first = __LINE__;
  Variant notAPredicate = Variant("np").mask([](const dsl::Coords &c, const dsl::Params &) { return !(c.kv + 1); });
  last = __LINE__;
  diagnostics = locatedDiagnostics(notAPredicate, ok);
  EXPECT_FALSE(ok);
  EXPECT_TRUE(pointsAtLines(diagnostics, first, last)) << diagnostics;
  EXPECT_NE(diagnostics.find("in the mask predicate of variant 'np': '!' of i32: it takes a predicate"),
            std::string::npos)
      << diagnostics;

  Variant badRange = Variant("br").kvRange([](const dsl::QTile &q, const dsl::Params &) {
    return dsl::Range{dsl::tanh(q.first), q.last}; // tanh of an i32
  });
  diagnostics = locatedDiagnostics(badRange, ok);
  EXPECT_FALSE(ok);
  EXPECT_NE(diagnostics.find("kvRange rule \"may\" of variant 'br': tanh takes an f32 expression, got i32"),
            std::string::npos)
      << diagnostics;
}

// The runtime dispatches modules (kProgramKinds); each registered program kind is a kernel of one of them, and every
// module kind the runtime knows has programs.
TEST(ProgramKinds, TheRegistryAndTheRuntimeAgree) {
  std::vector<std::string> runtime(kProgramKinds.begin(), kProgramKinds.end());
  std::sort(runtime.begin(), runtime.end());
  EXPECT_EQ(tile::moduleKindNames(), runtime);
  EXPECT_EQ(moduleKinds(), runtime); // what buildProgram builds
  for (const std::string &name : tile::programKindNames()) {
    const tile::ProgramKind *kind = tile::lookupProgramKind(name);
    ASSERT_NE(kind, nullptr);
    EXPECT_NE(kind->verify, nullptr) << name;
    EXPECT_NE(std::find(runtime.begin(), runtime.end(), kind->module), runtime.end()) << name;
    for (const std::string &own : kind->own)
      EXPECT_TRUE(kind->readsTensor(own)) << name << " owns " << own << " but does not read it";
  }
  const tile::ProgramKind *forward = tile::lookupProgramKind(tile::kForwardProgram);
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->name, kForwardKind);
  EXPECT_EQ(forward->module, kForwardKind);
  EXPECT_EQ(tile::lookupProgramKind("sideways"), nullptr);
  std::vector<std::string> backward;
  for (const tile::ProgramKind *kind : tile::programKindsOfModule(kBackwardKind))
    backward.push_back(kind->name);
  EXPECT_EQ(backward, (std::vector<std::string>{"backward_preprocess", "backward_main", "backward_postprocess"}));
}

/// The kinds of the tile.funcs of `variant`'s backward module, in order, and its ops' names.
struct BuiltModule {
  bool ok = false;
  std::string diagnostics;
  std::vector<std::string> kinds, ops;
};

BuiltModule buildBackward(const Variant &variant, ProgramOptions options = {}) {
  mlir::MLIRContext context;
  BuiltModule out;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    out.diagnostics += d.str() + "\n";
    return mlir::success();
  });
  auto module = buildProgram(context, variant, options, kBackwardKind);
  out.ok = mlir::succeeded(module);
  if (!out.ok)
    return out;
  for (tile::FuncOp func : (*module)->getOps<tile::FuncOp>())
    out.kinds.push_back(func.getKind().str());
  (*module)->walk<mlir::WalkOrder::PreOrder>(
      [&](mlir::Operation *op) { out.ops.push_back(op->getName().getStringRef().str()); });
  return out;
}

// Every built-in variant builds its backward module from the hooks its forward is built from: three programs of
// the backward kinds, in the order their kernels run, verified (the kinds' verifiers included).
TEST(BackwardPrograms, EveryBuiltInVariantBuildsThem) {
  for (const std::string &name : variants::names()) {
    for (ProgramOptions options : {ProgramOptions{}, ProgramOptions{ElementType::F16, 192, 128}}) {
      BuiltModule b = buildBackward(*variants::byName(name), options);
      ASSERT_TRUE(b.ok) << name << ": " << b.diagnostics;
      EXPECT_EQ(b.kinds, (std::vector<std::string>{"backward_preprocess", "backward_main", "backward_postprocess"}))
          << name;
      auto count = [&](const std::string &op) { return std::count(b.ops.begin(), b.ops.end(), op); };
      EXPECT_EQ(count("tile.q_loop"), 1) << name;
      EXPECT_EQ(count("tile.probs"), 1) << name;
      EXPECT_EQ(count("tile.softmax_grad"), 1) << name;
      EXPECT_EQ(count("tile.dot_tn"), 2) << name; // dV += Pᵀ·dO, dK += dSᵀ·Q
      EXPECT_EQ(count("tile.qk"), 2) << name;     // S = Q·Kᵀ, dP = dO·Vᵀ
      EXPECT_EQ(count("tile.accumulate"), 1) << name;
      EXPECT_EQ(count("tile.kv_range"), 2) << name; // the forward's rules, which the schedule inverts
      EXPECT_EQ(count("tile.score_mod"), variants::byName(name)->scoreFn() ? 1 : 0) << name;
    }
  }
}

// The chain rule through the score hook is there exactly where the hook's derivative is not 1.
TEST(BackwardPrograms, TheScoreHooksDerivativeIsTheCompilers) {
  auto count = [](const BuiltModule &b, const std::string &op) { return std::count(b.ops.begin(), b.ops.end(), op); };
  BuiltModule softcap = buildBackward(*variants::byName("softcap"));
  ASSERT_TRUE(softcap.ok) << softcap.diagnostics;
  EXPECT_EQ(count(softcap, "tile.score_grad"), 1);
  EXPECT_EQ(count(softcap, "math.tanh"), 2); // the hook and its derivative 1 − tanh²
  BuiltModule alibi = buildBackward(*variants::byName("alibi_causal"));
  ASSERT_TRUE(alibi.ok) << alibi.diagnostics;
  EXPECT_EQ(count(alibi, "tile.score_grad"), 0); // score + bias: d/dscore = 1
  BuiltModule none = buildBackward(*variants::byName("none"));
  ASSERT_TRUE(none.ok) << none.diagnostics;
  EXPECT_EQ(count(none, "tile.score_grad"), 0);
  EXPECT_EQ(count(none, "tile.score_mod"), 0);
}

// buildProgram names the module kinds it accepts.
TEST(BackwardPrograms, AnUnknownKindIsAnError) {
  mlir::MLIRContext context;
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str();
    return mlir::success();
  });
  EXPECT_TRUE(mlir::failed(buildProgram(context, variants::causal(), ProgramOptions{}, "sideways")));
  EXPECT_EQ(diagnostics, "unknown module kind 'sideways'; accepted: backward, forward");
}

// Programs the DSL builds are forward programs, and their kernels say so.
TEST(ProgramKinds, BuiltProgramsAreForward) {
  mlir::MLIRContext context;
  auto module = buildAttentionProgram(context, variants::causal(), ProgramOptions{});
  ASSERT_TRUE(mlir::succeeded(module));
  int funcs = 0;
  (*module)->walk([&](tile::FuncOp func) {
    ++funcs;
    EXPECT_EQ(func.getKind(), tile::kForwardProgram);
  });
  EXPECT_EQ(funcs, 1);
}
