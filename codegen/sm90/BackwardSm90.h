//===- BackwardSm90.h - the backward's GEMMs as wgmma ---------------------===//
//
// The sm90 family's BackwardTarget (codegen/common/BackwardTarget.h): one or two computing warpgroups a block, and a
// producer warpgroup for the dQ writer and the load warp (TMA). Tiles in the swizzled column-block layout TMA and
// wgmma share (README.md); S = Q·Kᵀ and dP = dO·Vᵀ by wgmma SS (both K-major); P and dS staged transposed
// (stmatrix.trans) so that dV += Pᵀ·dO and dK += dSᵀ·Q are wgmma SS with a K-major A and an MN-major B (dO, Q);
// dQ += dS·K by wgmma RS from dS's registers (one warpgroup) or SS from the staged dS (two), added into the fp32
// accumulator by the writer's bulk reduce-add or each thread's red.global.add.v2 (BackwardSm90.cpp says which when).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM90_BACKWARDSM90_H
#define FLASHTILE_CODEGEN_SM90_BACKWARDSM90_H

#include "codegen/common/BackwardTarget.h"
#include "codegen/common/TileTarget.h"

#include <memory>
#include <optional>
#include <string>

namespace flashtile::codegen::sm90 {

/// Why the sm90 backward cannot print a main program of `shape`, or nothing: one or two warpgroups in the split-Q, key
/// split or column split layouts, head dims multiples of 32 in [64, 256] whose dK and dV fit 128 fp32 a thread.
std::optional<std::string> checkBackwardShape(const KernelShape &shape);

/// The backward printer of `shape` (checkBackwardShape passed).
std::unique_ptr<BackwardTarget> createBackwardTarget(const KernelShape &shape);

} // namespace flashtile::codegen::sm90

#endif // FLASHTILE_CODEGEN_SM90_BACKWARDSM90_H
