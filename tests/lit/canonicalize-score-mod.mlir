// RUN: flashtile-opt %s --split-input-file --canonicalize | FileCheck %s

// An additive score modifier (score - slope·|distance|, ALiBi) moves before the scale: scale·s + g =
// scale·(s + g/scale), with 1/scale on the slope (the same for every score of a block). The scale then folds
// into the softmax's exp2 multiplier.
// CHECK-LABEL: variant = "alibi"
// CHECK: tile.qk
// CHECK-NOT: tile.scale
// CHECK: tile.score_mod
// CHECK: %[[INV:.*]] = tile.softmax_scale inverse : f32
// CHECK: %[[SLOPE:.*]] = tile.input "slopes"
// CHECK: %[[DIST:.*]] = arith.sitofp
// CHECK: %[[OVER:.*]] = arith.mulf %[[SLOPE]], %[[INV]] : f32
// CHECK: %[[BIAS:.*]] = arith.mulf %[[OVER]], %[[DIST]] : f32
// CHECK: arith.subf %{{.*}}, %[[BIAS]] : f32
// CHECK-NOT: tile.scale
// CHECK: tile.softmax_update %{{.*}}, %{{.*}} {fold_scale}
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, inputs = [#tile.input<"slopes" : f32>], params = [], variant = "alibi"} {
  %q = tile.load q : tensor<?x64xbf16>
  %init_m, %init_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %result_m, %result_acc = tile.kv_loop iter_args(%init_m, %init_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %st_m: !tile.stats<?>, %st_acc: !tile.acc<?x64>):
    %k = tile.load k[%j] : tensor<?x64xbf16>
    %s = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %s1 = tile.scale %s : tensor<?x?xf32>
    %s2 = tile.score_mod %s1 : tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
      %slope = tile.input "slopes"[%h] : f32
      %d = arith.subi %qi, %kv : i32
      %a = math.absi %d : i32
      %f = arith.sitofp %a : i32 to f32
      %bias = arith.mulf %slope, %f : f32
      %y = arith.subf %score, %bias : f32
      tile.yield %y : f32
    }
    %p, %alpha, %st1_m = tile.softmax_update %s2, %st_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    %st2_acc = tile.rescale %st_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %st3_acc = tile.pv %p, %v, %st2_acc : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.yield %st1_m, %st3_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %result_m, %result_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// -----

// A term with no block-uniform factor (a per-key bias, added on the left) is multiplied by 1/scale itself.
// CHECK-LABEL: variant = "key_bias"
// CHECK-NOT: tile.scale
// CHECK: tile.score_mod
// CHECK: %[[INV:.*]] = tile.softmax_scale inverse : f32
// CHECK: %[[BIAS:.*]] = tile.input "bias"
// CHECK: %[[OVER:.*]] = arith.mulf %[[BIAS]], %[[INV]] : f32
// CHECK: arith.addf %[[OVER]], %{{.*}} : f32
// CHECK-NOT: tile.scale
// CHECK: tile.softmax_update %{{.*}}, %{{.*}} {fold_scale}
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, inputs = [#tile.input<"bias" : f32>], params = [], variant = "key_bias"} {
  %q = tile.load q : tensor<?x64xbf16>
  %init_m, %init_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %result_m, %result_acc = tile.kv_loop iter_args(%init_m, %init_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %st_m: !tile.stats<?>, %st_acc: !tile.acc<?x64>):
    %k = tile.load k[%j] : tensor<?x64xbf16>
    %s = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %s1 = tile.scale %s : tensor<?x?xf32>
    %s2 = tile.score_mod %s1 : tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
      %bias = tile.input "bias"[%kv] : f32
      %y = arith.addf %bias, %score : f32
      tile.yield %y : f32
    }
    %p, %alpha, %st1_m = tile.softmax_update %s2, %st_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    %st2_acc = tile.rescale %st_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %st3_acc = tile.pv %p, %v, %st2_acc : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.yield %st1_m, %st3_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %result_m, %result_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// -----

