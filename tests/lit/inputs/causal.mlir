tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, variant = "causal", params = []} {
  %mlo, %mhi = tile.kv_range may {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %sq = tile.dim seqlen_q
    %sk = tile.dim seqlen_k
    %d = arith.subi %sk, %sq : i32
    %la = arith.addi %last, %d : i32
    %hi = arith.addi %la, %c1 : i32
    tile.yield %c0, %hi : i32, i32
  }
  %flo, %fhi = tile.kv_range full {
  ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %sq = tile.dim seqlen_q
    %sk = tile.dim seqlen_k
    %d = arith.subi %sk, %sq : i32
    %fa = arith.addi %first, %d : i32
    %hi = arith.addi %fa, %c1 : i32
    tile.yield %c0, %hi : i32, i32
  }
  %q = tile.load q : tensor<?x64xbf16>
  %st0_m, %st0_acc = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
  %st_m, %st_acc = tile.kv_loop iter_args(%st0_m, %st0_acc) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
  ^bb0(%j: i32, %s_m: !tile.stats<?>, %s_acc: !tile.acc<?x64>):
    %k = tile.load k[%j] : tensor<?x64xbf16>
    %sc = tile.qk %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
    %s1 = tile.scale %sc : tensor<?x?xf32>
    %s2 = tile.mask %s1 : tensor<?x?xf32> {
    ^bb0(%b: i32, %h: i32, %qi: i32, %kv: i32):
      %sq = tile.dim seqlen_q
      %sk = tile.dim seqlen_k
      %d = arith.subi %sk, %sq : i32
      %qa = arith.addi %qi, %d : i32
      %keep = arith.cmpi sle, %kv, %qa : i32
      tile.yield %keep : i1
    }
    %p, %alpha, %s3_m = tile.softmax_update %s2, %s_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    %s4_acc = tile.rescale %s_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %s5_acc = tile.pv %p, %v, %s4_acc : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
    tile.yield %s3_m, %s5_acc : !tile.stats<?>, !tile.acc<?x64>
  }
  %o, %lse = tile.finalize %st_m, %st_acc : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}
