// TestSupport.h — helpers the compiler tests share: diagnostics capture, per-case seeds, the FA2 configurations
// every variant and shape is checked under.
#ifndef FLASHTILE_TESTS_UNIT_COMPILER_TESTSUPPORT_H
#define FLASHTILE_TESTS_UNIT_COMPILER_TESTSUPPORT_H

#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/Interpreter.h"
#include "passes/IR/TileDialect.h"
#include "schedules/fa2/Fa2Pipeline.h"
#include "schedules/fa3/Fa3Pipeline.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashtile::testing {

/// Collects every diagnostic (with its notes) emitted in a context while alive.
class DiagnosticCapture {
public:
  explicit DiagnosticCapture(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &d) {
          text += d.str() + "\n";
          for (mlir::Diagnostic &note : d.getNotes())
            text += "  note: " + note.str() + "\n";
          return mlir::success();
        }) {}
  std::string text;

private:
  mlir::ScopedDiagnosticHandler handler;
};

/// A seed per test case: FNV-1a over the case name on top of FLASHTILE_TEST_SEED (default 0x5eed), so cases get
/// different inputs and a failure replays with the same environment.
inline uint64_t seedFor(const std::string &name) {
  uint64_t base = 0x5eed;
  if (const char *env = std::getenv("FLASHTILE_TEST_SEED"))
    base = std::strtoull(env, nullptr, 0);
  uint64_t h = 1469598103934665603ull ^ base;
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

/// The tile.func of a program module (one function).
inline tile::FuncOp funcOf(mlir::ModuleOp module) { return *module.getOps<tile::FuncOp>().begin(); }

/// The FA2 configurations the interpreter checks run under: the head dim's defaults, and small tiles (several
/// boundary and interior tiles on small problems) with the other rescale policy (FA4's, threshold 8).
inline std::vector<std::pair<std::string, fa2::Fa2Options>> fa2TestSchedules() {
  return {{"fa2 defaults", fa2::Fa2Options{}},
          {"fa2 blockM 64 blockN 32 warps 4, rescale threshold 8",
           fa2::Fa2Options{.blockM = 64, .blockN = 32, .warps = 4, .rescaleThreshold = 8}}};
}

/// A copy of `module` after the FA2 schedule's passes, or null (the diagnostics say why).
inline mlir::OwningOpRef<mlir::ModuleOp> scheduled(mlir::ModuleOp module, const fa2::Fa2Options &options) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::PassManager pm(module.getContext());
  fa2::buildPipeline(pm, options);
  if (mlir::failed(pm.run(*copy)))
    return {};
  return copy;
}

/// A copy of `module` after the decode (split-KV) schedule's passes with `knobs`, or null (the diagnostics, or
/// `error` for bad knobs, say why).
inline mlir::OwningOpRef<mlir::ModuleOp> scheduledDecode(mlir::ModuleOp module, schedule::Knobs knobs = {},
                                                         std::string *error = nullptr) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::PassManager pm(module.getContext());
  std::string message;
  if (mlir::failed(schedule::buildPipeline(pm, schedule::Request{"decode", "sm_80", "default", std::move(knobs)},
                                           message))) {
    if (error)
      *error = message;
    return {};
  }
  if (mlir::failed(pm.run(*copy)))
    return {};
  return copy;
}

/// The FA3 configurations the interpreter checks (the scheduled IR: roles, ring, barriers; no target lowers it yet):
/// the defaults (128 x 128 or 128 x 80 tiles, two slots), and small tiles over a three-slot ring with one consumer
/// warpgroup, so that the producer runs ahead and slots are reused within a walk.
inline std::vector<std::pair<std::string, schedule::Knobs>> fa3TestSchedules() {
  return {{"fa3 defaults", {}},
          {"fa3 without intra-warpgroup overlap", {{fa3::kOverlap, 0}}},
          {"fa3 blockM 64 blockN 32, 3 slots, one consumer warpgroup",
           {{fa3::kBlockM, 64}, {fa3::kBlockN, 32}, {fa3::kStages, 3}, {fa3::kConsumerWarpgroups, 1}}},
          // Persistent blocks run several tiles each (the interpreter's Problem::persistentBlocks): ring positions and
          // Q's barrier phases carry from tile to tile.
          {"fa3 persistent", {{fa3::kPersistent, 1}}},
          {"fa3 persistent without overlap, blockM 64 blockN 32, 3 slots",
           {{fa3::kPersistent, 1}, {fa3::kOverlap, 0}, {fa3::kBlockM, 64}, {fa3::kBlockN, 32}, {fa3::kStages, 3},
            {fa3::kConsumerWarpgroups, 1}}},
          // FA4's conditional rescaling: maxes move only past 2^8 of headroom, the rescale of acc is skipped else.
          {"fa3 rescale threshold 8, blockN 32", {{fa3::kRescaleThreshold, 8}, {fa3::kBlockN, 32}}}};
}

/// A copy of `module` after the FA3 schedule's passes (up to its pipeline), or null.
inline mlir::OwningOpRef<mlir::ModuleOp> scheduledFa3(mlir::ModuleOp module, const schedule::Knobs &knobs) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::PassManager pm(module.getContext());
  schedule::Request request;
  request.schedule = fa3::kName;
  request.knobs = knobs;
  fa3::buildSchedulePipeline(pm, request);
  if (mlir::failed(pm.run(*copy)))
    return {};
  return copy;
}

