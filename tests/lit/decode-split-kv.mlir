// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv="kv-cache=true" | FileCheck %s

// The decode schedule: FA2's tiling defaults for decode (64 query rows, 128-key tiles), block order 0.
// CHECK: schedule = #tile.schedule<name = "decode", blockM = 32, blockN = 64, warps = 2, warpLayout = split_q, warpRows = 16, stages = 1>
// kv-cache=true: the kernel may read a KV cache, contiguous or paged (no op changes; the printer follows the kernel
// parameters).
// CHECK-SAME: tile.kv_cache
// The causal rules do not read the head: rows pack the query heads of a K/V head.
// CHECK-SAME: tile.pack_query_heads
// The "may" rule is bounded by the instance's split of the key range; the "full" rule is unchanged.
// CHECK: tile.kv_range may
// CHECK:   %[[BEGIN:.*]] = tile.dim split_begin
// CHECK:   %[[END:.*]] = tile.dim split_end
// CHECK:   %[[LO:.*]] = arith.maxsi %{{.*}}, %[[BEGIN]] : i32
// CHECK:   %[[HI:.*]] = arith.minsi %{{.*}}, %[[END]] : i32
// CHECK:   tile.yield %[[LO]], %[[HI]] : i32, i32
// CHECK: tile.kv_range full
// CHECK-NOT: split_begin
// CHECK: %[[O:.*]], %[[LSE:.*]] = tile.finalize
// O and LSE leave together, as partials of the split (or the result when unsplit).
// CHECK-NEXT: tile.store_split %[[O]], %[[LSE]] : tensor<32x64xf32>, tensor<32xf32>
// CHECK-NOT: tile.store {{o|lse}}

// The whole pipeline: the split head segment appears (the lower bound is the split's), each segment bounded.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv --tile-split-boundary --tile-pipeline-copies --tile-decode-stage-o --tile-lower-to-target | FileCheck %s --check-prefix=PIPE
// PIPE: target = #tile.target<arch = "sm_80", isa = "sm80">
// PIPE: segment tail_boundary
// PIPE: segment interior
// PIPE: segment head_boundary
// PIPE: tile.store_split

// pack-gqa=0 (the pass option pack-query-heads=false): one query head a tile.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv="pack-query-heads=false" | FileCheck %s --check-prefix=NOPACK
// NOPACK-NOT: tile.pack_query_heads

// kv-cache=false (the default, as the schedule's kv-cache knob): plain K/V only, no append kernel.
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv | FileCheck %s --check-prefix=NOCACHE
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode" --tile-decode-split-kv="kv-cache=false" | FileCheck %s --check-prefix=NOCACHE
// NOCACHE: tile.pack_query_heads
// NOCACHE-NOT: tile.kv_cache

// Knobs go through the registry: decode has no block order knob.
// RUN: not flashtile-opt %inputs/causal.mlir --tile-apply-schedule="schedule=decode options=lpt-group-blocks=4" 2>&1 | FileCheck %s --check-prefix=KNOB
// KNOB: lpt-group-blocks

// RUN: flashtile-opt %s --tile-decode-split-kv --verify-diagnostics
// expected-error @+1 {{'tile.func' op must be scheduled before splitting the key range (run tile-apply-schedule)}}
tile.func @unscheduled attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
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
