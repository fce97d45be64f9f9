//===- PositionsCuda.h - CUDA of programs with position offsets ------------===//
//
// A program marked tile.position_offsets (passes/IR/TilePositions.h) is a block of a larger problem: every kernel
// of its module takes `const FlashtilePositions positions` (runtime/PositionsAbi.h) right after its
// FlashtileFwdParams, and each block computes once, into its sequence view p, the values the variant's functions
// read (p.qOffset, p.kOffset, p.seqlenQGlobal, p.seqlenKGlobal, p.keyOffsetGlobal, p.headOffset, p.headsQGlobal,
// p.headsKvGlobal). A program without the mark prints none of this.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_POSITIONSCUDA_H
#define FLASHTILE_CODEGEN_COMMON_POSITIONSCUDA_H

#include "codegen/common/CudaWriter.h"
#include "passes/IR/TileDialect.h"

#include <string>

namespace flashtile::codegen {

/// Whether `func`'s kernels take position offsets.
bool takesPositions(flashtile::tile::FuncOp func);
/// The kernel parameter after `const FlashtileFwdParams params`: ", const FlashtilePositions positions" for a
/// program with position offsets, "" otherwise.
std::string positionsParam(flashtile::tile::FuncOp func);
/// FlashtilePositions' definition (PositionsAbi.h verbatim), printed ahead of FlashtileSequence.
std::string positionsStructText();
/// FlashtileSequence's members that hold the block's place in the larger problem.
std::string positionsMembersText();
/// Fills those members of p, after the sequence view set p's own lengths and keyOffset.
void printPositionsView(CudaWriter &w);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_POSITIONSCUDA_H
