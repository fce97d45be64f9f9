//===- TileOpsSm90.h - the sm90 instruction family ------------------------===//
//
// wgmma, TMA, mbarriers and setmaxnreg on sm_90a: the family that prints warp-specialized programs (roles, K/V rings
// guarded by full/empty barriers, asynchronous MMAs). Block layout: the roles take consecutive warpgroups in IR
// order; the computing role's warps own 16 query rows each (warpgroup g: rows [64g, 64g + 64) of the Q tile, one
// m64 wgmma per GEMM). Shared memory: the Q tile and `stages` K and V tiles, each a 1024-byte-aligned TMA box in
// the 128-byte-swizzled column-block layout both TMA and wgmma use (README.md), then the barriers.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM90_TILEOPSSM90_H
#define FLASHTILE_CODEGEN_SM90_TILEOPSSM90_H

#include "codegen/common/TargetRegistry.h"

#include <memory>

namespace flashtile::codegen::sm90 {

/// The sm90 family, for codegen/Registry.cpp.
std::unique_ptr<TargetFamily> createFamily();

} // namespace flashtile::codegen::sm90

#endif // FLASHTILE_CODEGEN_SM90_TILEOPSSM90_H
