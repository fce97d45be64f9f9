//===- Fa2Pipeline.h - the FA2 schedule as a plug-in ----------------------===//
#ifndef FLASHTILE_SCHEDULES_FA2_FA2PIPELINE_H
#define FLASHTILE_SCHEDULES_FA2_FA2PIPELINE_H

#include "passes/Transforms/ScheduleRegistry.h"
#include "schedules/fa2/Fa2Config.h"

namespace flashtile::fa2 {

/// FA2's knobs as a struct, for tests and C++ callers that know they want FA2. Knobs left at 0 (rescale
/// threshold, min blocks per SM and LPT group blocks: at -1) take Fa2Config::defaultsFor(head dims, program
/// traits, shape class).
struct Fa2Options {
  int blockM = 0, blockN = 0, warps = 0, stages = 0;
  int rescaleThreshold = -1, minBlocksPerSm = -1, lptGroupBlocks = -1;
  std::string shapeClass = "default"; ///< one of the runtime's kShapeClasses
  std::string arch = "sm_80";
  /// The same request in the registry's terms (knobs by name).
  schedule::Request request() const;
};

/// Adds the FA2 schedule's passes, in the order the paper describes the kernel:
/// verify → canonicalize → fix tile sizes (split-Q) → split boundary tiles (mask only there, skip empty
/// tiles) → pipeline K/V copies (tile-pipeline-copies) → lower to the target's instructions → clean up.
void buildPipeline(mlir::OpPassManager &pm, const Fa2Options &options);

} // namespace flashtile::fa2

#endif // FLASHTILE_SCHEDULES_FA2_FA2PIPELINE_H
