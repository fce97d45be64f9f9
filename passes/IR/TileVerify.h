//===- TileVerify.h - helpers the tile ops' verifiers share -----------------===//
//
// Private to passes/IR: defined in TileDialect.cpp, used by its verifiers, TileBackwardOps.cpp's and the patterns of
// TileCanonicalize.cpp.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEVERIFY_H
#define FLASHTILE_PASSES_IR_TILEVERIFY_H

#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileDialect.h"

#include <string>

namespace flashtile::tile::detail {

/// Whether two dimensions can be equal (either dynamic, or the same).
bool dimsCompatible(int64_t a, int64_t b);
/// A dimension as the diagnostics write it ("?" when dynamic).
std::string dimStr(int64_t d);
/// Checks a region's entry block signature: `args` block arguments and a terminator yielding `yields`.
mlir::LogicalResult checkRegionSignature(mlir::Operation *op, mlir::Region &region, mlir::TypeRange args,
                                         mlir::TypeRange yields, llvm::StringRef what);
/// The kind of the program around `op` (its named tensors); the forward's outside a tile.func or for an unknown
/// kind (which FuncOp's verifier reports).
const ProgramKind &kindAround(mlir::Operation *op);

} // namespace flashtile::tile::detail

#endif // FLASHTILE_PASSES_IR_TILEVERIFY_H
