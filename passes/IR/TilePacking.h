//===- TilePacking.h - GQA packing of a program instance's rows -----------===//
//
// `tile.pack_query_heads` (a unit attribute of tile.func, set by the decode schedule's tile-decode-split-kv): the
// rows of a program instance are the query heads of one K/V head times the query rows — row r is query row r / G
// of query head hKv·G + r % G, G = heads_q / heads_kv — so K/V tiles are read once per group (grouped-query
// attention) and a decode step's few rows fill an MMA tile. Every row's mask, score_mod and sink see that row's own
// query row and head; KV-range rules see the rows' query-row span and must not read the head (the schedule packs
// only programs whose rules do not). Instances run over (batch, K/V head, Q tile of rows).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEPACKING_H
#define FLASHTILE_PASSES_IR_TILEPACKING_H

namespace flashtile::tile {
inline constexpr const char *kPackQueryHeadsAttr = "tile.pack_query_heads";
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEPACKING_H
