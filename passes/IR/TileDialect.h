//===- TileDialect.h - the tile dialect ----------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEDIALECT_H
#define FLASHTILE_PASSES_IR_TILEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "passes/IR/TileDialect.h.inc"
#include "passes/IR/TileEnums.h.inc"

namespace flashtile::tile {
/// Where the online softmax's accumulator lives (AccType's memory space).
enum class MemorySpace { Registers, Shared, Tensor };
/// "registers", "shared", "tensor".
llvm::StringRef memorySpaceName(MemorySpace space);
} // namespace flashtile::tile

#define GET_TYPEDEF_CLASSES
#include "passes/IR/TileTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "passes/IR/TileAttrs.h.inc"

#define GET_OP_CLASSES
#include "passes/IR/TileOps.h.inc"

namespace flashtile::tile {
/// Bounds `#tile.schedule`'s verifier puts on every schedule: rows and keys of a tile, warps of a block (1024
/// threads), buffers per operand, blocks per SM asked of the register allocator.
inline constexpr int64_t kMaxScheduleRows = 1024, kMaxScheduleWarps = 32, kMaxScheduleStages = 16,
                         kMaxScheduleBlocksPerSm = 32;
/// The enclosing program of an op, or null.
FuncOp getEnclosingFunc(mlir::Operation *op);
/// Whether `v` is `target` or computed from it (walking operands through their defining ops).
bool isComputedFrom(mlir::Value v, mlir::Value target);
/// A program dtype's spelling in specs, manifests and messages: "bf16", "f16" or "e4m3" (f8E4M3FN); other types
/// print as MLIR spells them.
std::string dtypeName(mlir::Type dtype);
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEDIALECT_H
