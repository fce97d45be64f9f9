// The causal variant's tile program (bf16, head dim 64) as the DSL builds it; docs/ir.md explains the ops.
// Made by: flashtile compile --variant causal --head-dim 64 --emit tile
// tests/lit/docs-examples.test checks that it parses, verifies and is still what that command prints.
module {
  tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], variant = "causal"} {
    %lo, %hi = tile.kv_range may {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %c0_i32 = arith.constant 0 : i32
      %1 = tile.dim seqlen_k
      %2 = arith.addi %arg1, %1 : i32
      %3 = tile.dim seqlen_q
      %4 = arith.subi %2, %3 : i32
      %c1_i32 = arith.constant 1 : i32
      %5 = arith.addi %4, %c1_i32 : i32
      tile.yield %c0_i32, %5 : i32, i32
    }
    %lo_0, %hi_1 = tile.kv_range full {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %c0_i32 = arith.constant 0 : i32
      %1 = tile.dim seqlen_k
      %2 = arith.addi %arg0, %1 : i32
      %3 = tile.dim seqlen_q
      %4 = arith.subi %2, %3 : i32
      %c1_i32 = arith.constant 1 : i32
      %5 = arith.addi %4, %c1_i32 : i32
      tile.yield %c0_i32, %5 : i32, i32
    }
    %0 = tile.load q : tensor<?x64xbf16>
    %stats, %acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
    %stats_2, %acc_3 = tile.kv_loop iter_args(%stats, %acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
    ^bb0(%arg0: i32, %arg1: !tile.stats<?>, %arg2: !tile.acc<?x64>):
      %1 = tile.load k[%arg0] : tensor<?x64xbf16>
      %s = tile.qk %0, %1 : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
      %2 = tile.scale %s : tensor<?x?xf32>
      %3 = tile.mask %2 : tensor<?x?xf32> {
      ^bb0(%arg3: i32, %arg4: i32, %arg5: i32, %arg6: i32):
        %6 = tile.dim seqlen_k
        %7 = arith.addi %arg5, %6 : i32
        %8 = tile.dim seqlen_q
        %9 = arith.subi %7, %8 : i32
        %10 = arith.cmpi sle, %arg6, %9 : i32
        tile.yield %10 : i1
      }
      %p, %alpha, %new_stats = tile.softmax_update %3, %arg1 : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
      %4 = tile.rescale %arg2, %alpha : !tile.acc<?x64>, tensor<?xf32>
      %5 = tile.load v[%arg0] : tensor<?x64xbf16>
      %result = tile.pv %p, %5, %4 : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
      tile.yield %new_stats, %result : !tile.stats<?>, !tile.acc<?x64>
    }
    %o, %lse = tile.finalize %stats_2, %acc_3 : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
    tile.store o %o : tensor<?x64xf32>
    tile.store lse %lse : tensor<?xf32>
  }
}
