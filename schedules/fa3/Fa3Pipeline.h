//===- Fa3Pipeline.h - the FA3 schedule as a plug-in ----------------------===//
#ifndef FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H
#define FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H

#include "passes/Transforms/RolePipeline.h"
#include "passes/Transforms/ScheduleRegistry.h"

namespace flashtile::fa3 {

inline constexpr const char *kName = "fa3";
/// Knob names (the CLI's flags without dashes, tile-apply-schedule's option items).
inline constexpr const char *kBlockM = "block-m", *kBlockN = "block-n", *kStages = "stages",
                            *kConsumerWarpgroups = "consumer-warpgroups", *kProducerRegs = "producer-regs",
                            *kConsumerRegs = "consumer-regs", *kOverlap = "intra-wg-overlap", *kPingpong = "pingpong",
                            *kPersistent = "persistent", *kStageO = "stage-o", *kScheduler = "scheduler",
                            *kRescaleThreshold = "rescale-threshold", *kExp2PolyShare = "exp2-poly-share",
                            *kDqWriter = "dq-writer", *kLoadWarp = "load-warp", *kSwapSdp = "swap-sdp",
                            *kEarlyDv = "early-dv", *kSwapDkv = "swap-dkv", *kDoBuffers = "do-buffers",
                            *kDqWriterWarps = "dq-writer-warps",
                            *kDqSwizzle = "dq-swizzle", *kRotatedWalk = "rotated-walk",
                            *kLptGroupBlocks = "lpt-group-blocks", *kRingRows = "ring-rows",
                            *kDsBuffers = "ds-buffers", *kDescAdvance = "desc-advance",
                            *kDqFragments = "dq-fragments", *kDkvStaged = "dkv-staged",
                            *kDqLastWait = "dq-last-wait", *kDqAddV4 = "dq-add-v4",
                            *kLateV = "late-v", *kDqSlices = "dq-slices", *kMaxChains = "max-chains",
                            *kLaneVote = "lane-vote", *kLatePvWait = "late-pv-wait";
/// The largest backward `lpt-group-blocks`.
inline constexpr int64_t kMaxLptGroupBlocks = 1 << 20;
/// The largest `rescale-threshold` (log2 units): P may reach 2^threshold, which stays finite in fp16 up to 15.
inline constexpr int64_t kMaxRescaleThreshold = 15;

/// The values of the `scheduler` knob, by index: how a persistent kernel's blocks get their work tiles.
/// static: the printer's fixed assignment (units of two Q tiles, one unit in every gridDim.x); dynamic: units of
/// one Q tile, heaviest first, taken at run time from a per-launch counter (tile.work_queue).
inline constexpr const char *kSchedulerNames[] = {"static", "dynamic"};
inline constexpr int64_t kStaticScheduler = 0, kDynamicScheduler = 1;

/// The roles' register budgets and the consumer's order: the generic role pipeline's (passes/Transforms/RolePipeline.h),
/// which fa3's forward configures from its knobs.
using tile::ConsumerOrder;
using tile::defaultRegisters;
using tile::RoleRegisters;

/// The passes that take a program to the FA3-scheduled IR (roles, ring, barriers), before any target: the
/// interpreter runs it, and tile-lower-to-target then hands it to the sm90 family.
void buildSchedulePipeline(mlir::OpPassManager &pm, const schedule::Request &request);

} // namespace flashtile::fa3

#endif // FLASHTILE_SCHEDULES_FA3_FA3PIPELINE_H
