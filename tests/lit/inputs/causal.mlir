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
  %st0 = tile.init_state : !tile.state<?x64>
  %st = tile.kv_loop iter_args(%st0) : !tile.state<?x64> -> !tile.state<?x64> {
  ^bb0(%j: i32, %s: !tile.state<?x64>):
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
    %p, %alpha, %s3 = tile.softmax_update %s2, %s : tensor<?x?xf32>, !tile.state<?x64> -> tensor<?x?xbf16>, tensor<?xf32>
    %s4 = tile.rescale %s3, %alpha : !tile.state<?x64>, tensor<?xf32>
    %v = tile.load v[%j] : tensor<?x64xbf16>
    %s5 = tile.pv %p, %v, %s4 : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.state<?x64>
    tile.yield %s5 : !tile.state<?x64>
  }
  %o, %lse = tile.finalize %st : !tile.state<?x64> -> tensor<?x64xf32>, tensor<?xf32>
  tile.store o %o : tensor<?x64xf32>
  tile.store lse %lse : tensor<?xf32>
}
