// RUN: flashtile-opt %s --split-input-file --tile-pipeline-q-loop --verify-diagnostics | FileCheck %s

// Two Q-tile buffers (stages = 2): the loop is marked tile.q_buffers = 2, and its GEMMs whose rows are keys
// (tile.dot_tn) move down to its tile.accumulate, after dS, so that P and dS are staged behind one barrier.
// CHECK-LABEL: tile.func @attention_bwd
// CHECK: tile.q_loop from %{{.*}} to %{{.*}} segment interior iter_args(%{{.*}}, %{{.*}}) {tile.q_buffers = 2 : i32}
// CHECK: %[[P:.*]] = tile.probs
// CHECK-NOT: tile.dot_tn
// CHECK: tile.softmax_grad
// CHECK: %[[DS:.*]] = tile.scale
// CHECK-NEXT: %[[DV:.*]] = tile.dot_tn %[[P]], %{{.*}}, %{{.*}}
// CHECK-NEXT: %[[DK:.*]] = tile.dot_tn %[[DS]], %{{.*}}, %{{.*}}
// CHECK-NEXT: tile.accumulate dq_accum[%{{.*}}], %[[DS]]
// CHECK-NEXT: tile.yield %[[DK]], %[[DV]]
tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 2>} {
  %lo = arith.constant 0 : i32
  %hi = arith.constant 4 : i32
  %k = tile.load k : tensor<64x64xbf16>
  %v = tile.load v : tensor<64x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<64x64>
  %dv0 = tile.zero_acc : !tile.acc<64x64>
  %dk, %dv = tile.q_loop from %lo to %hi segment interior iter_args(%dk0, %dv0) : !tile.acc<64x64>, !tile.acc<64x64> -> !tile.acc<64x64>, !tile.acc<64x64> {
  ^bb0(%i: i32, %dka: !tile.acc<64x64>, %dva: !tile.acc<64x64>):
    %q = tile.load q[%i] : tensor<64x64xbf16>
    %s = tile.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %s1 = tile.scale %s : tensor<64x64xf32>
    %lse = tile.load lse[%i] : tensor<64xf32>
    %p = tile.probs %s1, %lse : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
    %do = tile.load do[%i] : tensor<64x64xbf16>
    %dva1 = tile.dot_tn %p, %do, %dva : tensor<64x64xf32>, tensor<64x64xbf16>, !tile.acc<64x64>
    %dp = tile.qk %do, %v : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %delta = tile.load delta[%i] : tensor<64xf32>
    %ds = tile.softmax_grad %p, %dp, %delta : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
    %ds1 = tile.scale %ds : tensor<64x64xf32>
    %dka1 = tile.dot_tn %ds1, %q, %dka : tensor<64x64xf32>, tensor<64x64xbf16>, !tile.acc<64x64>
    tile.accumulate dq_accum[%i], %ds1, %k : tensor<64x64xf32>, tensor<64x64xbf16>
    tile.yield %dka1, %dva1 : !tile.acc<64x64>, !tile.acc<64x64>
  }
  tile.store dk %dk : !tile.acc<64x64>
  tile.store dv %dv : !tile.acc<64x64>
}

// -----

// One buffer (stages = 1): the GEMMs move, the loop is not marked.
// CHECK-LABEL: tile.func @attention_bwd
// CHECK-NOT: tile.q_buffers
// CHECK: tile.softmax_grad
// CHECK: tile.dot_tn
// CHECK-NEXT: tile.dot_tn
// CHECK-NEXT: tile.accumulate
tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>} {
  %lo = arith.constant 0 : i32
  %hi = arith.constant 4 : i32
  %k = tile.load k : tensor<64x64xbf16>
  %v = tile.load v : tensor<64x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<64x64>
  %dv0 = tile.zero_acc : !tile.acc<64x64>
  %dk, %dv = tile.q_loop from %lo to %hi segment interior iter_args(%dk0, %dv0) : !tile.acc<64x64>, !tile.acc<64x64> -> !tile.acc<64x64>, !tile.acc<64x64> {
  ^bb0(%i: i32, %dka: !tile.acc<64x64>, %dva: !tile.acc<64x64>):
    %q = tile.load q[%i] : tensor<64x64xbf16>
    %s = tile.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %lse = tile.load lse[%i] : tensor<64xf32>
    %p = tile.probs %s, %lse : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
    %do = tile.load do[%i] : tensor<64x64xbf16>
    %dva1 = tile.dot_tn %p, %do, %dva : tensor<64x64xf32>, tensor<64x64xbf16>, !tile.acc<64x64>
    %dp = tile.qk %do, %v : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %delta = tile.load delta[%i] : tensor<64xf32>
    %ds = tile.softmax_grad %p, %dp, %delta : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
    %dka1 = tile.dot_tn %ds, %q, %dka : tensor<64x64xf32>, tensor<64x64xbf16>, !tile.acc<64x64>
    tile.accumulate dq_accum[%i], %ds, %k : tensor<64x64xf32>, tensor<64x64xbf16>
    tile.yield %dka1, %dva1 : !tile.acc<64x64>, !tile.acc<64x64>
  }
  tile.store dk %dk : !tile.acc<64x64>
  tile.store dv %dv : !tile.acc<64x64>
}

// -----

tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 2>} {
  %k = tile.load k : tensor<64x64xbf16>
  %v = tile.load v : tensor<64x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<64x64>
  %dv0 = tile.zero_acc : !tile.acc<64x64>
  // expected-error @+1 {{'tile.q_loop' op is not bounded; run tile-bound-q-loop before tile-pipeline-q-loop}}
  %dk, %dv = tile.q_loop iter_args(%dk0, %dv0) : !tile.acc<64x64>, !tile.acc<64x64> -> !tile.acc<64x64>, !tile.acc<64x64> {
  ^bb0(%i: i32, %dka: !tile.acc<64x64>, %dva: !tile.acc<64x64>):
    tile.yield %dka, %dva : !tile.acc<64x64>, !tile.acc<64x64>
  }
  tile.store dk %dk : !tile.acc<64x64>
  tile.store dv %dv : !tile.acc<64x64>
}

// -----

tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 2>} {
  %lo = arith.constant 0 : i32
  %hi = arith.constant 4 : i32
  %c0 = arith.constant 0 : i32
  %k = tile.load k : tensor<64x64xbf16>
  %v = tile.load v : tensor<64x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<64x64>
  %dv0 = tile.zero_acc : !tile.acc<64x64>
  %dk, %dv = tile.q_loop from %lo to %hi segment interior iter_args(%dk0, %dv0) : !tile.acc<64x64>, !tile.acc<64x64> -> !tile.acc<64x64>, !tile.acc<64x64> {
  ^bb0(%i: i32, %dka: !tile.acc<64x64>, %dva: !tile.acc<64x64>):
    // expected-error @+1 {{'tile.load' op does not load the loop's own Q tile: it cannot be copied one tile ahead}}
    %q = tile.load q[%c0] : tensor<64x64xbf16>
    tile.yield %dka, %dva : !tile.acc<64x64>, !tile.acc<64x64>
  }
  tile.store dk %dk : !tile.acc<64x64>
  tile.store dv %dv : !tile.acc<64x64>
}

// -----

// expected-error @+1 {{'tile.func' op must be scheduled before its Q-tile loops are pipelined (run tile-apply-schedule)}}
tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %k = tile.load k : tensor<?x64xbf16>
  %v = tile.load v : tensor<?x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<?x64>
  %dv0 = tile.zero_acc : !tile.acc<?x64>
  %dk, %dv = tile.q_loop iter_args(%dk0, %dv0) : !tile.acc<?x64>, !tile.acc<?x64> -> !tile.acc<?x64>, !tile.acc<?x64> {
  ^bb0(%i: i32, %dka: !tile.acc<?x64>, %dva: !tile.acc<?x64>):
    tile.yield %dka, %dva : !tile.acc<?x64>, !tile.acc<?x64>
  }
  tile.store dk %dk : !tile.acc<?x64>
  tile.store dv %dv : !tile.acc<?x64>
}

// -----
// RUN: flashtile-opt %s --split-input-file --tile-pipeline-q-loop --verify-diagnostics | FileCheck %s

// tile.early_dv: dV's tile.dot_tn (A = P) stays after tile.probs, before dP's tile.qk, marked tile.issue_early; dK's
// moves down to the tile.accumulate as before.
// CHECK-LABEL: tile.func @attention_bwd
// CHECK: %[[P:.*]] = tile.probs
// CHECK-NEXT: tile.load do
// CHECK-NEXT: %[[DV:.*]] = tile.dot_tn %[[P]], %{{.*}}, %{{.*}} {tile.issue_early}
// CHECK-NEXT: tile.qk
// CHECK: %[[DS:.*]] = tile.scale
// CHECK-NEXT: %[[DK:.*]] = tile.dot_tn %[[DS]], %{{.*}}, %{{.*}} :
// CHECK-NEXT: tile.accumulate dq_accum[%{{.*}}], %[[DS]]
// CHECK-NEXT: tile.yield %[[DK]], %[[DV]]
tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], tile.early_dv, schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 2>} {
  %lo = arith.constant 0 : i32
  %hi = arith.constant 4 : i32
  %k = tile.load k : tensor<64x64xbf16>
  %v = tile.load v : tensor<64x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<64x64>
  %dv0 = tile.zero_acc : !tile.acc<64x64>
  %dk, %dv = tile.q_loop from %lo to %hi segment interior iter_args(%dk0, %dv0) : !tile.acc<64x64>, !tile.acc<64x64> -> !tile.acc<64x64>, !tile.acc<64x64> {
  ^bb0(%i: i32, %dka: !tile.acc<64x64>, %dva: !tile.acc<64x64>):
    %q = tile.load q[%i] : tensor<64x64xbf16>
    %s = tile.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %s1 = tile.scale %s : tensor<64x64xf32>
    %lse = tile.load lse[%i] : tensor<64xf32>
    %p = tile.probs %s1, %lse : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
    %do = tile.load do[%i] : tensor<64x64xbf16>
    %dva1 = tile.dot_tn %p, %do, %dva : tensor<64x64xf32>, tensor<64x64xbf16>, !tile.acc<64x64>
    %dp = tile.qk %do, %v : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %delta = tile.load delta[%i] : tensor<64xf32>
    %ds = tile.softmax_grad %p, %dp, %delta : tensor<64x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
    %ds1 = tile.scale %ds : tensor<64x64xf32>
    %dka1 = tile.dot_tn %ds1, %q, %dka : tensor<64x64xf32>, tensor<64x64xbf16>, !tile.acc<64x64>
    tile.accumulate dq_accum[%i], %ds1, %k : tensor<64x64xf32>, tensor<64x64xbf16>
    tile.yield %dka1, %dva1 : !tile.acc<64x64>, !tile.acc<64x64>
  }
  tile.store dk %dk : !tile.acc<64x64>
  tile.store dv %dv : !tile.acc<64x64>
}
