module {
  tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 8, stages = 2>, target = #tile.target<arch = "sm_90a", isa = "sm80">, variant = "causal"} {
    %c64_i32 = arith.constant 64 : i32
    %c1_i32 = arith.constant 1 : i32
    %c0_i32 = arith.constant 0 : i32
    %lo, %hi = tile.kv_range "may" {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %24 = tile.dim "seqlen_q"
      %25 = tile.dim "seqlen_k"
      %26 = arith.subi %25, %24 : i32
      %27 = arith.addi %arg1, %26 : i32
      %28 = arith.addi %27, %c1_i32 : i32
      tile.yield %c0_i32, %28 : i32, i32
    }
    %lo_0, %hi_1 = tile.kv_range "full" {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %24 = tile.dim "seqlen_q"
      %25 = tile.dim "seqlen_k"
      %26 = arith.subi %25, %24 : i32
      %27 = arith.addi %arg0, %26 : i32
      %28 = arith.addi %27, %c1_i32 : i32
      tile.yield %c0_i32, %28 : i32, i32
    }
    %0 = tile.init_state : <128x64>
    %1 = tile.dim "seqlen_k"
    %2 = arith.maxsi %lo, %c0_i32 : i32
    %3 = arith.minsi %2, %1 : i32
    %4 = arith.maxsi %hi, %c0_i32 : i32
    %5 = arith.minsi %4, %1 : i32
    %6 = arith.divsi %3, %c64_i32 : i32
    %7 = arith.ceildivsi %5, %c64_i32 : i32
    %8 = arith.maxsi %7, %6 : i32
    %9 = arith.maxsi %lo_0, %c0_i32 : i32
    %10 = arith.minsi %9, %1 : i32
    %11 = arith.ceildivsi %10, %c64_i32 : i32
    %12 = arith.maxsi %hi_1, %c0_i32 : i32
    %13 = arith.minsi %12, %1 : i32
    %14 = arith.divsi %13, %c64_i32 : i32
    %15 = arith.maxsi %11, %6 : i32
    %16 = arith.minsi %15, %8 : i32
    %17 = arith.maxsi %14, %16 : i32
    %18 = arith.minsi %17, %8 : i32
    tile.copy_async "q" {tile.inst = "cp.async.cg.shared.global.16"}
    %19 = arith.subi %8, %c1_i32 : i32
    %20 = arith.cmpi sge, %19, %16 : i32
    tile.copy_async "k"[%19] if %20 {tile.inst = "cp.async.cg.shared.global.16"}
    tile.wait_async "q" {pending = 1 : i64, tile.inst = "cp.async.wait_group+bar.sync"}
    %21 = tile.load "q" {tile.inst = "ldmatrix.x4"} : tensor<128x64xbf16>
    %22 = tile.kv_loop from %18 to %8 iter_args(%0) {order = "descending", segment = "tail_boundary"} : <128x64> -> <128x64> {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>):
      tile.wait_async "k" {tile.inst = "cp.async.wait_group+bar.sync"}
      tile.copy_async "v"[%arg0] {tile.inst = "cp.async.cg.shared.global.16"}
      %24 = tile.load "k"[%arg0] {tile.inst = "ldmatrix.x4"} : tensor<64x64xbf16>
      %25 = tile.qk %21, %24 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %26 = tile.mask %25 : tensor<128x64xf32> {
      ^bb0(%arg2: i32, %arg3: i32, %arg4: i32, %arg5: i32):
        %32 = tile.dim "seqlen_q"
        %33 = arith.subi %1, %32 : i32
        %34 = arith.addi %arg4, %33 : i32
        %35 = arith.cmpi sle, %arg5, %34 : i32
        tile.yield %35 : i1
      }
      %p, %alpha, %new_state = tile.softmax_update %26, %arg1 {fold_scale, tile.inst = "ex2.approx.f32+shfl.bfly"} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %27 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      tile.wait_async "v" {tile.inst = "cp.async.wait_group+bar.sync"}
      %28 = arith.subi %arg0, %c1_i32 : i32
      %29 = arith.cmpi sge, %28, %16 : i32
      tile.copy_async "k"[%28] if %29 {tile.inst = "cp.async.cg.shared.global.16"}
      %30 = tile.load "v"[%arg0] {tile.inst = "ldmatrix.x4.trans"} : tensor<64x64xbf16>
      %31 = tile.pv %p, %30, %27 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %31 : !tile.state<128x64>
    }
    %23 = tile.kv_loop from %16 to %18 iter_args(%22) {order = "descending", segment = "interior"} : <128x64> -> <128x64> {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>):
      tile.wait_async "k" {tile.inst = "cp.async.wait_group+bar.sync"}
      tile.copy_async "v"[%arg0] {tile.inst = "cp.async.cg.shared.global.16"}
      %24 = tile.load "k"[%arg0] {tile.inst = "ldmatrix.x4"} : tensor<64x64xbf16>
      %25 = tile.qk %21, %24 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %p, %alpha, %new_state = tile.softmax_update %25, %arg1 {fold_scale, tile.inst = "ex2.approx.f32+shfl.bfly"} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %26 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      tile.wait_async "v" {tile.inst = "cp.async.wait_group+bar.sync"}
      %27 = arith.subi %arg0, %c1_i32 : i32
      %28 = arith.cmpi sge, %27, %16 : i32
      tile.copy_async "k"[%27] if %28 {tile.inst = "cp.async.cg.shared.global.16"}
      %29 = tile.load "v"[%arg0] {tile.inst = "ldmatrix.x4.trans"} : tensor<64x64xbf16>
      %30 = tile.pv %p, %29, %26 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %30 : !tile.state<128x64>
    }
    %o, %lse = tile.finalize %23 : <128x64> -> tensor<128x64xf32>, tensor<128xf32>
    tile.store "o" %o : tensor<128x64xf32>
    tile.store "lse" %lse : tensor<128xf32>
  }
}

