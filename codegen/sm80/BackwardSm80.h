//===- BackwardSm80.h - the backward's GEMMs as mma.sync ------------------===//
//
// The sm80 family's BackwardTarget (codegen/common/BackwardTarget.h): 16-bit tiles in padded, swizzled rows
// (sm80::rowPitch), copied with cp.async; S and dP by ldmatrix + mma.sync m16n8k16; P and dS staged row-major and
// read back with ldmatrix.trans for dV and dK, and with ldmatrix for dQ; fp32 adds by red.global.add(.v2).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM80_BACKWARDSM80_H
#define FLASHTILE_CODEGEN_SM80_BACKWARDSM80_H

#include "codegen/common/BackwardTarget.h"
#include "codegen/common/TileTarget.h"

#include <memory>

namespace flashtile::codegen::sm80 {

/// The backward printer of `shape` (a shape the family's checkShape accepts).
std::unique_ptr<BackwardTarget> createBackwardTarget(const KernelShape &shape);

} // namespace flashtile::codegen::sm80

#endif // FLASHTILE_CODEGEN_SM80_BACKWARDSM80_H
