//===- Passes.td - tile dialect passes ------------------------------------===//
#ifndef FLASHTILE_TILE_PASSES
#define FLASHTILE_TILE_PASSES

include "mlir/Pass/PassBase.td"

def TileVerifyProgram : Pass<"tile-verify-program", "::flashtile::tile::FuncOp"> {
  let summary = "Checks that a tile program has the structure its kind declares";
  let description = [{
    Runs the verifier of the program's kind (passes/IR/ProgramKinds.h). A forward program: one `tile.load q`,
    one `tile.init_state`, K/V loops whose K/V loads index the loop's own tile, one `tile.finalize`, and stores
    of both O and LSE. Op verifiers check each op; this pass checks the whole.
  }];
}

def TileApplySchedule : Pass<"tile-apply-schedule", "::flashtile::tile::FuncOp"> {
  let summary = "Fixes tile sizes, warps and policies from a schedule's configuration";
  let description = [{
    Looks the schedule up by name in the schedule registry (passes/Transforms/ScheduleRegistry.h; each
    `schedules/<name>/` registers one), which configures the program: its defaults for the head dims, the
    program's traits and the shape class, overridden by `options` (`name=value` items, checked against the
    schedule's option list) and validated. The result is attached as `#tile.schedule<...>`; the `?` tile
    dimensions become blockM (query rows) and blockN (keys), and a rescale threshold τ > 0 is set on every
    `tile.softmax_update` as `rescale_threshold`.
  }];
  let options = [
    Option<"scheduleName", "schedule", "std::string", /*default=*/"", "the name of a registered schedule (schedules/Registry.cpp registers the built-in ones); unset: the default request's (schedule::Request, ScheduleRegistry.h)">,
    ListOption<"knobs", "options", "std::string", "the schedule's knobs as name=value items, e.g. options=block-m=64,warps=4 (unset knobs take the schedule's defaults)">,
    Option<"shapeClass", "shape-class", "std::string", /*default=*/"\"default\"", "the shapes the kernel is for: default (any) or short (at most 1024 query and key rows per sequence on average); a class whose configuration equals the default class's is scheduled as default">,
  ];
}

def TileOffsetPositions : Pass<"tile-offset-positions", "::flashtile::tile::FuncOp"> {
  let summary = "Makes the variant's hooks see a larger problem's positions (a block of a split sequence)";
  let description = [{
    For kernels compiled with position offsets (KernelSpec::positions; passes/IR/TilePositions.h). Inside every
    hook region (score_mod, mask, kv_range, the sink, and the backward's score_grad, input_grad, sink_grad) the
    query row gets `tile.dim q_offset` added, the key `k_offset`, the query head `head_offset`; the sizes the hooks
    read become `seqlen_q_global`, `seqlen_k_global`, `heads_q_global`, `heads_kv_global`, `key_offset_global`; a
    `tile.kv_range` rule is given its rows plus q_offset and its keys are returned minus k_offset, so that the
    walk, which clamps them to [0, seqlen_k), skips the block's K/V tiles that the rule excludes. Marks the
    tile.func `tile.position_offsets`. Runs on the unscheduled program.
  }];
}

def TileSplitBoundary : Pass<"tile-split-boundary", "::flashtile::tile::FuncOp"> {
  let summary = "Splits the K/V loop into masked boundary segments and an unmasked interior";
  let description = [{
    Uses the variant's `tile.kv_range may` and `full` rules to bound the loop (tiles outside the may range are
    skipped entirely) and to find the tiles every row attends fully (no mask needed). The result is up to
    three bounded loops walked in the schedule's order: tail boundary, interior (mask removed), head boundary.
  }];
}

