// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-fa2-pipeline | FileCheck %s
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=block-m=64,warps=4,stages=2" --tile-split-boundary --tile-fa2-pipeline | FileCheck %s --check-prefix=AHEAD

// stages = 1 (head dim 64's default). Prologue: Q and the first K tile in flight together; wait for Q only.
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

// stages = 2 (chosen; the default at head dims 96 and 128): two K/V buffers, Q·Kᵀ one tile ahead. Prologue: Q and K(first) land,
// V(first) and K(second) start, the first tile's scores are computed.
// AHEAD: #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, stages = 2, lptGroupBlocks = 512>
// AHEAD: tile.copy_async "q"
// AHEAD: tile.copy_async "k"[%[[FIRST:.*]]] if %[[ANY:.*]]
// AHEAD-NEXT: tile.wait_async "k"{{$}}
// AHEAD-NEXT: %[[Q:.*]] = tile.load "q"
// AHEAD-NEXT: tile.copy_async "v"[%[[FIRST]]] if %[[ANY]]
// AHEAD: tile.copy_async "k"[%{{.*}}] if
// AHEAD-NEXT: %[[K0:.*]] = tile.load "k"[%[[FIRST]]] if %[[ANY]]
// AHEAD-NEXT: %[[S0:.*]] = tile.qk %[[Q]], %[[K0]]
// Each segment carries the scores of its tile j and computes the next tile's next to the softmax; one barrier.
// AHEAD: %[[ST1:.*]], %[[S1:.*]] = tile.kv_loop from %{{.*}} to %{{.*}} iter_args(%{{.*}}, %[[S0]]) {order = "descending", segment = "tail_boundary"}
// AHEAD-NEXT: ^bb0(%[[J:.*]]: i32, %{{.*}}: !tile.state<64x64>, %[[S:.*]]: tensor<64x64xf32>):
// AHEAD-NEXT: tile.wait_async "v"{{$}}
// AHEAD-DAG: %[[NEXT:.*]] = arith.subi %[[J]], %c1
// AHEAD-DAG: %[[AFTER:.*]] = arith.subi %[[J]], %c2
// AHEAD-DAG: %[[HASNEXT:.*]] = arith.cmpi sge, %[[NEXT]]
// AHEAD-DAG: %[[HASAFTER:.*]] = arith.cmpi sge, %[[AFTER]]
// AHEAD: tile.copy_async "k"[%[[AFTER]]] if %[[HASAFTER]]
// AHEAD-NEXT: tile.copy_async "v"[%[[NEXT]]] if %[[HASNEXT]]
// AHEAD-NEXT: %[[KN:.*]] = tile.load "k"[%[[NEXT]]] if %[[HASNEXT]]
// AHEAD-NEXT: %[[SN:.*]] = tile.qk %[[Q]], %[[KN]]
// AHEAD-NEXT: tile.scale %[[S]]
// AHEAD-NEXT: tile.mask
// AHEAD: tile.softmax_update
// AHEAD-NOT: tile.wait_async
// AHEAD: tile.load "v"[%[[J]]]
// AHEAD-NEXT: tile.pv
// AHEAD-NEXT: tile.yield %{{.*}}, %[[SN]]
// AHEAD: tile.kv_loop from %{{.*}} to %{{.*}} iter_args(%[[ST1]], %[[S1]]) {order = "descending", segment = "interior"}
// AHEAD-NOT: tile.mask
// AHEAD: tile.softmax_update

// RUN: flashtile-opt %s --tile-apply-schedule --tile-fa2-pipeline --verify-diagnostics
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
