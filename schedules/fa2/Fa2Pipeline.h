//===- Fa2Pipeline.h - the FA2 schedule as a pass pipeline ----------------===//
#ifndef FLASHTILE_SCHEDULES_FA2_FA2PIPELINE_H
#define FLASHTILE_SCHEDULES_FA2_FA2PIPELINE_H

#include "schedules/fa2/Fa2Config.h"

#include "mlir/Pass/PassManager.h"

namespace flashtile::fa2 {

/// Knobs left at 0 (rescale threshold, min blocks per SM and LPT group blocks: at -1) take
/// Fa2Config::defaultsFor(head dims, program traits).
struct Fa2Options {
  int blockM = 0, blockN = 0, warps = 0, stages = 0;
  int rescaleThreshold = -1, minBlocksPerSm = -1, lptGroupBlocks = -1;
  std::string shapeClass = kShapeClassDefault; ///< "default" or "short" (Fa2Config.h)
  std::string arch = "sm_80";
};

/// Adds the FA2 schedule's passes, in the order the paper describes the kernel:
/// verify → canonicalize → fix tile sizes (split-Q) → split boundary tiles (mask only there, skip empty
/// tiles) → pipeline K/V copies → lower to the target's instructions → clean up.
void buildPipeline(mlir::OpPassManager &pm, const Fa2Options &options);

} // namespace flashtile::fa2

#endif // FLASHTILE_SCHEDULES_FA2_FA2PIPELINE_H
