//===- DifferentiateScore.h - derivatives of a variant's scalar hooks -----===//
//
// The backward pass needs, for every score s of a tile, the modified score s' = mod(s, b, h, q, kv) and its
// derivative ds'/ds, and, for the gradients of a variant's float inputs (ALiBi slopes, sinks, a user's bias
// table), ds'/d(each element the hook reads). These are derived from the hook's IR by the chain rule
// (reverse mode over the region's SSA values), never written per variant:
//
//   softcap  s' = cap·tanh(s·(1/cap))    ds'/ds = cap·(1 − t²)·(1/cap)      (t = tanh(s/cap))
//   ALiBi    s' = s − slope·|i − j|      ds'/ds = 1,  ds'/dslopes[h] = −|i − j|
//
// The result is plain scalar IR (arith, math, tile.param, tile.input, tile.softmax_scale, tile.dim) built at a
// builder's insertion point from values standing for the hook's block arguments, so a backward program embeds it
// in its own region and yields what it needs. Integer ops (indices, masks) are constants of the derivative; an op
// with a float operand and a float result that has no rule is an error naming it.
//
// The backward's use of the pieces, per row i of (b, h) with LSE_i, D_i = Σ_d dO_id·O_id, P_ij = e^(s'_ij − LSE_i):
//   dS'_ij = P_ij·(dO_i·v_j − D_i)               (the softmax's derivative)
//   dS_ij  = dS'_ij · ds'/ds                     (then ·scale into dQ = dS·K, dK = dSᵀ·Q)
//   dInput[name][index] += dS'_ij · ds'/dinput    (one term per tile.input read, at the index it read)
// and, for a sink σ(b, h) (a logit that joins the softmax denominator with no value, P_sink,i = e^(σ − LSE_i)):
//   dσ = −Σ_i P_sink,i·D_i                        (summed over the head's rows; LSE's own gradient is not taken)
//   dInput[name][index] += dσ · dσ/dinput          (differentiateHook on the sink region, no score argument)
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_DIFFERENTIATESCORE_H
#define FLASHTILE_PASSES_TRANSFORMS_DIFFERENTIATESCORE_H

#include "passes/IR/TileDialect.h"

#include "mlir/IR/Builders.h"

#include <optional>
#include <string>

namespace flashtile::tile {

/// The partial derivative of a hook's result with respect to one f32 `tile.input` read: accumulate it into the
/// gradient of element `index` of input `name`. A hook that reads an input twice gives two entries.
struct InputPartial {
  std::string name;
  mlir::Value index;   ///< i32, the read's index (recomputed at the insertion point)
  mlir::Value partial; ///< f32
};

/// The partial derivative of a hook's result with respect to a variant parameter (summed over its reads).
struct ParamPartial {
  std::string name;
  mlir::Value partial; ///< f32
};

/// What differentiateHook builds.
struct HookDerivative {
  mlir::Value value; ///< the hook's result, recomputed (the backward needs s' as well as its derivatives)
  mlir::Value dArg;  ///< d value / d the argument asked for (the score of a score_mod); null when none was
  llvm::SmallVector<InputPartial> inputs;
  llvm::SmallVector<ParamPartial> params;
};

/// Builds, at `builder`'s insertion point, the hook `body` (a single-block region ending in tile.yield of one
/// float) with its block arguments replaced by `args`, then its reverse-mode derivative with respect to argument
/// `wrtArg` (if given), to every f32 tile.input read and to every tile.param. Only the ops the result depends on
/// are rebuilt. `hook` names the hook in diagnostics ("score hook", "sink"), `variant` its variant: an op without
/// a derivative rule is reported on the op as "cannot differentiate 'math.sin' in variant 'v''s score hook".
mlir::FailureOr<HookDerivative> differentiateHook(mlir::OpBuilder &builder, mlir::Block &body, mlir::ValueRange args,
                                                  std::optional<unsigned> wrtArg, llvm::StringRef hook,
                                                  llvm::StringRef variant);

/// A score modifier: `args` stand for (score, b, h, q, kv); dArg is d s' / d score.
mlir::FailureOr<HookDerivative> differentiateScoreMod(mlir::OpBuilder &builder, ScoreModOp op, mlir::ValueRange args);

/// A sink region of tile.finalize or tile.store_split: `args` stand for (b, h); no dArg.
mlir::FailureOr<HookDerivative> differentiateSink(mlir::OpBuilder &builder, mlir::Region &sink, mlir::ValueRange args);

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_TRANSFORMS_DIFFERENTIATESCORE_H
