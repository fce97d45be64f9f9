//===- TileMemory.h - names the memory layer's passes and interpreter share ===//
#ifndef FLASHTILE_PASSES_IR_TILEMEMORY_H
#define FLASHTILE_PASSES_IR_TILEMEMORY_H

namespace flashtile::tile {
/// On a tile.role: the role works on query rows [first, first + count) of the block only (a DenseI64ArrayAttr
/// [first, count]): its tile.store writes those rows. On a tile.store: that store writes those rows of its role's
/// (fa4's correction epilogue of each of the block's two Q tiles).
inline constexpr const char *kRoleQueryRowsAttr = "tile.q_rows";
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEMEMORY_H
