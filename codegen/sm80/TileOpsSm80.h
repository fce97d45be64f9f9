//===- TileOpsSm80.h - tile ops as mma.sync, ldmatrix and cp.async --------===//
//
// The sm80 instruction family (sm_80, and sm_90a/sm_100a, which run it too). Register layout of a warp's rows:
// each warp owns blockM / warps query rows, in m16 tiles; each lane holds two rows of every m16 tile (lane / 4
// and lane / 4 + 8), the layout of an mma.sync C fragment. Shared memory holds one Q, one K and one V tile.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H
#define FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H

#include "codegen/common/TileTarget.h"

#include <memory>
#include <optional>
#include <string>

namespace flashtile::codegen::sm80 {

/// Why `shape` cannot be printed with m16n8k16 MMAs, ldmatrix and 16-byte copies, or nothing when it can.
std::optional<std::string> checkShape(const KernelShape &shape);

/// The sm80 target for `shape`; checkShape(shape) must have passed.
std::unique_ptr<TileTarget> createTarget(const KernelShape &shape);

} // namespace flashtile::codegen::sm80

#endif // FLASHTILE_CODEGEN_SM80_TILEOPSSM80_H
