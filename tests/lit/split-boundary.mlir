// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary | FileCheck %s

// The causal rules start at key 0, so there is no head boundary: the walk is the masked diagonal tiles
// (tail boundary), then the unmasked interior.
// CHECK: %[[MLO:.*]], %[[MHI:.*]] = tile.kv_range may
// CHECK: %[[FLO:.*]], %[[FHI:.*]] = tile.kv_range full
// CHECK: %[[SK:.*]] = tile.dim seqlen_k
// CHECK: arith.ceildivsi
// CHECK: %[[TAILM:[A-Za-z_0-9]+]], %[[TAILA:[A-Za-z_0-9]+]] = tile.kv_loop from %{{.*}} to %{{.*}} segment tail_boundary order descending iter_args(%{{.*}}, %{{.*}})
// CHECK:   tile.mask
// CHECK: tile.kv_loop from %{{.*}} to %{{.*}} segment interior order descending iter_args(%[[TAILM]], %[[TAILA]])
// CHECK-NOT: tile.mask
// CHECK: tile.finalize
// CHECK-NOT: head_boundary

// RUN: flashtile-opt %inputs/sliding-window.mlir --tile-apply-schedule --tile-split-boundary | FileCheck %s --check-prefix=WINDOW

// A sliding window's "may" rule starts at the first row's window start, not at key 0: three segments, masked at
// both ends (the window's edges), unmasked in between; tiles outside [may lo, may hi) are never visited.
// WINDOW: %[[MLO:.*]], %[[MHI:.*]] = tile.kv_range may
// WINDOW: %[[FLO:.*]], %[[FHI:.*]] = tile.kv_range full
// WINDOW: arith.maxsi %[[MLO]]
// WINDOW: %[[TAILM:[A-Za-z_0-9]+]], %[[TAILA:[A-Za-z_0-9]+]] = tile.kv_loop from %{{.*}} to %{{.*}} segment tail_boundary order descending iter_args(%{{.*}}, %{{.*}})
// WINDOW:   tile.mask
// WINDOW: %[[MIDM:[A-Za-z_0-9]+]], %[[MIDA:[A-Za-z_0-9]+]] = tile.kv_loop from %{{.*}} to %{{.*}} segment interior order descending iter_args(%[[TAILM]], %[[TAILA]])
// WINDOW-NOT: tile.mask
// WINDOW: tile.kv_loop from %{{.*}} to %{{.*}} segment head_boundary order descending iter_args(%[[MIDM]], %[[MIDA]])
// WINDOW:   tile.mask
// WINDOW: tile.finalize

// RUN: flashtile-opt %s --tile-split-boundary --verify-diagnostics
// expected-error @+1 {{'tile.func' op must be scheduled before splitting boundary tiles (run tile-apply-schedule)}}
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
