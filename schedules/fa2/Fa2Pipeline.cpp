//===- Fa2Pipeline.cpp - the FA2 schedule as a pass pipeline --------------===//
#include "schedules/fa2/Fa2Pipeline.h"
#include "passes/Transforms/Passes.h"

#include "mlir/Transforms/Passes.h"

namespace flashtile::fa2 {

void buildPipeline(mlir::OpPassManager &pm, const Fa2Options &options) {
  mlir::OpPassManager &func = pm.nest<tile::FuncOp>();
  func.addPass(tile::createTileVerifyProgram());
  func.addPass(mlir::createCanonicalizerPass());
  tile::TileApplyScheduleOptions schedule;
  schedule.scheduleName = kName;
  schedule.blockM = options.blockM;
  schedule.blockN = options.blockN;
  schedule.warps = options.warps;
  schedule.stages = options.stages;
  schedule.rescaleThreshold = options.rescaleThreshold;
  schedule.minBlocksPerSm = options.minBlocksPerSm;
  schedule.lptGroupBlocks = options.lptGroupBlocks;
  schedule.shapeClass = options.shapeClass;
  func.addPass(tile::createTileApplySchedule(schedule));
  func.addPass(tile::createTileSplitBoundary());
  func.addPass(tile::createTilePipeline());
  func.addPass(tile::createTileLowerToTarget(tile::TileLowerToTargetOptions{options.arch}));
  func.addPass(mlir::createCanonicalizerPass());
  func.addPass(mlir::createCSEPass());
}

} // namespace flashtile::fa2
