//===- BackwardInterpreter.h - runs a backward module's programs on the CPU -===//
//
// Executes the three programs of a backward module (dsl buildProgram(..., "backward"); docs/backward.md) as the
// plan runs their kernels: the preprocess once per (batch, head, Q tile), the main program once per (batch, query
// head, K/V tile) walking its Q tiles, the postprocess once per (batch, head, Q tile). Tiles are blockM query rows
// and blockN keys (the programs are unscheduled: the sizes are the interpreter's, so that the Q-tile walk, the
// accumulation of dQ over K/V tiles and of dK/dV over a GQA group are exercised). Values are fp32, rounded to the
// program's dtype where the kernels hold 16-bit values: the inputs, A of tile.dot_tn and tile.accumulate (P, dS),
// and dQ, dK, dV. The variant's hooks (score_mod, mask, score_grad) are evaluated by HookEvaluator.
// Dense layouts only, as the fp64 oracle (interpreter/ReferenceBackward.h) it is checked against.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_BACKWARDINTERPRETER_H
#define FLASHTILE_INTERPRETER_BACKWARDINTERPRETER_H

#include "interpreter/ReferenceBackward.h"

#include "mlir/IR/BuiltinOps.h"

#include <vector>

namespace flashtile::interp {

/// The forward call's tensors and the loss's gradient, in ReferenceProblem's layouts (O, dO: batch x seqlenQ x
/// headsQ x headDimV; LSE: batch x headsQ x seqlenQ, natural log).
struct BackwardTensors {
  std::vector<float> q, k, v, o, lse, dO;
};

struct BackwardOutputs {
  std::vector<float> delta;  ///< D = rowsum(dO∘O), laid out as LSE
  std::vector<float> dq, dk, dv; ///< of the program's dtype (values rounded to it), Q's, K's and V's layouts
};

/// Runs `module`'s backward_preprocess, backward_main and backward_postprocess programs on `t` with tiles of
/// `blockM` query rows and `blockN` keys. Errors (sizes, an op it does not run, a hook it cannot evaluate) are
/// diagnostics on the op.
mlir::FailureOr<BackwardOutputs> runBackward(mlir::ModuleOp module, const ReferenceProblem &problem,
                                             const BackwardTensors &t, int blockM, int blockN);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_BACKWARDINTERPRETER_H
