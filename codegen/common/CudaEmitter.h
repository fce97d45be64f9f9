//===- CudaEmitter.h - scheduled tile IR to CUDA C++ ----------------------===//
//
// Prints a scheduled, pipelined, target-lowered tile.func as one self-contained CUDA C++ translation unit for
// NVRTC: the kernel parameter struct (runtime/include/flashtile/runtime/KernelAbi.h, verbatim), the target's
// device primitives, the variant's functions and the kernel, whose loops, copies, barriers and masking all
// come from the IR.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_CUDAEMITTER_H
#define FLASHTILE_CODEGEN_COMMON_CUDAEMITTER_H

#include "flashtile/runtime/KernelInfo.h"
#include "passes/IR/TileDialect.h"

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

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_CUDAEMITTER_H