// A score first divided by a block-uniform value (softcap: cap·tanh(s/cap)) takes the scale into it:
// (scale·s)/cap = s/(cap·(1/scale)). No tile.scale is left and the softmax multiplies by log2(e) only.
// CHECK-LABEL: variant = "softcap"
// CHECK-NOT: tile.scale
// CHECK: tile.score_mod
// CHECK: %[[INV:.*]] = tile.softmax_scale inverse : f32
// CHECK: %[[CAP:.*]] = tile.param "cap"
// CHECK: %[[OVER:.*]] = arith.mulf %[[CAP]], %[[INV]] : f32
// CHECK: arith.divf %{{.*}}, %[[OVER]] : f32
// CHECK-NOT: tile.scale
// CHECK: tile.softmax_update
// CHECK-NOT: fold_scale
// CHECK: tile.finalize
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = ["cap"], variant = "softcap"} {
  %q = tile.load q : tensor<?x64xbf16>
  %init_m, %init_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %result_m, %result_acc = tile.kv_loop iter_args(%init_m, %init_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %st_m: !tile.stats<?>, %st_acc: !tile.acc<?x64>):
    %k = tile.load k[%j] : tensor<?x64xbf16>
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
    %p, %alpha, %st1_m = tile.softmax_update %s2, %st_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    %st2_acc = tile.rescale %st_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %st3_acc = tile.pv %p, %v, %st2_acc : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.yield %st1_m, %st3_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %result_m, %result_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// -----

// A term computed from the score (s - s·s/2) or a factor that is not block-uniform (s·q): the scale stays first.
// CHECK-LABEL: variant = "self_term"
// CHECK: %[[S1:.*]] = tile.scale
// CHECK: tile.score_mod %[[S1]]
// CHECK-NOT: tile.softmax_scale
// CHECK: tile.finalize
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], variant = "self_term"} {
  %q = tile.load q : tensor<?x64xbf16>
  %init_m, %init_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %result_m, %result_acc = tile.kv_loop iter_args(%init_m, %init_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %st_m: !tile.stats<?>, %st_acc: !tile.acc<?x64>):
    %k = tile.load k[%j] : tensor<?x64xbf16>
    %s = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %s1 = tile.scale %s : tensor<?x?xf32>
    %s2 = tile.score_mod %s1 : tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
      %half = arith.constant 0.5 : f32
      %sq = arith.mulf %score, %score : f32
      %t = arith.mulf %sq, %half : f32
      %y = arith.subf %score, %t : f32
      tile.yield %y : f32
    }
    %p, %alpha, %st1_m = tile.softmax_update %s2, %st_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    %st2_acc = tile.rescale %st_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %st3_acc = tile.pv %p, %v, %st2_acc : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.yield %st1_m, %st3_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %result_m, %result_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}

// -----

// CHECK-LABEL: variant = "row_factor"
// CHECK: %[[S1:.*]] = tile.scale
// CHECK: tile.score_mod %[[S1]]
// CHECK-NOT: tile.softmax_scale
// CHECK: tile.finalize
tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], variant = "row_factor"} {
  %q = tile.load q : tensor<?x64xbf16>
  %init_m, %init_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %result_m, %result_acc = tile.kv_loop iter_args(%init_m, %init_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %st_m: !tile.stats<?>, %st_acc: !tile.acc<?x64>):
    %k = tile.load k[%j] : tensor<?x64xbf16>
    %s = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %s1 = tile.scale %s : tensor<?x?xf32>
    %s2 = tile.score_mod %s1 : tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %qi: i32, %kv: i32):
      %f = arith.sitofp %qi : i32 to f32
      %y = arith.mulf %score, %f : f32
      tile.yield %y : f32
    }
    %p, %alpha, %st1_m = tile.softmax_update %s2, %st_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    %st2_acc = tile.rescale %st_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %st3_acc = tile.pv %p, %v, %st2_acc : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.yield %st1_m, %st3_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %result_m, %result_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}
