// The sliding_window variant (examples/variants/SlidingWindow.cpp), head dim 64, as
// `flashtile compile --variant sliding_window --head-dim 64 --emit tile` prints it.
module {
  tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = ["left", "right"], variant = "sliding_window"} {
    %lo, %hi = tile.kv_range may {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %3 = tile.dim seqlen_q
      %4 = tile.dim seqlen_k
      %5 = tile.param "left"
      %6 = arith.fptosi %5 : f32 to i32
      %7 = tile.param "right"
      %8 = arith.fptosi %7 : f32 to i32
      %9 = arith.addi %arg0, %4 : i32
      %10 = arith.subi %9, %3 : i32
      %11 = arith.subi %10, %6 : i32
      %c0_i32 = arith.constant 0 : i32
      %c0_i32_2 = arith.constant 0 : i32
      %12 = arith.cmpi slt, %6, %c0_i32_2 : i32
      %13 = arith.select %12, %c0_i32, %11 : i32
      %14 = arith.addi %arg1, %4 : i32
      %15 = arith.subi %14, %3 : i32
      %16 = arith.addi %15, %8 : i32
      %c1_i32 = arith.constant 1 : i32
      %17 = arith.addi %16, %c1_i32 : i32
      %c0_i32_3 = arith.constant 0 : i32
      %18 = arith.cmpi slt, %8, %c0_i32_3 : i32
      %19 = arith.select %18, %4, %17 : i32
      tile.yield %13, %19 : i32, i32
    }
    %lo_0, %hi_1 = tile.kv_range full {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %3 = tile.dim seqlen_q
      %4 = tile.dim seqlen_k
      %5 = tile.param "left"
      %6 = arith.fptosi %5 : f32 to i32
      %7 = tile.param "right"
      %8 = arith.fptosi %7 : f32 to i32
      %9 = arith.addi %arg1, %4 : i32
      %10 = arith.subi %9, %3 : i32
      %11 = arith.subi %10, %6 : i32
      %c0_i32 = arith.constant 0 : i32
      %c0_i32_2 = arith.constant 0 : i32
      %12 = arith.cmpi slt, %6, %c0_i32_2 : i32
      %13 = arith.select %12, %c0_i32, %11 : i32
      %14 = arith.addi %arg0, %4 : i32
      %15 = arith.subi %14, %3 : i32
      %16 = arith.addi %15, %8 : i32
      %c1_i32 = arith.constant 1 : i32
      %17 = arith.addi %16, %c1_i32 : i32
      %c0_i32_3 = arith.constant 0 : i32
      %18 = arith.cmpi slt, %8, %c0_i32_3 : i32
      %19 = arith.select %18, %4, %17 : i32
      tile.yield %13, %19 : i32, i32
    }
    %0 = tile.load q : tensor<?x64xbf16>
    %m1, %acc1 = tile.init_state : !tile.stats<?>, !tile.acc<?x64>
    %m2, %acc2 = tile.kv_loop iter_args(%m1, %acc1) : !tile.stats<?>, !tile.acc<?x64> -> !tile.stats<?>, !tile.acc<?x64> {
    ^bb0(%arg0: i32, %arg1_m: !tile.stats<?>, %arg1_acc: !tile.acc<?x64>):
      %3 = tile.load k[%arg0] : tensor<?x64xbf16>
      %4 = tile.qk %0, %3 : tensor<?x64xbf16>, tensor<?x64xbf16> -> tensor<?x?xf32>
      %5 = tile.scale %4 : tensor<?x?xf32>
      %6 = tile.mask %5 : tensor<?x?xf32> {
      ^bb0(%arg2: i32, %arg3: i32, %arg4: i32, %arg5: i32):
        %10 = tile.dim seqlen_q
        %11 = tile.dim seqlen_k
        %12 = arith.addi %arg4, %11 : i32
        %13 = arith.subi %12, %10 : i32
        %14 = tile.param "left"
        %15 = arith.fptosi %14 : f32 to i32
        %16 = tile.param "right"
        %17 = arith.fptosi %16 : f32 to i32
        %c0_i32 = arith.constant 0 : i32
        %18 = arith.cmpi slt, %15, %c0_i32 : i32
        %19 = arith.subi %13, %15 : i32
        %20 = arith.cmpi sge, %arg5, %19 : i32
        %21 = arith.ori %18, %20 : i1
        %c0_i32_2 = arith.constant 0 : i32
        %22 = arith.cmpi slt, %17, %c0_i32_2 : i32
        %23 = arith.addi %13, %17 : i32
        %24 = arith.cmpi sle, %arg5, %23 : i32
        %25 = arith.ori %22, %24 : i1
        %26 = arith.andi %21, %25 : i1
        tile.yield %26 : i1
      }
      %p, %alpha, %new_state_m = tile.softmax_update %6, %arg1_m : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
      %acc7 = tile.rescale %arg1_acc, %alpha : !tile.acc<?x64>, tensor<?xf32>
      %8 = tile.load v[%arg0] : tensor<?x64xbf16>
      %acc9 = tile.pv %p, %8, %acc7 : tensor<?x?xbf16>, tensor<?x64xbf16>, !tile.acc<?x64>
      tile.yield %new_state_m, %acc9 : !tile.stats<?>, !tile.acc<?x64>
    }
    %o, %lse = tile.finalize %m2, %acc2 : !tile.stats<?>, !tile.acc<?x64> -> tensor<?x64xf32>, tensor<?xf32>
    tile.store o %o : tensor<?x64xf32>
    tile.store lse %lse : tensor<?xf32>
  }
}
