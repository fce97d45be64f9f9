//===- Passes.td - tile dialect passes ------------------------------------===//
#ifndef FLASHTILE_TILE_PASSES
#define FLASHTILE_TILE_PASSES

include "mlir/Pass/PassBase.td"

def TileVerifyProgram : Pass<"tile-verify-program", "::flashtile::tile::FuncOp"> {
  let summary = "Checks that a tile program has the attention-forward structure schedules rely on";
  let description = [{
    One `tile.load q`, one `tile.init_state`, K/V loops whose K/V loads index the loop's own tile, one
    `tile.finalize`, and stores of both O and LSE. Op verifiers check each op; this pass checks the whole.
  }];
}

def TileApplySchedule : Pass<"tile-apply-schedule", "::flashtile::tile::FuncOp"> {
  let summary = "Fixes tile sizes and warp layout from a schedule's configuration";
  let description = [{
    Looks the schedule up by name (fa2; fa3 and fa4 come next), validates its configuration against the
    program (head dims, dtype), attaches `#tile.schedule<...>` and replaces the `?` tile dimensions with
    blockM (query rows) and blockN (keys). Options left at 0 take the schedule's defaults for the head dim.
    A rescale threshold τ > 0 (the default) is set on every `tile.softmax_update` as `rescale_threshold`.
  }];
  let options = [
    Option<"scheduleName", "schedule", "std::string", /*default=*/"\"fa2\"", "schedule: fa2">,
    Option<"blockM", "block-m", "int64_t", /*default=*/"0", "query rows per thread block (0: default)">,
    Option<"blockN", "block-n", "int64_t", /*default=*/"0", "keys per K/V tile (0: default)">,
    Option<"warps", "warps", "int64_t", /*default=*/"0", "warps per thread block (0: default)">,
    Option<"stages", "stages", "int64_t", /*default=*/"0", "shared-memory buffers per K/V operand, 1 or 2 (0: the head dim's default)">,
    Option<"rescaleThreshold", "rescale-threshold", "int64_t", /*default=*/"-1", "0: rescale acc every tile; 1-15: only when a row max grows by more than that (log2 units) (-1: default)">,
    Option<"minBlocksPerSm", "min-blocks-per-sm", "int64_t", /*default=*/"-1", "blocks per SM the register allocation must allow (0: no request; -1: default)">,
    Option<"lptGroupBlocks", "lpt-group-blocks", "int64_t", /*default=*/"-1", "block order: 0 heaviest Q tile first within each (batch, head); N > 0 across groups of >= N blocks (-1: default)">,
    Option<"shapeClass", "shape-class", "std::string", /*default=*/"\"default\"", "the shapes the kernel is for: default (any) or short (at most 1024 query and key rows per sequence on average); a class whose defaults equal the default class's is scheduled as default">,
  ];
}

def TileSplitBoundary : Pass<"tile-split-boundary", "::flashtile::tile::FuncOp"> {
  let summary = "Splits the K/V loop into masked boundary segments and an unmasked interior";
  let description = [{
    Uses the variant's `tile.kv_range "may"` and `"full"` rules to bound the loop (tiles outside "may" are
    skipped entirely) and to find the tiles every row attends fully (no mask needed). The result is up to
    three bounded loops walked in the schedule's order: tail boundary, interior (mask removed), head boundary.
  }];
}

def TilePipeline : Pass<"tile-pipeline", "::flashtile::tile::FuncOp"> {
  let summary = "Turns K/V loads into asynchronous copies overlapped with compute";
  let description = [{
    The FA2 pipeline with two K/V buffers: Q is copied once; K tile j+1 (the next tile in walk order) is in
    flight while the softmax and P·V of tile j run, and V tile j is in flight while Q·Kᵀ of tile j runs.
    Each `tile.load` of K/V is preceded by the `tile.wait_async` that completes its copy.
  }];
}

def TileLowerToTarget : Pass<"tile-lower-to-target", "::flashtile::tile::FuncOp"> {
  let summary = "Chooses the instructions that realize each tile op on a GPU architecture";
  let description = [{
    Checks that the scheduled program fits the target (tile sizes multiple of the MMA shape, shared memory
    within the architecture's limit) and records `#tile.target<arch, isa>`; each tile op gets a `tile.inst`
    attribute naming its instruction (for sm80: mma.sync.m16n8k16, ldmatrix, cp.async.cg).
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_80\"", "sm_80, sm_90a or sm_100a">,
  ];
}

#endif // FLASHTILE_TILE_PASSES
