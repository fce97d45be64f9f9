//===- FlashtileOpt.cpp - mlir-opt for the tile dialect -------------------===//
#include "codegen/Registry.h"
#include "codegen/common/EmitCudaPass.h"
#include "passes/Transforms/RolePipeline.h"
#include "passes/Transforms/Passes.h"
#include "schedules/Registry.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<flashtile::tile::TileDialect, mlir::arith::ArithDialect, mlir::math::MathDialect>();
  flashtile::schedule::registerBuiltinSchedules();
  flashtile::codegen::registerBuiltinTargets();
  flashtile::tile::registerTilePasses();
  flashtile::tile::registerTileRolePipeline();
  flashtile::codegen::registerEmitCudaPass();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "flashtile optimizer driver\n", registry));
}