/// The FA4 configurations the interpreter checks (the whole pipeline down to the sm100 family; no SM100 GPU runs
/// them): the defaults (two 128-row Q tiles, FA4's rescale threshold 8), rescaling every tile, and one Q tile with
/// 32-key tiles over three slots (several K/V tiles and ring rounds on small problems); each with FA4's own roles
/// (`roles` 1, the default: one MMA warp, a correction warpgroup, on the memory layer, its protocol checked) and with
/// the first form's (`roles` 0).
inline std::vector<std::pair<std::string, schedule::Knobs>> fa4TestSchedules() {
  std::vector<std::pair<std::string, schedule::Knobs>> forms = {
      {"fa4 defaults", {}},
      {"fa4 rescale threshold 0", {{"rescale-threshold", 0}}},
      {"fa4 one softmax warpgroup, blockN 32, 3 slots", {{"softmax-warpgroups", 1}, {"block-n", 32}, {"stages", 3}}}};
  for (size_t i = 0, n = forms.size(); i < n; ++i) {
    auto [label, knobs] = forms[i];
    knobs["roles"] = 0;
    forms.emplace_back(label + ", the first form's roles", std::move(knobs));
  }
  return forms;
}

/// The FA4 cluster-pair configurations (two-cta = 1: each block one CTA of a pair, the interpreter running the blocks
/// pair by pair and checking that both walk the same K/V tiles): the defaults, and one Q tile with 32-key tiles over
/// three slots at rescale threshold 0. Head dims >= 128 and key ranges that do not depend on the Q tile only.
inline std::vector<std::pair<std::string, schedule::Knobs>> fa4TwoCtaTestSchedules() {
  return {{"fa4 two-cta", {{"two-cta", 1}}},
          {"fa4 two-cta, one softmax warpgroup, blockN 32, 3 slots, rescale threshold 0",
           {{"two-cta", 1}, {"softmax-warpgroups", 1}, {"block-n", 32}, {"stages", 3}, {"rescale-threshold", 0}}}};
}

/// A copy of `module` after the FA4 schedule's pipeline for sm_100a with `knobs`, or null (the diagnostics, or
/// `error` for bad knobs, say why).
inline mlir::OwningOpRef<mlir::ModuleOp> scheduledFa4(mlir::ModuleOp module, schedule::Knobs knobs = {},
                                                      std::string *error = nullptr) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::PassManager pm(module.getContext());
  std::string message;
  if (mlir::failed(
          schedule::buildPipeline(pm, schedule::Request{"fa4", "sm_100a", "default", std::move(knobs)}, message))) {
    if (error)
      *error = message;
    return {};
  }
  if (mlir::failed(pm.run(*copy)))
    return {};
  return copy;
}

/// The FA1 configurations the interpreter checks (the whole pipeline, one launch per K/V tile): the defaults, and
/// small tiles of two warps (more K/V steps and Q tiles on small problems).
inline std::vector<std::pair<std::string, schedule::Knobs>> fa1TestSchedules() {
  return {{"fa1 defaults", {}}, {"fa1 blockM 32 blockN 16 warps 2", {{"block-m", 32}, {"block-n", 16}, {"warps", 2}}}};
}

/// A copy of `module` after the FA1 schedule's pipeline (down to its target) with `knobs`, or null (the
/// diagnostics, or `error` for bad knobs, say why).
inline mlir::OwningOpRef<mlir::ModuleOp> scheduledFa1(mlir::ModuleOp module, schedule::Knobs knobs = {},
                                                      std::string *error = nullptr) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::PassManager pm(module.getContext());
  std::string message;
  if (mlir::failed(
          schedule::buildPipeline(pm, schedule::Request{"fa1", "sm_80", "default", std::move(knobs)}, message))) {
    if (error)
      *error = message;
    return {};
  }
  if (mlir::failed(pm.run(*copy)))
    return {};
  return copy;
}

/// The program of built-in variant `variant` (head dim = head dim V), or null after a test failure naming it.
inline mlir::OwningOpRef<mlir::ModuleOp> buildProgram(mlir::MLIRContext &context, const std::string &variant,
                                                      ElementType dtype, int headDim) {
  std::optional<Variant> v = variants::byName(variant);
  EXPECT_TRUE(v.has_value()) << "no variant " << variant;
  if (!v)
    return {};
  auto module = buildAttentionProgram(context, *v, ProgramOptions{dtype, headDim, headDim});
  EXPECT_TRUE(mlir::succeeded(module));
  return mlir::succeeded(module) ? std::move(*module) : mlir::OwningOpRef<mlir::ModuleOp>();
}

/// A dense problem: head dim = head dim V, the softmax scale 1/sqrt(head dim), the variant's numbers `params`.
inline interp::Problem problem(int batch, int seqlenQ, int seqlenK, int headsQ, int headsKv, int headDim,
                               std::vector<float> params = {}) {
  interp::Problem p;
  p.batch = batch;
  p.seqlenQ = seqlenQ;
  p.seqlenK = seqlenK;
  p.headsQ = headsQ;
  p.headsKv = headsKv;
  p.headDim = p.headDimV = headDim;
  p.softmaxScale = 1.0f / std::sqrt(float(headDim));
  p.params = std::move(params);
  return p;
}

/// What the interpreter writes: O and LSE.
struct Outputs {
  std::vector<float> o, lse;
};

} // namespace flashtile::testing

#endif // FLASHTILE_TESTS_UNIT_COMPILER_TESTSUPPORT_H
