//===- TilePositions.h - programs that see a larger problem's positions ----===//
//
// `tile.position_offsets` (a unit attribute of tile.func, set by tile-offset-positions): the program computes a
// block of a larger problem (a sequence split across GPUs, flashtile.parallel). Its variant's hooks — score_mod,
// mask, the KV-range rules, the sink and their derivatives — read the larger problem's coordinates: query row i is
// q_offset + i, key j is k_offset + j, query head h is head_offset + h, and their sizes are the larger problem's
// (seqlen_q_global, seqlen_k_global, heads_q_global, heads_kv_global, key_offset_global). Everything else (loads,
// stores, the tile walk's bounds, the key-sequence bound of tile.mask) stays in the block's own rows. The values are
// kernel arguments of their own (KernelAbi.h's FlashtilePositions, every kernel's second parameter), so the CUDA of
// a program without the attribute is unchanged.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEPOSITIONS_H
#define FLASHTILE_PASSES_IR_TILEPOSITIONS_H

namespace flashtile::tile {
inline constexpr const char *kPositionOffsetsAttr = "tile.position_offsets";
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEPOSITIONS_H
