//===- Fa3Pipeline.h - the FA3 schedule as a plug-in ----------------------===//
#ifndef FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H
#define FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H

#include "passes/Transforms/ScheduleRegistry.h"

namespace flashtile::fa3 {

inline constexpr const char *kName = "fa3";
/// Knob names (the CLI's flags without dashes, tile-apply-schedule's option items).
inline constexpr const char *kBlockM = "block-m", *kBlockN = "block-n", *kStages = "stages",
                            *kConsumerWarpgroups = "consumer-warpgroups", *kProducerRegs = "producer-regs",
                            *kConsumerRegs = "consumer-regs", *kOverlap = "intra-wg-overlap";

/// The roles' register budgets (setmaxnreg): the producer gives registers up, the consumers take them.
struct RoleRegisters {
  int producer = 24, consumer = 240;
};

/// How the consumer orders its GEMMs: `overlap` runs P·V of tile j + 1 under the softmax of tile j (FA3's
/// intra-warpgroup overlap), else each GEMM is waited on right after it is issued.
struct ConsumerOrder {
  bool overlap = true;
};

/// tile-fa3-pipeline (Fa3PipelinePass.cpp): a producer role copies K/V tiles into a ring of `stages` slots, full/empty
/// barrier pairs hand each slot to the consumer role, which runs the program's math.
std::unique_ptr<mlir::Pass> createPipelinePass(RoleRegisters registers = {}, ConsumerOrder order = {});

/// The passes that take a program to the FA3-scheduled IR (roles, ring, barriers), before any target: the
/// interpreter runs it, and tile-lower-to-target then hands it to the sm90 family.
void buildSchedulePipeline(mlir::OpPassManager &pm, const schedule::Request &request);

} // namespace flashtile::fa3

#endif // FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H
