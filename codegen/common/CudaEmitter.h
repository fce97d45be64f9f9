//===- CudaEmitter.h - scheduled tile IR to CUDA C++ ----------------------===//
//
// Prints a scheduled, pipelined, target-lowered tile.func as one self-contained CUDA C++ translation unit for
// NVRTC: the kernel parameter struct (runtime/include/flashtile/runtime/KernelAbi.h, verbatim), the target's
// device primitives, the variant's functions and the kernel, whose loops, copies, barriers and masking all
// come from the IR.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_CUDAEMITTER_H
#define FLASHTILE_CODEGEN_COMMON_CUDAEMITTER_H

#include "codegen/common/ScalarEmitter.h"
#include "codegen/common/TargetRegistry.h"
#include "flashtile/runtime/KernelInfo.h"
#include "passes/IR/TileDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <string>

namespace flashtile::codegen {

struct EmittedKernel {
  std::string source;         ///< CUDA C++, compiled by flashtile::compileCuda for info.arch
  flashtile::KernelInfo info; ///< how the runtime launches it (entry, block size, shared memory, ...)
};

/// The CUDA of `func`. Emits a diagnostic and fails on IR it cannot print: not scheduled, not pipelined, no
/// #tile.target, an instruction family it has no printer for, ops it does not know, or register tiles the
/// IR does not update in place.
mlir::FailureOr<EmittedKernel> emitCuda(flashtile::tile::FuncOp func);

/// The CUDA of a scheduled backward module (docs/backward.md): the kernels of its preprocess, main and postprocess
/// programs in one unit, and the launch plan that runs the three (BackwardEmitter.cpp).
mlir::FailureOr<EmittedKernel> emitBackwardCuda(mlir::ModuleOp module);

// What the forward's printer shares with the backward's.
/// The instruction family `func` is lowered to, after the checks of a printable program (scheduled, lowered, names
/// that are identifiers; `pipelined`: its copies are IR).
mlir::FailureOr<const TargetFamily *> familyOf(flashtile::tile::FuncOp func, bool pipelined);
/// familyOf(func, true), and the register tiles used in place as the forward printer needs them (each state, score
/// and probability value read once): the family a forward program is printed by.
mlir::FailureOr<const TargetFamily *> printableFamily(flashtile::tile::FuncOp func);
/// The variant's hook regions of `func` (score_mod, mask, score_grad, sinks) as __device__ functions in `out`,
/// identical regions sharing one; the function printed for each hook op.
mlir::FailureOr<llvm::DenseMap<mlir::Operation *, std::string>>
printVariantFunctions(flashtile::tile::FuncOp func, TileTarget &target, ScalarHelpers &helpers, CudaWriter &out);
/// How a score_mod, mask or score_grad function takes its key (TileTarget::KeyArg): clamped where it reads per-key
/// inputs (a tile's padding keys must index inside the arrays), split where it converts kv-relative distances to
/// float (ScalarEmitter::splitKey), else kv.
KeyArg keyArgOf(mlir::Region &region);
/// The KernelInfo fields every module's manifest takes from its (main) program: `kind` (the module's), arch, dtype,
/// head dims, variant, schedule and its dispatch rule, shape class, tile sizes, the variant's parameter and input
/// names (an error past the kernel ABI's counts) and the compiler's version.
mlir::LogicalResult describeKernel(flashtile::tile::FuncOp func, const KernelShape &shape, llvm::StringRef kind,
                                   flashtile::KernelInfo &info);
/// The first lines of a module's source: `title`, the configuration, the launch plan, then the kernel ABI's text.
std::string sourceHeading(const flashtile::KernelInfo &info, const KernelShape &shape, llvm::StringRef isa,
                          llvm::StringRef title);
/// `FlashtileSequence p` of batch entry blockBatch, and the open `if (params.cuSeqlensQ) {` block of a varlen
/// sequence with its rows [qBegin, qEnd) and keys [kBegin, kEnd) declared: the caller rewrites p's fields, then closes.
void openSequenceView(CudaWriter &w);
/// The grouped launch order's arithmetic (a schedule's lptGroupBlocks > 0): from the block's linear index, the group
/// of (batch, head) pairs of at least `groupBlocks` blocks it belongs to — `groupFirst`, `groupSize` and `inGroup`,
/// its place in the group — over `tiles` (= gridDim.x) tiles a pair. The caller takes the tile from
/// inGroup / groupSize (one tile index of every pair of the group, then the next) and the pair from
/// groupFirst + inGroup % groupSize (the host model: fa2's gridTile, Fa2Config.h).
void printGroupedBlockOrder(CudaWriter &w, int64_t groupBlocks, const char *tiles);
/// The FlashtileSequence struct (the kernel parameters as a block's sequence sees them) the variant functions take;
/// with `positions`, FlashtilePositions and the members that place the block in a larger problem (PositionsCuda.h).
std::string sequenceStructText(bool positions = false);
/// `text` safe inside a `//` comment of the generated source.
std::string commentText(llvm::StringRef text);
/// `text` with every character outside [A-Za-z0-9_] replaced by '_'.
std::string identifierText(llvm::StringRef text);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_CUDAEMITTER_H
