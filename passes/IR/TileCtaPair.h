//===- TileCtaPair.h - a block that is one CTA of a cluster pair ----------===//
//
// `tile.cta_pair` (a unit attribute of tile.func, set by the fa4 schedule from its `two-cta` knob): every block runs
// as one CTA of a cluster of two along the Q-tile axis (Q tiles 2m and 2m + 1 of a (batch, head) pair), and the
// pair's MMAs are issued by one thread for both CTAs (tcgen05.mma.cta_group::2: M = 256, each CTA its own 128 rows of
// Q and of S and O, and half of the B operand). The program each CTA runs is the one the IR describes, so the two
// CTAs must walk the same K/V tiles: a schedule sets it only where the key range does not depend on the Q tile, and
// the interpreter runs the blocks pair by pair and checks that both CTAs of a pair walk the same tiles. The launch
// has an even number of blocks along x in clusters of two (codegen/common/LaunchPlanner.h).
//
// `tile.pair_empty` (a unit attribute of tile.channel): the channel's empty barrier is waited on by the role that
// issues the pair's MMAs, so its arrivals are counted for the pair, at the leader CTA's barrier (both CTAs' roles
// arrive there). Its full barrier and the channels without it stay the CTA's own.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILECTAPAIR_H
#define FLASHTILE_PASSES_IR_TILECTAPAIR_H

namespace flashtile::tile {
inline constexpr const char *kCtaPairAttr = "tile.cta_pair";
inline constexpr const char *kPairEmptyAttr = "tile.pair_empty";
/// CTAs of a pair (the cluster's x extent).
inline constexpr int kCtaPairSize = 2;
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILECTAPAIR_H
