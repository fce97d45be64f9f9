//===- EmitCudaPass.cpp - tile-emit-cuda ----------------------------------===//
#include "codegen/common/EmitCudaPass.h"
#include "codegen/common/CudaEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

namespace flashtile::codegen {
namespace {

struct EmitCudaPass : PassWrapper<EmitCudaPass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(EmitCudaPass)

  EmitCudaPass() = default;
  EmitCudaPass(const EmitCudaPass &other) : PassWrapper(other) {}

  StringRef getArgument() const final { return "tile-emit-cuda"; }
  StringRef getDescription() const final {
    return "Prints every scheduled, pipelined, target-lowered tile.func as CUDA C++ for NVRTC";
  }

  void runOnOperation() override {
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> file = openOutputFile(output, &error);
    if (!file) {
      getOperation()->emitError() << "tile-emit-cuda cannot open '" << output << "': " << error;
      return signalPassFailure();
    }
    WalkResult result = getOperation()->walk([&](tile::FuncOp func) {
      FailureOr<EmittedKernel> kernel = emitCuda(func);
      if (failed(kernel))
        return WalkResult::interrupt();
      file->os() << kernel->source;
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();
    file->keep();
    markAllAnalysesPreserved();
  }

  Option<std::string> output{*this, "output", llvm::cl::desc("file the CUDA is written to ('-': stdout)"),
                             llvm::cl::init("-")};
};

} // namespace

std::unique_ptr<Pass> createEmitCudaPass() { return std::make_unique<EmitCudaPass>(); }

void registerEmitCudaPass() { PassRegistration<EmitCudaPass>(); }

} // namespace flashtile::codegen