def TileBoundQLoop : Pass<"tile-bound-q-loop", "::flashtile::tile::FuncOp"> {
  let summary = "Bounds a backward_main program's Q-tile loop by the inverse of the KV-range rules, in segments";
  let description = [{
    The backward's converse of tile-split-boundary, on a scheduled backward_main program: the instance's K/V tile
    (`tile.dim kv_tile`, blockN keys) is seen by the Q tiles the inverted `tile.kv_range may` rule gives
    (passes/Transforms/InvertKvRange.h: exact for causal in both alignments and windows, conservative otherwise), and
    the inverted `full` rule gives those whose every row sees every key of it. The loop becomes three bounded ones,
    ascending: head boundary, interior (mask removed), tail boundary; a K/V tile that runs past the sequence keeps its
    mask everywhere. Other programs are left alone.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def TilePipelineQLoop : Pass<"tile-pipeline-q-loop", "::flashtile::tile::FuncOp"> {
  let summary = "Orders a backward Q-tile loop's GEMMs for one staging barrier and marks its loads for copies ahead";
  let description = [{
    On a scheduled backward_main program whose Q-tile loops are bounded (after tile-bound-q-loop), in each loop:
    - the GEMMs whose rows are keys (`tile.dot_tn`: dV += Pᵀ·dO, dK += dSᵀ·Q) move down to the loop's first
      `tile.accumulate` (dQ += dS·K), so every score-layout tile those GEMMs read through shared memory (P and dS)
      is complete before the first of them, and the printer stages them all behind one barrier;
    - with two buffers (#tile.schedule's `stages` = 2) the loop gets the discardable attribute
      `tile.q_buffers = 2 : i32`: its loads (q[i], do[i], lse[i], delta[i]), which all index the loop's own tile,
      are copied into one of two shared-memory buffers, tile i + 1's while tile i computes. The printer obeys it
      (codegen/common/BackwardEmitter.cpp); without it every tile's loads are copied and waited for at its top.
    Other programs are left alone.
  }];
}

def TilePipelineCopies : Pass<"tile-pipeline-copies", "::flashtile::tile::FuncOp"> {
  let summary = "Reads K/V tiles from shared-memory slots that asynchronous copies fill while the warps compute";
  let description = [{
    FlashAttention-2's software pipeline, on a scheduled program whose K/V loop segments are bounded and walked
    descending (after tile-split-boundary): the buffers become values (`tile.buffer`: one slot for Q, `stages` for
    K and V, #tile.schedule's), every tile is copied into its slot by a `tile.copy_async` that returns a token, each
    `tile.wait` names the tokens it needs, and the loops carry the tokens of copies started for the next iteration.
    With one slot per operand, V(j) is copied during Q·K(j)ᵀ and K(next) during P·V(j); with two, Q·Kᵀ also runs one
    tile ahead (the loops carry the next tile's scores). O leaves through Q's slot, dead after the walk
    (`tile.store o ... through`), unless O's rows are wider than Q's.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def TileLowerToTarget : Pass<"tile-lower-to-target", "::flashtile::tile::FuncOp"> {
  let summary = "Chooses the instructions that realize each tile op on a GPU architecture";
  let description = [{
    Resolves the arch name (sm_80/86/87/89 run sm_80 kernels, sm_90 is sm_90a, sm_100 is sm_100a), asks the
    program's schedule which instruction family lowers it there and that family (the target registry,
    codegen/common/TargetRegistry.h) whether the scheduled tiles fit (MMA shape, shared memory within the
    architecture's limit), and records `#tile.target<arch, isa>`.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"", "an architecture name users may write (kArchAliases, runtime/ArchNames.h); unset: the default request's (schedule::Request, ScheduleRegistry.h)">,
  ];
}

def TileTestDifferentiateScore : Pass<"tile-test-differentiate-score", "::flashtile::tile::FuncOp"> {
  let summary = "Replaces each score hook (and sink) by its derivative, to test the backward's chain rule";
  let description = [{
    Each `tile.score_mod` region is rebuilt to yield the derivative of its result that `wrt` names, computed
    by passes/Transforms/DifferentiateScore.h (the IR the backward programs embed): `score` (d s' / d score),
    `input:NAME` (the sum of the partials of the f32 input's reads) or `param:NAME`. With `input:` or `param:`,
    a `tile.finalize` sink region is rebuilt the same way. The result is again a valid program: the interpreter
    runs it. A hook op without a derivative rule is an error naming it.
  }];
  let options = [
    Option<"wrt", "wrt", "std::string", /*default=*/"\"score\"", "score, input:NAME or param:NAME">,
  ];
}

#endif // FLASHTILE_TILE_PASSES
