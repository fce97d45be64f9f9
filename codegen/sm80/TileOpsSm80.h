//===- TileOpsSm80.h - the sm80 instruction family ------------------------===//
//
// mma.sync, ldmatrix and cp.async: sm_80, and sm_90a/sm_100a, which run them too. Register layout of a warp's
// rows: the schedule's warp layout (#tile.schedule's warpLayout, KernelShape::warpLayout), of which this family
// prints split_q: each warp owns warpRows query rows, in m16 tiles; each lane holds two rows of every m16 tile
// (lane / 4 and lane / 4 + 8), the layout of an mma.sync C fragment. Shared memory holds one Q tile and `stages`
// K and V tiles.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H
#define FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H

#include "codegen/common/TargetRegistry.h"

#include <cstdint>
#include <memory>

namespace flashtile::codegen::sm80 {

/// The sm80 family, for codegen/Registry.cpp.
std::unique_ptr<TargetFamily> createFamily();

/// Bytes of one shared-memory row of `width` 16-bit elements: 16-byte chunks, padded to an odd number of chunks
/// unless a multiple of 8 (the prelude's sm80::rowPitch: bank-conflict-free ldmatrix without a swizzle; head dim
/// 96: 208 bytes).
int64_t rowBytes(int64_t width);

} // namespace flashtile::codegen::sm80

#endif // FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H
