//===- BackwardMath.h - the numerics of the backward's tile ops -----------===//
//
// What tile.row_dot, tile.probs, tile.softmax_grad, tile.dot_tn and tile.accumulate compute, in fp32, on plain
// tiles (TileMath.h's): the interpreter checks shapes and coordinates, then calls these. Where the kernels round a
// GEMM operand to 16 bits (P before dV += Pᵀ·dO, dS before dK += dSᵀ·Q and dQ += dS·K), `roundA` does. No MLIR
// dependency.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_BACKWARDMATH_H
#define FLASHTILE_INTERPRETER_BACKWARDMATH_H

#include "interpreter/TileMath.h"

namespace flashtile::interp {

/// D_r = Σ_c a(r, c)·b(r, c), fp32, one per row (rank 1); D's coordinates are a's.
Tile rowDot(const Tile &a, const Tile &b);

/// P = e^(s − lse_r), fp32; a masked score (−inf) or a row whose LSE is −inf (it saw no key) gives 0.
Tile probs(const Tile &s, const Tile &lse);

/// dS' = P∘(dP − D_r), fp32.
Tile softmaxGrad(const Tile &p, const Tile &dp, const Tile &delta);

/// acc += round(A)ᵀ·B with fp32 accumulation: A is rows x n, B rows x m, acc n x m.
Accumulator dotTn(const Tile &a, RoundFn roundA, const Tile &b, Accumulator acc);

/// Row r of round(A)·B (A rows x n, B n x m), fp32: what tile.accumulate adds into row r of its accumulator.
std::vector<float> rowTimes(const Tile &a, RoundFn roundA, const Tile &b, int64_t r);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_BACKWARDMATH_H
