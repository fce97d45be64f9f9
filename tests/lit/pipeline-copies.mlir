// tile-pipeline-copies: the copy pipeline of the schedules whose warps all compute (fa1, fa2 and decode name it).
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies | FileCheck %s
// RUN: flashtile-opt %inputs/causal.mlir --tile-apply-schedule="options=block-m=64,warps=4,stages=2" --tile-split-boundary --tile-pipeline-copies | FileCheck %s --check-prefix=AHEAD

// stages = 1 (head dim 64's default). Buffers first: Q's one slot, one each for K and V.
// CHECK: %[[QB:.*]] = tile.buffer q : <tensor<128x64xbf16>, slots = 1>
// CHECK-NEXT: %[[KB:.*]] = tile.buffer k : <tensor<64x64xbf16>, slots = 1>
// CHECK-NEXT: %[[VB:.*]] = tile.buffer v : <tensor<64x64xbf16>, slots = 1>
// Prologue: Q and the first K tile in flight together; wait for Q's token only.
// CHECK: %[[QS:.*]] = tile.slot %[[QB]] :
// CHECK-NEXT: %[[TQ:.*]] = tile.copy_async q into %[[QS]]
// CHECK: %[[KS0:.*]] = tile.slot %[[KB]][%[[FIRST:.*]]] :
// CHECK-NEXT: %[[TK0:.*]] = tile.copy_async k[%[[FIRST]]] into %[[KS0]] if %{{.*}}
// CHECK-NEXT: tile.wait %[[TQ]]{{$}}
// CHECK-NEXT: tile.load q from %[[QS]]
// Each tile: wait K(j) (its token carried in), start V(j), S = Q·Kᵀ, ..., wait V(j), start K(j-1), P·V; K(j-1)'s
// token goes to the next iteration.
// CHECK: %{{[A-Za-z_0-9]+}}, %{{[A-Za-z_0-9]+}}, %[[TOUT:[A-Za-z_0-9]+]] = tile.kv_loop from %{{.*}} to %{{.*}} iter_args(%{{.*}}, %{{.*}}, %[[TK0]])
// CHECK-NEXT: ^bb0(%[[J:.*]]: i32, %{{.*}}: !tile.stats<128>, %{{.*}}: !tile.acc<128x64>, %[[TK:.*]]: !tile.token):
// CHECK-NEXT: tile.wait %[[TK]]{{$}}
// CHECK-NEXT: %[[VS:.*]] = tile.slot %[[VB]][%[[J]]]
// CHECK-NEXT: %[[TV:.*]] = tile.copy_async v[%[[J]]] into %[[VS]] :
// CHECK-NEXT: %[[KS:.*]] = tile.slot %[[KB]][%[[J]]]
// CHECK-NEXT: tile.load k[%[[J]]] from %[[KS]]
// CHECK-NEXT: tile.qk
// CHECK: tile.wait %[[TV]]{{$}}
// CHECK: %[[NEXT:.*]] = arith.subi %[[J]], %{{.*}} : i32
// CHECK: %[[HAS:.*]] = arith.cmpi sge, %[[NEXT]]
// CHECK-NEXT: %[[KSN:.*]] = tile.slot %[[KB]][%[[NEXT]]]
// CHECK-NEXT: %[[TKN:.*]] = tile.copy_async k[%[[NEXT]]] into %[[KSN]] if %[[HAS]]
// CHECK-NEXT: tile.load v[%[[J]]] from %[[VS]]
// CHECK-NEXT: tile.pv
// CHECK-NEXT: tile.yield %{{.*}}, %{{.*}}, %[[TKN]] : !tile.stats<128>, !tile.acc<128x64>, !tile.token
// The next segment takes the token out of the first.
// CHECK: tile.kv_loop from %{{.*}} to %{{.*}} iter_args(%{{.*}}, %{{.*}}, %[[TOUT]])
// O staging, the schedule's decision: Q's tile is dead after the walk, so O leaves through Q's slot.
// CHECK: tile.store o %{{.*}} through %[[QS]] : tensor<128x64xf32>, !tile.slot<tensor<128x64xbf16>>
// CHECK-NEXT: tile.store lse %{{.*}} : tensor<128xf32>

