// RUN: flashtile-opt %s --tile-verify-program | FileCheck %s
// RUN: flashtile-opt %s --tile-verify-program | flashtile-opt --tile-verify-program | FileCheck %s

// The backward's three program kinds (passes/IR/ProgramKinds.h, docs/backward.md) with their named tensors: the
// preprocess's D = rowsum(dO∘O), the main program's walk over the Q tiles of a K/V tile, the postprocess's dQ.

// CHECK-LABEL: tile.func @attention_bwd_preprocess attributes
// CHECK-SAME: kind = "backward_preprocess"
// CHECK: %[[O:.*]] = tile.load o : tensor<?x64xbf16>
// CHECK: %[[DO:.*]] = tile.load do : tensor<?x64xbf16>
// CHECK: %[[D:.*]] = tile.row_dot %[[O]], %[[DO]] : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?xf32>
// CHECK: tile.store delta %[[D]] : tensor<?xf32>
tile.func @attention_bwd_preprocess attributes {kind = "backward_preprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "softcap", params = ["cap"]} {
  %o = tile.load o : tensor<?x64xbf16>
  %do = tile.load do : tensor<?x64xbf16>
  %d = tile.row_dot %o, %do : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?xf32>
  tile.store delta %d : tensor<?xf32>
}

// CHECK-LABEL: tile.func @attention_bwd attributes
// CHECK-SAME: kind = "backward_main"
// CHECK: %[[K:.*]] = tile.load k : tensor<?x64xbf16>
// CHECK: %[[DK0:.*]] = tile.zero_acc : !tile.acc<?x64>
// CHECK: %{{.*}}:2 = tile.q_loop iter_args(%[[DK0]], %{{.*}}) : !tile.acc<?x64>, !tile.acc<?x64> -> !tile.acc<?x64>, !tile.acc<?x64> {
// CHECK: ^bb0(%[[I:.*]]: i32, %{{.*}}: !tile.acc<?x64>, %{{.*}}: !tile.acc<?x64>):
// CHECK: tile.load q[%[[I]]] : tensor<?x64xbf16>
// CHECK: tile.load lse[%[[I]]] : tensor<?xf32>
// CHECK: tile.probs
// CHECK: tile.dot_tn
// CHECK: tile.softmax_grad
// CHECK: tile.score_grad
// CHECK: math.tanh
// CHECK: tile.accumulate dq_accum[%[[I]]], %{{.*}}, %[[K]] : tensor<?x?xf32>, tensor<?x64xbf16>
// CHECK: tile.store dk %{{.*}}#0 : !tile.acc<?x64>
// CHECK: tile.store dv %{{.*}}#1 : !tile.acc<?x64>
tile.func @attention_bwd attributes {kind = "backward_main", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "softcap", params = ["cap"]} {
  %k = tile.load k : tensor<?x64xbf16>
  %v = tile.load v : tensor<?x64xbf16>
  %dk0 = tile.zero_acc : !tile.acc<?x64>
  %dv0 = tile.zero_acc : !tile.acc<?x64>
  %dk, %dv = tile.q_loop iter_args(%dk0, %dv0) : !tile.acc<?x64>, !tile.acc<?x64> -> !tile.acc<?x64>, !tile.acc<?x64> {
  ^bb0(%i: i32, %dka: !tile.acc<?x64>, %dva: !tile.acc<?x64>):
    %q = tile.load q[%i] : tensor<?x64xbf16>
    %s = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %s1 = tile.scale %s : tensor<?x?xf32>
    %s2 = tile.score_mod %s1 : tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
      %cap = tile.param "cap"
      %x = arith.divf %score, %cap : f32
      %t = math.tanh %x : f32
      %y = arith.mulf %cap, %t : f32
      tile.yield %y : f32
    }
    %s3 = tile.mask %s2 : tensor<?x?xf32> {
    ^bb0(%b: i32, %h: i32, %qi: i32, %kv: i32):
      %true = arith.constant true
      tile.yield %true : i1
    }
    %lse = tile.load lse[%i] : tensor<?xf32>
    %p = tile.probs %s3, %lse : tensor<?x?xf32>, tensor<?xf32> -> tensor<?x?xf32>
    %do = tile.load do[%i] : tensor<?x64xbf16>
    %dva1 = tile.dot_tn %p, %do, %dva : tensor<?x?xf32>, tensor<?x64xbf16>, !tile.acc<?x64>
    %dp = tile.qk %do, %v : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %delta = tile.load delta[%i] : tensor<?xf32>
    %ds = tile.softmax_grad %p, %dp, %delta : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xf32> -> tensor<?x?xf32>
    %ds1 = tile.score_grad %ds, %s1 : tensor<?x?xf32>, tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
      %cap = tile.param "cap"
      %x = arith.divf %score, %cap : f32
      %t = math.tanh %x : f32
      %t2 = arith.mulf %t, %t : f32
      %one = arith.constant 1.0 : f32
      %d = arith.subf %one, %t2 : f32
      tile.yield %d : f32
    }
    %ds2 = tile.scale %ds1 : tensor<?x?xf32>
    %dka1 = tile.dot_tn %ds2, %q, %dka : tensor<?x?xf32>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.accumulate dq_accum[%i], %ds2, %k : tensor<?x?xf32>, tensor<?x64xbf16>
    tile.yield %dka1, %dva1 : !tile.acc<?x64>, !tile.acc<?x64>
  }
  tile.store dk %dk : !tile.acc<?x64>
  tile.store dv %dv : !tile.acc<?x64>
}

// CHECK-LABEL: tile.func @attention_bwd_postprocess attributes
// CHECK-SAME: kind = "backward_postprocess"
// CHECK: %[[ACC:.*]] = tile.load dq_accum : tensor<?x64xf32>
// CHECK: tile.store dq %[[ACC]] : tensor<?x64xf32>
tile.func @attention_bwd_postprocess attributes {kind = "backward_postprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "softcap", params = ["cap"]} {
  %dq = tile.load dq_accum : tensor<?x64xf32>
  tile.store dq %dq : tensor<?x64xf32>
}
