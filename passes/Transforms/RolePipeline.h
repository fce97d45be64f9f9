//===- RolePipeline.h - tile-role-pipeline: warp-specialized roles over a K/V ring ===//
//
// The role machinery that warp-specialized schedules share (TileRolePipeline.cpp): after tile-split-boundary, a
// producer role copies Q and each K/V tile of the walk into ring slots behind full/empty barrier pairs, and a consumer
// role of the computing warpgroups runs the program's math, optionally as persistent blocks looping over work tiles.
// A schedule configures it (fa3's forward; fa4's `roles = 0` form) by the values below; the pass names no schedule.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_ROLEPIPELINE_H
#define FLASHTILE_PASSES_TRANSFORMS_ROLEPIPELINE_H

#include "mlir/Pass/Pass.h"

#include <cstdint>
#include <memory>

namespace flashtile::tile {

/// The roles' register budgets (setmaxnreg): the producer gives registers up, the consumers take them.
struct RoleRegisters {
  int producer = 24, consumer = 240;
};

/// The default budgets for `consumers` consumer warpgroups (FA3's): the producer keeps 24 (32 beside three consumer
/// warpgroups), the consumers share the rest of the 64K registers (256, 240, 160).
inline RoleRegisters defaultRegisters(int64_t consumers) {
  return {consumers >= 3 ? 32 : 24, consumers == 1 ? 256 : consumers == 2 ? 240 : 160};
}

/// How the consumer orders its GEMMs and the block its tiles. -1 in a field: the measured default the pass documents
/// (TileRolePipeline.cpp).
struct ConsumerOrder {
  /// `overlap` runs P·V of tile j + 1 under the softmax of tile j (FA3's intra-warpgroup overlap), else each GEMM is
  /// waited on right after it is issued.
  bool overlap = true;
  /// The consumer warpgroups take turns issuing their GEMMs (tile.role's pingpong): 1 yes, 0 no, -1 with two or more
  /// consumer warpgroups at head dims up to 128 (measured on the H200: +5-8% causal, +1-3% otherwise at hd 64-128,
  /// mixed at 256).
  int pingpong = -1;
  /// A persistent kernel: about one thread block per SM, each looping over work tiles (tile.work_loop), so that the
  /// producer loads the next tile's Q and K/V while the consumers finish the current one. 1 yes, 0 no, -1 where it
  /// measured faster (TileRolePipeline.cpp, persistentByDefault).
  int persistent = -1;
  /// Persistent blocks take their tiles from a per-launch counter at run time (heaviest first) instead of the
  /// printer's fixed assignment. Implies persistent blocks; with persistent = 0 it is an error.
  bool dynamic = false;
  /// O staging (tile.store o ... through): 1 O leaves through the consumer's Q rows of shared memory (whole rows, 16
  /// bytes a store; a persistent block releases Q's slot after it, not after its last Q·Kᵀ, so the next tile's Q
  /// lands later), 0 each thread stores its accumulator fragments, -1 staged where it measured faster (a block a
  /// tile; persistent blocks above head dim 64).
  int stageO = -1;
};

/// tile-role-pipeline: a producer role copies K/V tiles into a ring of `stages` slots (the schedule's), full/empty
/// barrier pairs hand each slot to the consumer role, which runs the program's math. A budget of 0 is
/// defaultRegisters' for the schedule's consumer warpgroups.
std::unique_ptr<mlir::Pass> createTileRolePipeline(RoleRegisters registers = {0, 0}, ConsumerOrder order = {});

/// Adds tile-role-pipeline to MLIR's pass registry (flashtile-opt).
void registerTileRolePipeline();

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_TRANSFORMS_ROLEPIPELINE_H
