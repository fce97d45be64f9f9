//===- BackwardSm90.h - the backward's GEMMs as wgmma ---------------------===//
//
// The sm90 family's BackwardTarget (codegen/common/BackwardTarget.h): one warpgroup a block computes and copies.
// Tiles in the 128-byte-swizzled column-block layout TMA and wgmma share (README.md), copied with cp.async;
// S = Q·Kᵀ and dP = dO·Vᵀ by wgmma SS (both K-major); P and dS staged transposed (stmatrix.trans) so that
// dV += Pᵀ·dO and dK += dSᵀ·Q are wgmma SS with a K-major A and an MN-major B (dO, Q); dQ += dS·K by wgmma RS,
// dS from registers (the accumulator is the A operand in place) and K MN-major, 64 columns at a time, added into the
// fp32 accumulator with red.global.add.v2.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM90_BACKWARDSM90_H
#define FLASHTILE_CODEGEN_SM90_BACKWARDSM90_H

#include "codegen/common/BackwardTarget.h"
#include "codegen/common/TileTarget.h"

#include <memory>
#include <optional>
#include <string>

namespace flashtile::codegen::sm90 {

/// Why the sm90 backward cannot print a main program of `shape`, or nothing: one warpgroup (4 warps) of 64 query
/// rows, 64-key K/V tiles, head dims 64 or 128 (dK and dV stay in registers: 128 + 128 floats a thread at most).
std::optional<std::string> checkBackwardShape(const KernelShape &shape);

/// The backward printer of `shape` (checkBackwardShape passed).
std::unique_ptr<BackwardTarget> createBackwardTarget(const KernelShape &shape);

} // namespace flashtile::codegen::sm90

#endif // FLASHTILE_CODEGEN_SM90_BACKWARDSM90_H