// stages = 2 (chosen; the default at head dims 96 and 128): two K/V slots, Q·Kᵀ one tile ahead. Prologue: Q and
// K(first) land (one wait names both tokens), V(first) and K(second) start, the first tile's scores are computed.
// AHEAD: #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 2, lptGroupBlocks = 512>
// AHEAD: %[[QB:.*]] = tile.buffer q : <tensor<64x64xbf16>, slots = 1>
// AHEAD-NEXT: %[[KB:.*]] = tile.buffer k : <tensor<64x64xbf16>, slots = 2>
// AHEAD-NEXT: %[[VB:.*]] = tile.buffer v : <tensor<64x64xbf16>, slots = 2>
// AHEAD: %[[TQ:.*]] = tile.copy_async q
// AHEAD: %[[KS0:.*]] = tile.slot %[[KB]][%[[FIRST:.*]]]
// AHEAD-NEXT: %[[TK0:.*]] = tile.copy_async k[%[[FIRST]]] into %[[KS0]] if %[[ANY:.*]] :
// AHEAD-NEXT: tile.wait %[[TQ]], %[[TK0]]{{$}}
// AHEAD-NEXT: %[[Q:.*]] = tile.load q
// AHEAD-NEXT: tile.slot %[[VB]][%[[FIRST]]]
// AHEAD-NEXT: %[[TV0:.*]] = tile.copy_async v[%[[FIRST]]] into %{{.*}} if %[[ANY]]
// AHEAD: %[[TK1:.*]] = tile.copy_async k[%{{.*}}] into %{{.*}} if
// AHEAD-NEXT: %[[K0:.*]] = tile.load k[%[[FIRST]]] from %[[KS0]] : !tile.slot<tensor<64x64xbf16>> if %[[ANY]]
// AHEAD-NEXT: %[[S0:.*]] = tile.qk %[[Q]], %[[K0]]
// Each segment carries the scores of its tile j and the tokens of V(j) and K(next), and computes the next tile's
// scores next to the softmax; one wait per tile.
// AHEAD: %[[M1:[A-Za-z_0-9]+]], %[[A1:[A-Za-z_0-9]+]], %[[C1:.*]]:3 = tile.kv_loop from %{{.*}} to %{{.*}} segment tail_boundary order descending iter_args(%{{.*}}, %{{.*}}, %[[S0]], %[[TV0]], %[[TK1]])
// AHEAD-NEXT: ^bb0(%[[J:.*]]: i32, %{{.*}}: !tile.stats<64>, %{{.*}}: !tile.acc<64x64>, %[[S:.*]]: tensor<64x64xf32>, %[[TV:.*]]: !tile.token, %[[TKN:.*]]: !tile.token):
// AHEAD-NEXT: tile.wait %[[TV]], %[[TKN]]{{$}}
// AHEAD-DAG: %[[NEXT:.*]] = arith.subi %[[J]], %c1
// AHEAD-DAG: %[[AFTER:.*]] = arith.subi %[[J]], %c2
// AHEAD-DAG: %[[HASNEXT:.*]] = arith.cmpi sge, %[[NEXT]]
// AHEAD-DAG: %[[HASAFTER:.*]] = arith.cmpi sge, %[[AFTER]]
// AHEAD: %[[TKA:.*]] = tile.copy_async k[%[[AFTER]]] into %{{.*}} if %[[HASAFTER]]
// AHEAD-NEXT: tile.slot %[[VB]][%[[NEXT]]]
// AHEAD-NEXT: %[[TVN:.*]] = tile.copy_async v[%[[NEXT]]] into %{{.*}} if %[[HASNEXT]]
// AHEAD-NEXT: %[[KSN:.*]] = tile.slot %[[KB]][%[[NEXT]]]
// AHEAD-NEXT: %[[KN:.*]] = tile.load k[%[[NEXT]]] from %[[KSN]] : !tile.slot<tensor<64x64xbf16>> if %[[HASNEXT]]
// AHEAD-NEXT: %[[SN:.*]] = tile.qk %[[Q]], %[[KN]]
// AHEAD-NEXT: tile.scale %[[S]]
// AHEAD-NEXT: tile.mask
// AHEAD: tile.softmax_update
// AHEAD-NOT: tile.wait
// AHEAD: tile.load v[%[[J]]] from
// AHEAD-NEXT: tile.pv
// AHEAD-NEXT: tile.yield %{{.*}}, %{{.*}}, %[[SN]], %[[TVN]], %[[TKA]]
// AHEAD: tile.kv_loop from %{{.*}} to %{{.*}} segment interior order descending iter_args(%[[M1]], %[[A1]], %[[C1]]#0, %[[C1]]#1, %[[C1]]#2)
// AHEAD-NOT: tile.mask
// AHEAD: tile.softmax_update

// RUN: flashtile-opt %s --split-input-file --tile-apply-schedule --tile-pipeline-copies --verify-diagnostics
tile.func @f attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %q = tile.load q : tensor<?x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  // expected-error @+1 {{'tile.kv_loop' op must be a bounded, descending segment (run tile-split-boundary first)}}
  %st_m, %st_acc = tile.kv_loop iter_args(%st0_m, %st0_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<?>, %s_acc: !tile.acc<?x64>):
    tile.yield %s_m, %s_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// -----

// A program that is already pipelined is refused.
tile.func @twice attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @-1 {{'tile.func' op is already pipelined}}
  %kb = tile.buffer k : <tensor<64x64xbf16>, slots = 1>
  %q = tile.load q : tensor<?x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %o, %lse = tile.finalize %st0_m, %st0_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// -----

// Without a K/V loop there is nothing to pipeline.
tile.func @noloop attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  // expected-error @-1 {{'tile.func' op needs one Q load and at least one K/V loop at top level}}
  %q = tile.load q : tensor<?x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %o, %lse = tile.finalize %st0_m, %st0_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}
