// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule | FileCheck %s --check-prefix=DEFAULT
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=block-m=64,block-n=32,warps=4" | FileCheck %s --check-prefix=CUSTOM
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=block-m=64,block-n=32,warps=4,stages=2" | FileCheck %s --check-prefix=STAGES2
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=rescale-threshold=8" | FileCheck %s --check-prefix=LAZY
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=rescale-threshold=16" 2>&1 | FileCheck %s --check-prefix=BADRESCALE

// Defaults for head dim 64: 128 query rows, 64-key tiles, 4 warps (32 rows each), one K and one V buffer, and
// FA2's rescale policy (every tile; the default value 0 is not printed, and the softmax step has no threshold).
// DEFAULT: tile.func @attention attributes {{.*}}schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32, stages = 1, lptGroupBlocks = 512>
// DEFAULT: tile.load q : tensor<128x64xbf16>
// DEFAULT: tile.init_state : !tile.stats<128>, !tile.acc<128x64>
// DEFAULT: tile.load k[%{{.*}}] : tensor<64x64xbf16>
// DEFAULT: tile.qk {{.*}} -> tensor<128x64xf32>
// DEFAULT-NOT: rescale_threshold
// DEFAULT: tile.softmax_update {{.*}} -> tensor<128x64xbf16>, tensor<128xf32>
// DEFAULT: tile.finalize {{.*}} -> tensor<128x64xf32>, tensor<128xf32>

// Knobs not given keep the head dim's default (stages = 1 at head dim 64); stages = 2: two K/V buffers.
// CUSTOM: schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 32, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1, lptGroupBlocks = 512>
// STAGES2: schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 32, warps = 4, warpLayout = split_q, warpRows = 16, stages = 2, lptGroupBlocks = 512>

// rescale-threshold = 8: FA4's conditional rescaling, on the schedule and on every softmax step.
// LAZY: schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32, stages = 1, rescaleThreshold = 8, lptGroupBlocks = 512>
// LAZY: tile.softmax_update {{.*}} {rescale_threshold = 8 : i64} : tensor<128x64xf32>
// BADRESCALE: fa2: rescale-threshold = 16 is out of range; accepted: 0 to 15 (0: rescale acc every tile; N: only when a row max grows by more than N (log2))
// CUSTOM: tile.load q : tensor<64x64xbf16>
// CUSTOM: tile.load k[%{{.*}}] : tensor<32x64xbf16>
// CUSTOM: tile.qk {{.*}} -> tensor<64x32xf32>

// Knobs are checked by the schedule registry (names, ranges, repeats) and by the schedule (combinations); what
// depends on the instructions (16-row MMA tiles per warp) is the target's check, in tile-lower-to-target.
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=blok-m=64" 2>&1 | FileCheck %s --check-prefix=TYPO
// TYPO: 'tile.func' op fa2: unknown option 'blok-m' (did you mean 'block-m'?); accepted: block-m, block-n, warps, stages, rescale-threshold, min-blocks-per-sm, lpt-group-blocks
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=block-m=64,block-m=128" 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: 'tile.func' op fa2: option 'block-m' is given twice
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=block-m=16777216" 2>&1 | FileCheck %s --check-prefix=HUGE
// HUGE: 'tile.func' op fa2: block-m = 16777216 is out of range; accepted: 16 to 256 (query rows per thread block)
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=warps=x" 2>&1 | FileCheck %s --check-prefix=NOTINT
// NOTINT: 'tile.func' op fa2: option 'warps=x' is not of the form name=integer
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=block-m=96,warps=4" --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target 2>&1 | FileCheck %s --check-prefix=MMA
// MMA: 'tile.func' op sm80: block-m (96) must give every one of the 4 warps a multiple of 16 rows

// RUN: flashtile-opt %s --tile-apply-schedule="options=block-m=100,warps=8" --verify-diagnostics
// expected-error @+1 {{'tile.func' op fa2: block-m = 100 is not supported; accepted: a multiple of warps (8) up to 256: every warp owns block-m / warps query rows}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<?x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%st0_m, %st0_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<?>, %s_acc: !tile.acc<?x64>):
    tile.yield %s_m, %s_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}
