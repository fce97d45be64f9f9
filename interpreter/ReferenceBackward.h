//===- ReferenceBackward.h - attention forward and backward in fp64 -------===//
//
// The oracle the backward programs are checked against: for any variant's tile.func (as built, or after
// canonicalization moved the scale into the score hook), straight from the definitions in fp64, row by row, with
// the hooks evaluated by HookEvaluator:
//   S = Q·Kᵀ (·scale unless the program folds it later), S' = score_mod(S), masked; logits = S' (·scale under
//   tile.softmax_update {fold_scale}); P = e^(logits − LSE) with LSE = ln(Σ e^logits + e^sink); O = P·V.
//   D = rowsum(dO∘O); dLogits = P∘(dO·Vᵀ − D); dS = dLogits·ds'/ds (chain rule of the scales); dQ = dS·K,
//   dK = dSᵀ·Q (summed over a K/V head's query heads), dV = Pᵀ·dO; the sink gets −Σ_rows P_sink·D.
// The derivatives of the hooks come from the derivative IR (passes/Transforms/DifferentiateScore.h), not from a
// formula per variant, so this checks that IR too. Dense BSHD layouts, or varlen (packed sequences, as interp::run's).
// A call may be one block of a larger problem (context parallelism: a sequence split across processes): the hooks
// then see the larger problem's coordinates and sizes (ReferenceProblem::Placement), and its backward may take the
// larger problem's O and LSE, as flash-attn's backward takes out and softmax_lse.
// With the gradients come the magnitudes a rounding-error bound needs (Magnitudes): the sums of absolute products
// behind each gradient element, so that a low-precision result can be checked against a bound per element.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_REFERENCEBACKWARD_H
#define FLASHTILE_INTERPRETER_REFERENCEBACKWARD_H

#include "interpreter/HookEvaluator.h"

#include "mlir/Support/LogicalResult.h"

#include <vector>

namespace flashtile::tile {
class FuncOp;
} // namespace flashtile::tile

namespace flashtile::interp {

/// One call's sizes and the variant's numbers, in fp64. Layouts as interp::run's: Q batch x seqlenQ x headsQ x
/// headDim, K batch x seqlenK x headsKv x headDim, V (and dV) ... x headDimV, O and dO batch x seqlenQ x headsQ x
/// headDimV, LSE and D batch x headsQ x seqlenQ.
struct ReferenceProblem {
  int batch = 1, seqlenQ = 0, seqlenK = 0, headsQ = 1, headsKv = 1, headDim = 0, headDimV = 0;
  double softmaxScale = 1;
  std::vector<double> params;    ///< in the order of the tile.func's `params`
  std::vector<WideInput> inputs; ///< in the order of the tile.func's `inputs`
  /// Varlen: empty (dense), or batch + 1 offsets each, as interp::Problem's (seqlenQ/seqlenK are then the totals,
  /// the tensors hold one batch entry of packed rows, and tile.dim key_offset is cu_seqlens_k[b]).
  std::vector<int32_t> cuSeqlensQ{}, cuSeqlensK{};

  /// Where this call's rows, keys and heads sit in a larger problem whose block it computes. The hooks (score,
  /// mask, sink) read the larger problem's coordinates: query row i of sequence b is qOffset + i (qOffsets[b] under
  /// varlen), key j is kOffset + j, query head h is headOffset + h; tile.dim seqlen_q / seqlen_k / heads_q /
  /// heads_kv give the larger problem's sizes, and key_offset b·seqlenK (dense) or cuSeqlensK[b] (varlen) of it.
  /// Zero sizes and empty vectors: the call's own (a call that is the whole problem).
  struct Placement {
    int64_t qOffset = 0, kOffset = 0;
    int seqlenQ = 0, seqlenK = 0; ///< dense
    int headOffset = 0, headsQ = 0, headsKv = 0;
    std::vector<int32_t> qOffsets{}, kOffsets{};     ///< varlen: batch values each, or empty (zeros)
    std::vector<int32_t> cuSeqlensQ{}, cuSeqlensK{}; ///< varlen: batch + 1 each, or empty (the call's)
  } placement{};
  /// The backward of a block: the larger problem's O and LSE for this call's rows (laid out as O and LSE), so that
  /// P = e^(logit − LSE) and D = rowsum(dO∘O) are the larger problem's. Null: the call's own.
  const std::vector<double> *forwardO = nullptr, *forwardLse = nullptr;

  bool isVarlen() const { return !cuSeqlensQ.empty(); }
};

struct ReferenceForward {
  std::vector<double> o, lse; ///< a row that sees no key and no sink: O = 0, LSE = -inf
};

struct ReferenceGradients {
  std::vector<double> o, lse, d;
  std::vector<double> dq, dk, dv;
  /// The gradient of each input, in the tile.func's order: of its f32 elements, empty for an i32 input.
  std::vector<std::vector<double>> dInputs;
  /// The gradient of each parameter, in the tile.func's order.
  std::vector<double> dParams;
  /// Per element of dQ, dK, dV (laid out as they are), with dS = dP∘ds/d(Q·Kᵀ) the gradient of the raw scores:
  ///   dqAbs = Σ_j |dS_ij|·|K_j|, dkAbs = Σ_i |dS_ij|·|Q_i|, dvAbs = Σ_i P_ij·|dO_i|   (over a K/V head's query heads)
  /// bound what rounding one GEMM operand (dS, P) to a relative error u changes (u·abs); and
  ///   dqViaD = Σ_j P_ij·|ds_ij/dlogit_ij|·|K_j|·Σ|dO_i∘O_i|,  dkViaD = Σ_i (the same)·|Q_i|
  /// bound what rounding O to a relative error u changes through D = rowsum(dO∘O) (u·viaD).
  /// For each f32 input, per element (empty for an i32 input), with t the terms of its gradient (dLogit·∂logit/∂x,
  /// and the sink's e^(σ − LSE_i)·D_i·∂σ/∂x):
  ///   dInputsAbs = Σ|t|, what fp32 sums of the terms are relative to;
  ///   dInputsViaD = Σ P·|∂logit/∂x|·Σ|dO_i∘O_i| (the sink's with P_sink), what rounding O moves them by (u·viaD).
  struct Magnitudes {
    std::vector<double> dqAbs, dkAbs, dvAbs, dqViaD, dkViaD;
    std::vector<std::vector<double>> dInputsAbs{}, dInputsViaD{};
  } magnitudes;
};

/// O and LSE of `func` on these tensors. Errors (sizes, a hook the evaluator cannot run) are diagnostics.
mlir::FailureOr<ReferenceForward> referenceForward(tile::FuncOp func, const ReferenceProblem &problem,
                                                   const std::vector<double> &q, const std::vector<double> &k,
                                                   const std::vector<double> &v);

/// O, LSE, D and the gradients of the loss Σ dO∘O with respect to Q, K, V, the f32 inputs and the parameters.
/// A hook the compiler cannot differentiate fails with that diagnostic.
mlir::FailureOr<ReferenceGradients> referenceBackward(tile::FuncOp func, const ReferenceProblem &problem,
                                                      const std::vector<double> &q, const std::vector<double> &k,
                                                      const std::vector<double> &v, const std::vector<double> &dO);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_REFERENCEBACKWARD_H
