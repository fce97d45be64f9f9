//===- TileExp2Poly.h - a schedule's share of software exponentials -------===//
//
// `tile.exp2_poly_share` (an integer attribute of tile.func, set by the fa4 schedule from its `exp2-poly-share` knob):
// of every 8 n8 tiles of a score row, this many compute the softmax's exponentials with a polynomial on the FMA pipe
// instead of the MUFU unit (FA4's partial software exp2), so that the two pipes share the load. The program's
// semantics do not change (the polynomial's error is within the rounding of P to 16 bits: codegen/sm100/README.md);
// the CUDA printer hands the share to the target (KernelShape::exp2PolyShare), and a family that has no software
// exp2 refuses a nonzero share.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEEXP2POLY_H
#define FLASHTILE_PASSES_IR_TILEEXP2POLY_H

namespace flashtile::tile {
inline constexpr const char *kExp2PolyShareAttr = "tile.exp2_poly_share";
/// The share is counted in eighths of a score row's n8 tiles.
inline constexpr int kExp2PolyShareDenominator = 8;
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEEXP2POLY_H
