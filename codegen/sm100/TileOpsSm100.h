//===- TileOpsSm100.h - the sm100 instruction family ----------------------===//
//
// tcgen05.mma, tensor memory (TMEM), TMA and mbarriers on sm_100a: the family that prints warp-specialized programs
// whose accumulators live in tensor memory. Block layout: the roles take consecutive warpgroups in IR order; each
// computing warpgroup owns 128 query rows (one M = 128 tcgen05.mma per GEMM, row i of its tile in TMEM lane i), so a
// computing warp holds 32 rows. S (fp32) and O (fp32) of warpgroup g sit in TMEM; P is written over S as 16-bit
// pairs and read from there by the TMEM-A form of tcgen05.mma. No SM100 GPU exists here: what this family prints is
// verified by NVRTC, ptxas and the SASS only (README.md), never run.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM100_TILEOPSSM100_H
#define FLASHTILE_CODEGEN_SM100_TILEOPSSM100_H

#include "codegen/common/TargetRegistry.h"

#include <memory>

namespace flashtile::codegen::sm100 {

/// The sm100 family, for codegen/Registry.cpp.
std::unique_ptr<TargetFamily> createFamily();

} // namespace flashtile::codegen::sm100

#endif // FLASHTILE_CODEGEN_SM100_TILEOPSSM100_H
