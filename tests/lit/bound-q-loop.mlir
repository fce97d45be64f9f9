// RUN: flashtile-opt %s --split-input-file --tile-bound-q-loop --verify-diagnostics | FileCheck %s

// A scheduled backward_main program of a causal variant: its K/V tile (tile.dim kv_tile, 64 keys) is seen by the Q
// tiles of the inverted KV-range rules; the walk is three ascending segments, the interior one without its mask, and
// the rules are consumed.
// CHECK-LABEL: tile.func @attention_bwd
// CHECK-NOT: tile.full_walk
// CHECK-NOT: tile.kv_range
// CHECK-DAG: tile.dim kv_tile
// CHECK-DAG: tile.dim batch_index
// CHECK-DAG: tile.dim head_index
// CHECK: tile.q_loop from %{{.*}} to %{{.*}} segment head_boundary iter_args
// CHECK: tile.mask
// CHECK: tile.q_loop from %{{.*}} to %{{.*}} segment interior iter_args
// CHECK-NOT: tile.mask
// CHECK: tile.q_loop from %{{.*}} to %{{.*}} segment tail_boundary iter_args
// CHECK: tile.mask
// CHECK: tile.store dk
tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "causal", params = [], schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>} {
  %lo, %hi = tile.kv_range may {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %sk = tile.dim seqlen_k
    %sq = tile.dim seqlen_q
    %a = arith.addi %last, %sk : i32
    %e = arith.subi %a, %sq : i32
    %e1 = arith.addi %e, %c1 : i32
    %end = arith.minsi %sk, %e1 : i32
    tile.yield %c0, %end : i32, i32
  }
  %flo, %fhi = tile.kv_range full {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %sk = tile.dim seqlen_k
    %sq = tile.dim seqlen_q
    %a = arith.addi %first, %sk : i32
    %e = arith.subi %a, %sq : i32
    %e1 = arith.addi %e, %c1 : i32
    %end = arith.minsi %sk, %e1 : i32
    tile.yield %c0, %end : i32, i32
  }
  %k = tile.load k : tensor<64x64xbf16>
  %v = tile.load v : tensor<64x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<64x64>
  %dv0 = tile.zero_acc : !tile.acc<64x64>
  %dk, %dv = tile.q_loop iter_args(%dk0, %dv0) : !tile.acc<64x64>, !tile.acc<64x64> -> !tile.acc<64x64>, !tile.acc<64x64> {
  ^bb0(%i: i32, %dka: !tile.acc<64x64>, %dva: !tile.acc<64x64>):
    %q = tile.load q[%i] : tensor<64x64xbf16>
    %s = tile.qk %q, %k : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %s1 = tile.scale %s : tensor<64x64xf32>
    %s2 = tile.mask %s1 : tensor<64x64xf32> {
    ^bb0(%b: i32, %h: i32, %qi: i32, %kv: i32):
      %sk = tile.dim seqlen_k
      %sq = tile.dim seqlen_q
      %a = arith.addi %qi, %sk : i32
      %e = arith.subi %a, %sq : i32
      %keep = arith.cmpi sle, %kv, %e : i32
      tile.yield %keep : i1
    }
    %lse = tile.load lse[%i] : tensor<64xf32>
    %p = tile.probs %s2, %lse : tensor<64x64xf32>, tensor<64xf32> -> tensor<64x64xf32>
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

// expected-error @+1 {{'tile.func' op must be scheduled before its Q-tile loop is bounded (run tile-apply-schedule)}}
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

// A program of another kind is left alone.
// CHECK-LABEL: tile.func @attention_bwd_postprocess
// CHECK: tile.store dq
tile.func @attention_bwd_postprocess attributes {kind = "backward_postprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = []} {
  %dq = tile.load dq_accum : tensor<?x64xf32>
  tile.store dq %dq : tensor<?x64xf32>
}

// -----

// A variant whose `may` rule is every key for every row (non-causal): every instance walks every Q tile, and the
// program says so (tile.full_walk; deterministic mode's rotated walk reads it).
// CHECK-LABEL: tile.func @attention_bwd_full
// CHECK-SAME: tile.full_walk
// CHECK-NOT: tile.kv_range
// CHECK: tile.q_loop from %{{.*}} to %{{.*}} segment interior iter_args
tile.func @attention_bwd_full attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [], schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1>} {
  %lo, %hi = tile.kv_range may {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    %c0 = arith.constant 0 : i32
    %sk = tile.dim seqlen_k
    tile.yield %c0, %sk : i32, i32
  }
  %flo, %fhi = tile.kv_range full {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    %c0 = arith.constant 0 : i32
    %sk = tile.dim seqlen_k
    tile.yield %c0, %sk : i32, i32
  }
  %k = tile.load k : tensor<64x64xbf16>
  %v = tile.load v : tensor<64x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<64x64>
  %dv0 = tile.zero_acc : !tile.acc<64x64>
  %dk, %dv = tile.q_loop iter_args(%dk0, %dv0) : !tile.acc<64x64>, !tile.acc<64x64> -> !tile.acc<64x64>, !tile.acc<64x64> {
  ^bb0(%i: i32, %dka: !tile.acc<64x64>, %dva: !tile.acc<64x64>):
    tile.yield %dka, %dva : !tile.acc<64x64>, !tile.acc<64x64>
  }
  tile.store dk %dk : !tile.acc<64x64>
  tile.store dv %dv : !tile.acc<64x64>
}
