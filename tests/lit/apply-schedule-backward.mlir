// RUN: flashtile-opt %s --tile-apply-schedule | FileCheck %s --check-prefix=DEFAULT
// RUN: flashtile-opt %s --tile-apply-schedule="options=block-m=128,block-n=64,warps=4" | FileCheck %s --check-prefix=WIDE
// RUN: not flashtile-opt %s --tile-apply-schedule="options=block-m=48" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not flashtile-opt %s --tile-apply-schedule="options=lpt-group-blocks=8" 2>&1 | FileCheck %s --check-prefix=FORWARDKNOB
// RUN: flashtile-opt %s --tile-apply-schedule --tile-lower-to-target=arch=sm_80 | FileCheck %s --check-prefix=LOWERED

// tile-apply-schedule on the backward's three programs (docs/backward.md): fa2's backward configuration (one for the
// module: at head dim 64, 128-row Q tiles, 128-key K/V tiles, 8 warps, two Q-tile buffers). Q tiles and every per-row
// tensor (O, dO, LSE, D, the dQ accumulator) get blockM rows; K and V tiles and the main program's accumulators (dK,
// dV) blockN rows.
// DEFAULT: tile.func @attention_bwd_preprocess attributes {{.*}}schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 128, warps = 8, warpLayout = split_q, warpRows = 16, stages = 2>
// DEFAULT: tile.load o : tensor<128x64xbf16>
// DEFAULT: tile.row_dot {{.*}} -> tensor<128xf32>
// DEFAULT: tile.func @attention_bwd attributes {{.*}}schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 128
// DEFAULT: tile.load k : tensor<128x64xbf16>
// DEFAULT: tile.zero_acc : !tile.acc<128x64>
// DEFAULT: tile.load q[%{{.*}}] : tensor<128x64xbf16>
// DEFAULT: tile.qk {{.*}} -> tensor<128x128xf32>
// DEFAULT: tile.load lse[%{{.*}}] : tensor<128xf32>
// DEFAULT: tile.func @attention_bwd_postprocess attributes {{.*}}schedule = #tile.schedule<name = "fa2", blockM = 128
// DEFAULT: tile.load dq_accum : tensor<128x64xf32>

// 128-row Q tiles of 4 warps: 2 m16 tiles a warp for S and dP; the accumulators keep the K/V tile's 64 rows.
// WIDE: tile.load k : tensor<64x64xbf16>
// WIDE: tile.zero_acc : !tile.acc<64x64>
// WIDE: tile.load q[%{{.*}}] : tensor<128x64xbf16>
// WIDE: tile.qk {{.*}} -> tensor<128x64xf32>
// WIDE: tile.load lse[%{{.*}}] : tensor<128xf32>

// FORWARDKNOB: error: 'tile.func' op fa2 backward: the knob lpt-group-blocks shapes the forward's kernel only; the backward accepts block-m, block-n, warps, stages and key-warps
// BAD: error: 'tile.func' op fa2 backward: block-m = 48 is not supported; accepted: a multiple of 16 x warps / key-warps (128): the warps' row groups split a Q tile in m16 tiles

// Lowered without pipelining: the backward's printer makes its own copies.
// LOWERED: tile.func @attention_bwd_preprocess attributes {{.*}}target = #tile.target<arch = "sm_80", isa = "sm80">
// LOWERED: tile.func @attention_bwd attributes {{.*}}target = #tile.target<arch = "sm_80", isa = "sm80">
// LOWERED: tile.func @attention_bwd_postprocess attributes {{.*}}target = #tile.target<arch = "sm_80", isa = "sm80">

tile.func @attention_bwd_preprocess attributes {kind = "backward_preprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "softcap", params = ["cap"]} {
  %o = tile.load o : tensor<?x64xbf16>
  %do = tile.load do : tensor<?x64xbf16>
  %d = tile.row_dot %o, %do : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?xf32>
  tile.store delta %d : tensor<?xf32>
}

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

tile.func @attention_bwd_postprocess attributes {kind = "backward_postprocess", dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "softcap", params = ["cap"]} {
  %dq = tile.load dq_accum : tensor<?x64xf32>
  tile.store dq %dq : tensor<?x64xf32>
}
