//===- TileMath.h - the numerics of the tile ops, on plain arrays ---------===//
//
// What tile.qk, tile.softmax_update, tile.rescale, tile.pv and tile.finalize compute, in fp32, independent of
// the IR: the interpreter checks shapes and types, then calls these. No MLIR dependency.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_TILEMATH_H
#define FLASHTILE_INTERPRETER_TILEMATH_H

#include "interpreter/Rounding.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace flashtile::interp {

/// A row-major fp32 tile; rank-1 tiles (alpha, LSE) have one column. A tile remembers the coordinates of its
/// element (0, 0): query row and key index for score tiles, sequence row for loaded tiles, so masks and score
/// modifiers see global indices.
struct Tile {
  int64_t rows = 0, cols = 1;
  int64_t rowBase = 0, colBase = 0;
  std::vector<float> data;

  static Tile zeros(int64_t rows, int64_t cols) { return Tile{rows, cols, 0, 0, std::vector<float>(rows * cols)}; }
  float &at(int64_t r, int64_t c) { return data[r * cols + c]; }
  float at(int64_t r, int64_t c) const { return data[r * cols + c]; }
};

/// The online softmax's row statistics of `rows` query rows (!tile.stats): running max m (log2 domain), running
/// sum l.
struct RowStats {
  int64_t rows = 0;
  std::vector<float> m, l;

  static RowStats empty(int64_t rows);
};

/// The accumulator of `rows` query rows (!tile.acc): rows x cols fp32, Σ P·V so far.
struct Accumulator {
  int64_t rows = 0, cols = 0;
  std::vector<float> acc;

  static Accumulator zeros(int64_t rows, int64_t cols);
};

/// S = Q·Kᵀ with fp32 accumulation; S's coordinates are (Q's first row, K's first row).
Tile qk(const Tile &q, const Tile &k);

struct SoftmaxStep {
  Tile p;     // exp2(S·c − m'), rounded with `roundP`
  Tile alpha; // exp2(m − m'), one per row
  RowStats stats;
};
/// One online-softmax step with multiplier c (log2 e, times softmax_scale when folded). Rows whose running max
/// is still −inf subtract 0 instead, so they give P = 0 and alpha = 0, never NaN. l sums the unrounded P, as the
/// GPU sums its fp32 registers. With `rescaleThreshold` τ > 0 a row's max moves only when the tile's
/// rowmax(S)·c exceeds it by more than τ (else m' = m, alpha = 1 and P may reach 2^τ): tile.softmax_update's
/// rule, row by row.
SoftmaxStep softmaxUpdate(const Tile &s, const RowStats &stats, float c, RoundFn roundP, int rescaleThreshold = 0);

/// acc *= alpha, row by row.
Accumulator rescale(Accumulator acc, const Tile &alpha);

/// acc += P·V, fp32 accumulation.
Accumulator pv(const Tile &p, const Tile &v, Accumulator acc);

struct Finalized {
  Tile o, lse;
};
/// O = acc / l and LSE = (m + log2 l)·ln 2; rows with l = 0 (no key seen) give O = 0 and LSE = −inf.
/// A `sink` logit s joins every row's softmax with no value (tile.finalize's sink): with m' = max(m, s·log2 e),
/// l' = l·2^(m − m') + 2^(s·log2 e − m'), O = acc·2^(m − m') / l', LSE = (m' + log2 l')·ln 2.
Finalized finalize(const RowStats &stats, const Accumulator &acc, std::optional<float> sink = std::nullopt);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_TILEMATH_H
