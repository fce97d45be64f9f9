//===- InvertKvRange.h - which query rows see a K/V tile ------------------===//
//
// A variant's `tile.kv_range` rules map the query rows of a Q tile to keys: `may` = [lo, hi) holds every key a
// row may attend, `full` = [lo, hi) only keys every row attends. The forward walks K/V tiles per Q tile; the
// backward walks Q tiles per K/V tile and needs the converse: the query rows that may see keys [k0, k1], and
// those that see all of them (no mask needed).
//
// The converse is derived from the rule's IR, one bound at a time. Evaluated for a single row r (first = last =
// r, a one-row tile, so the rule's contract holds for it), a bound built from r by adding or subtracting values
// independent of r, min, max and selects on conditions independent of r is non-decreasing in r and is inverted
// exactly:
//   may:  rows r with hi(r) > k0 and lo(r) <= k1   = [firstAbove(hi, k0), lastAtMost(lo, k1) + 1)
//   full: rows r with lo(r) <= k0 and hi(r) > k1   = [firstAbove(hi, k1), lastAtMost(lo, k0) + 1)
// A bound of any other form (it reads an input array, e.g. document_mask's starts, or decreases in r) gives the
// conservative side: every row for `may` (0, resp. seqlen_q), no row for `full`. So causal (both alignments) and
// sliding windows are exact, document_mask is exact on the causal side, and no row that sees a key is ever left
// out.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_INVERTKVRANGE_H
#define FLASHTILE_PASSES_TRANSFORMS_INVERTKVRANGE_H

#include "passes/IR/TileDialect.h"

#include "mlir/IR/Builders.h"

namespace flashtile::tile {

/// Query rows [lo, hi) of a sequence (i32, clamped: 0 <= lo <= hi <= seqlen_q).
struct QueryRows {
  mlir::Value lo, hi;
  /// Whether each end was derived from the rule; false: the conservative end.
  bool exactLo = false, exactHi = false;
};

/// Builds at `builder`'s insertion point the rows that `rule` (a may or full tile.kv_range) lets see the keys
/// [keyFirst, keyLast] (i32, both ends inclusive) of batch entry `batch` and query head `head`: for `may`, every
/// row that may attend one of the keys; for `full`, rows that attend all of them.
QueryRows buildQueryRows(mlir::OpBuilder &builder, KvRangeOp rule, mlir::Value keyFirst, mlir::Value keyLast,
                         mlir::Value batch, mlir::Value head);

/// The Q tiles (blockM rows each, the last one partial) a backward program instance walks for one K/V tile, as
/// SplitBoundary's K/V tiles for a Q tile: [lo, hi) may see a key of it, [fullLo, fullHi) (inside [lo, hi)) have
/// every row attend every key of it, so they skip the mask. i32 tile indices.
struct QueryTiles {
  mlir::Value lo, fullLo, fullHi, hi;
};

/// The Q tiles of `may` and `full` rows (buildQueryRows of the two rules for the same keys).
QueryTiles buildQueryTiles(mlir::OpBuilder &builder, const QueryRows &may, const QueryRows &full, int64_t blockM);

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_TRANSFORMS_INVERTKVRANGE_H
