// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline | FileCheck %s

// Prologue: Q and the first K tile in flight together; wait for Q only.
// CHECK: tile.copy_async "q"
// CHECK: tile.copy_async "k"[%{{.*}}] if %{{.*}}
// CHECK: tile.wait_async "q" {pending = 1 : i64}
// CHECK: tile.load "q"
// Each tile: wait K(j), start V(j), S = Q·Kᵀ, ..., wait V(j), start K(j-1), P·V.
// CHECK: tile.kv_loop
// CHECK-NEXT: ^bb0(%[[J:.*]]: i32, %{{.*}}: !tile.state<128x64>):
// CHECK-NEXT: tile.wait_async "k"
// CHECK-NEXT: tile.copy_async "v"[%[[J]]]
// CHECK-NEXT: tile.load "k"[%[[J]]]
// CHECK-NEXT: tile.qk
// CHECK: tile.wait_async "v"
// CHECK: %[[NEXT:.*]] = arith.subi %[[J]], %{{.*}} : i32
// CHECK: %[[HAS:.*]] = arith.cmpi sge, %[[NEXT]]
// CHECK: tile.copy_async "k"[%[[NEXT]]] if %[[HAS]]
// CHECK-NEXT: tile.load "v"[%[[J]]]
// CHECK-NEXT: tile.pv

// RUN: flashtile-opt %s --tile-apply-schedule --tile-pipeline --verify-diagnostics
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load "q" : tensor<?x64xbf16>
  %st0 = tile.init_state : !tile.state<?x64>
  // expected-error @+1 {{'tile.kv_loop' op must be a bounded, descending segment (run tile-split-boundary first)}}
  %st = tile.kv_loop iter_args(%st0) : !tile.state<?x64> -> !tile.state<?x64> {
  ^bb0(%j: i32, %s: !tile.state<?x64>):
    tile.yield %s : !tile.state<?x64>
  }
  %o, %lse = tile.finalize %st : !tile.state<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store "o" %o : tensor<?x64xf32>
  tile.store "lse" %lse : tensor<?xf32>
}
