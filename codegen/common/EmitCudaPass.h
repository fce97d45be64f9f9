//===- EmitCudaPass.h - tile-emit-cuda ------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_EMITCUDAPASS_H
#define FLASHTILE_CODEGEN_COMMON_EMITCUDAPASS_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace flashtile::codegen {

/// `tile-emit-cuda`: prints the CUDA of every tile.func (see emitCuda) to the `output` file ("-": stdout).
/// The IR is left unchanged.
std::unique_ptr<mlir::Pass> createEmitCudaPass();

/// Registers tile-emit-cuda with the pass registry (for flashtile-opt).
void registerEmitCudaPass();

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_EMITCUDAPASS_H
