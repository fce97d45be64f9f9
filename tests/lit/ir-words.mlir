// RUN: flashtile-opt %s | flashtile-opt | FileCheck %s --strict-whitespace
// RUN: flashtile-opt %s --mlir-print-op-generic | flashtile-opt | FileCheck %s --strict-whitespace
// The closed vocabularies of the IR (passes/IR/TileEnums.td) are keywords: printed and parsed back, in the custom
// and in the generic form, with the defaults (segment all, order ascending, shapeClass default) left out. A quoted
// word parses too (MLIR's keyword-or-string). Bad words: invalid.mlir, async-ops.mlir.

// CHECK-LABEL: tile.func @words
// CHECK-SAME: warps = 4, warpLayout = split_q, warpRows = 16, stages = 1, shapeClass = short
// CHECK-SAME: #tile.target<arch = "sm_80", isa = "sm80">
// CHECK: tile.dim seqlen_k
// CHECK: tile.dim key_offset
// CHECK: tile.kv_range may attributes
// CHECK: tile.kv_range full {
// CHECK: tile.load q : tensor<64x64xbf16>
// CHECK: tile.kv_loop from %{{.*}} to %{{.*}} segment tail_boundary order descending iter_args
// CHECK: tile.load k[%{{.*}}] : tensor<64x64xbf16>
// CHECK: tile.kv_loop from %{{.*}} to %{{.*}} segment interior iter_args
// CHECK: tile.load v[%{{.*}}] : tensor<64x64xbf16>
// CHECK: tile.kv_loop iter_args
// CHECK: tile.kv_walk from %{{.*}} to %{{.*}} {
// CHECK: tile.kv_walk from %{{.*}} to %{{.*}} order descending attributes {note = "kept"} {
// CHECK: tile.store o %{{.*}} : tensor<64x64xf32>
// CHECK: tile.store lse %{{.*}} : tensor<64xf32>
tile.func @words attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "none", params = [],
    schedule = #tile.schedule<name = "fa2", blockM = 64, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 16, stages = 1, shapeClass = short>,
    target = #tile.target<arch = "sm_80", isa = "sm80">} {
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %sk = tile.dim seqlen_k
  %ko = tile.dim "key_offset"
  %lo, %hi = tile.kv_range may attributes {note = "kept"} {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    tile.yield %first, %last : i32, i32
  }
  %flo, %fhi = tile.kv_range "full" {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    tile.yield %first, %last : i32, i32
  }
  %q = tile.load q : tensor<64x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<64>, !tile.acc<64x64>
  %st1_m, %st1_acc = tile.kv_loop from %c0 to %c2 segment tail_boundary order descending iter_args(%st0_m, %st0_acc)
      : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    %k = tile.load k[%j] : tensor<64x64xbf16>
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  %st2_m, %st2_acc = tile.kv_loop from %c0 to %c2 segment interior order ascending iter_args(%st1_m, %st1_acc)
      : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    %v = tile.load "v"[%j] : tensor<64x64xbf16>
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  %st3_m, %st3_acc = tile.kv_loop iter_args(%st2_m, %st2_acc) : !tile.stats<64>, !tile.acc<64x64> -> !tile.stats<64>, !tile.acc<64x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<64>, %s_acc: !tile.acc<64x64>):
    tile.yield %s_m, %s_acc : !tile.stats<64>, !tile.acc<64x64>
  }
  tile.kv_walk from %c0 to %c2 {
  ^bb0(%j: i32):
    tile.yield
  }
  tile.kv_walk from %c0 to %c2 order descending attributes {note = "kept"} {
  ^bb0(%j: i32):
    tile.yield
  }
  %o, %lse = tile.finalize %st3_m, %st3_acc : !tile.stats<64>, !tile.acc<64x64> -> tensor<64x64xf32>, tensor<64xf32>
  tile.store o %o : tensor<64x64xf32>
  tile.store lse %lse : tensor<64xf32>
}
