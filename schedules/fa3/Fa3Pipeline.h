//===- Fa3Pipeline.h - the FA3 schedule as a plug-in ----------------------===//
#ifndef FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H
#define FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H

#include "passes/Transforms/ScheduleRegistry.h"

namespace flashtile::fa3 {

inline constexpr const char *kName = "fa3";
/// Knob names (the CLI's flags without dashes, tile-apply-schedule's option items).
inline constexpr const char *kBlockM = "block-m", *kBlockN = "block-n", *kStages = "stages",
                            *kConsumerWarpgroups = "consumer-warpgroups", *kProducerRegs = "producer-regs",
                            *kConsumerRegs = "consumer-regs", *kOverlap = "intra-wg-overlap", *kPingpong = "pingpong",
                            *kPersistent = "persistent", *kStageO = "stage-o", *kScheduler = "scheduler",
                            *kRescaleThreshold = "rescale-threshold", *kExp2PolyShare = "exp2-poly-share",
                            *kDqWriter = "dq-writer", *kLoadWarp = "load-warp", *kSwapSdp = "swap-sdp";
/// The largest `rescale-threshold` (log2 units): P may reach 2^threshold, which stays finite in fp16 up to 15.
inline constexpr int64_t kMaxRescaleThreshold = 15;

/// The values of the `scheduler` knob, by index: how a persistent kernel's blocks get their work tiles.
/// static: the printer's fixed assignment (units of two Q tiles, one unit in every gridDim.x); dynamic: units of
/// one Q tile, heaviest first, taken at run time from a per-launch counter (tile.work_queue).
inline constexpr const char *kSchedulerNames[] = {"static", "dynamic"};
inline constexpr int64_t kStaticScheduler = 0, kDynamicScheduler = 1;

/// The roles' register budgets (setmaxnreg): the producer gives registers up, the consumers take them.
struct RoleRegisters {
  int producer = 24, consumer = 240;
};

/// FA3's budgets for `consumers` consumer warpgroups: the producer keeps 24 (32 beside three consumer warpgroups),
/// the consumers share the rest of the 64K registers (256, 240, 160).
inline RoleRegisters defaultRegisters(int64_t consumers) {
  return {consumers >= 3 ? 32 : 24, consumers == 1 ? 256 : consumers == 2 ? 240 : 160};
}

/// How the consumer orders its GEMMs: `overlap` runs P·V of tile j + 1 under the softmax of tile j (FA3's
/// intra-warpgroup overlap), else each GEMM is waited on right after it is issued.
struct ConsumerOrder {
  bool overlap = true;
  /// The consumer warpgroups take turns issuing their GEMMs (tile.role's pingpong): 1 yes, 0 no, -1 where FA3
  /// does (two or more consumer warpgroups, head dims up to 128; measured on the H200: +5-8% causal, +1-3%
  /// otherwise at hd 64-128, mixed at 256).
  int pingpong = -1;
  /// A persistent kernel: about one thread block per SM, each looping over work tiles (tile.work_loop), so that the
  /// producer loads the next tile's Q and K/V while the consumers finish the current one. 1 yes, 0 no, -1 where it
  /// measured faster (Fa3PipelinePass.cpp, persistentByDefault).
  int persistent = -1;
  /// Persistent blocks take their tiles from a per-launch counter at run time (the `scheduler` knob's dynamic),
  /// heaviest first, instead of the printer's fixed assignment. Implies persistent blocks; with persistent = 0 it
  /// is an error.
  bool dynamic = false;
  /// O staging (tile.store o ... through): 1 O leaves through the consumer's Q rows of shared memory (whole rows, 16
  /// bytes a store; a persistent block releases Q's slot after it, not after its last Q·Kᵀ, so the next tile's Q
  /// lands later), 0 each thread stores its accumulator fragments, -1 staged where it measured faster (a block a
  /// tile; persistent blocks above head dim 64).
  int stageO = -1;
};

/// tile-fa3-pipeline (Fa3PipelinePass.cpp): a producer role copies K/V tiles into a ring of `stages` slots, full/empty
/// barrier pairs hand each slot to the consumer role, which runs the program's math.
/// A budget of 0 is defaultRegisters' for the schedule's consumer warpgroups.
std::unique_ptr<mlir::Pass> createPipelinePass(RoleRegisters registers = {0, 0}, ConsumerOrder order = {});

/// The passes that take a program to the FA3-scheduled IR (roles, ring, barriers), before any target: the
/// interpreter runs it, and tile-lower-to-target then hands it to the sm90 family.
void buildSchedulePipeline(mlir::OpPassManager &pm, const schedule::Request &request);

} // namespace flashtile::fa3

#endif // FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H
