// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary | FileCheck %s

// The causal rules start at key 0, so there is no head boundary: the walk is the masked diagonal tiles
// (tail boundary), then the unmasked interior.
// CHECK: %[[MLO:.*]], %[[MHI:.*]] = tile.kv_range may
// CHECK: %[[FLO:.*]], %[[FHI:.*]] = tile.kv_range full
// CHECK: %[[SK:.*]] = tile.dim seqlen_k
// CHECK: arith.ceildivsi
// CHECK: %[[TAIL:.*]] = tile.kv_loop from %{{.*}} to %{{.*}} segment tail_boundary order descending iter_args(%{{.*}})
// CHECK:   tile.mask
// CHECK: tile.kv_loop from %{{.*}} to %{{.*}} segment interior order descending iter_args(%[[TAIL]])
// CHECK-NOT: tile.mask
// CHECK: tile.finalize
// CHECK-NOT: head_boundary

// RUN: flashtile-opt %inputs/sliding-window.mlir --tile-apply-schedule --tile-split-boundary | FileCheck %s --check-prefix=WINDOW

// A sliding window's "may" rule starts at the first row's window start, not at key 0: three segments, masked at
// both ends (the window's edges), unmasked in between; tiles outside [may lo, may hi) are never visited.
// WINDOW: %[[MLO:.*]], %[[MHI:.*]] = tile.kv_range may
// WINDOW: %[[FLO:.*]], %[[FHI:.*]] = tile.kv_range full
// WINDOW: arith.maxsi %[[MLO]]
// WINDOW: %[[TAIL:.*]] = tile.kv_loop from %{{.*}} to %{{.*}} segment tail_boundary order descending iter_args(%{{.*}})
// WINDOW:   tile.mask
// WINDOW: %[[MID:.*]] = tile.kv_loop from %{{.*}} to %{{.*}} segment interior order descending iter_args(%[[TAIL]])
// WINDOW-NOT: tile.mask
// WINDOW: tile.kv_loop from %{{.*}} to %{{.*}} segment head_boundary order descending iter_args(%[[MID]])
// WINDOW:   tile.mask
// WINDOW: tile.finalize

// RUN: flashtile-opt %s --tile-split-boundary --verify-diagnostics
// expected-error @+1 {{'tile.func' op must be scheduled before splitting boundary tiles (run tile-apply-schedule)}}
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<?x64xbf16>
  %st0 = tile.init_state : !tile.state<?x64>
  %st = tile.kv_loop iter_args(%st0) : !tile.state<?x64> -> !tile.state<?x64> {
  ^bb0(%j: i32, %s: !tile.state<?x64>):
    tile.yield %s : !tile.state<?x64>
  }
  %o, %lse = tile.finalize %st : !tile.state<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}
