// docs/example-program-causal.mlir after the FA2 passes with stages = 2 (two K/V buffers, Q·Kᵀ one tile ahead):
// flashtile-opt docs/example-program-causal.mlir --tile-verify-program --canonicalize --tile-apply-schedule="stages=2" \
//   --tile-split-boundary --tile-fa2-pipeline --tile-lower-to-target=arch=sm_90a --canonicalize --cse
module {
  tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, stages = 2, lptGroupBlocks = 512>, target = #tile.target<arch = "sm_90a", isa = "sm80">, variant = "causal"} {
    %c2_i32 = arith.constant 2 : i32
    %c64_i32 = arith.constant 64 : i32
    %c1_i32 = arith.constant 1 : i32
    %c0_i32 = arith.constant 0 : i32
    %lo, %hi = tile.kv_range "may" {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %26 = tile.dim "seqlen_q"
      %27 = tile.dim "seqlen_k"
      %28 = arith.subi %27, %26 : i32
      %29 = arith.addi %arg1, %28 : i32
      %30 = arith.addi %29, %c1_i32 : i32
      tile.yield %c0_i32, %30 : i32, i32
    }
    %lo_0, %hi_1 = tile.kv_range "full" {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %26 = tile.dim "seqlen_q"
      %27 = tile.dim "seqlen_k"
      %28 = arith.subi %27, %26 : i32
      %29 = arith.addi %arg0, %28 : i32
      %30 = arith.addi %29, %c1_i32 : i32
      tile.yield %c0_i32, %30 : i32, i32
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
    tile.wait_async "k" {tile.inst = "cp.async.wait_group+bar.sync"}
    %21 = tile.load "q" {tile.inst = "ldmatrix.x4"} : tensor<128x64xbf16>
    tile.copy_async "v"[%19] if %20 {tile.inst = "cp.async.cg.shared.global.16"}
    %22 = arith.subi %8, %c2_i32 : i32
    %23 = arith.cmpi sge, %22, %16 : i32
    tile.copy_async "k"[%22] if %23 {tile.inst = "cp.async.cg.shared.global.16"}
    %24 = tile.load "k"[%19] if %20 {tile.inst = "ldmatrix.x4"} : tensor<64x64xbf16>
    %25 = tile.qk %21, %24 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    %result, %carriedResults = tile.kv_loop from %18 to %8 iter_args(%0, %25) {order = "descending", segment = "tail_boundary"} : <128x64>, tensor<128x64xf32> -> <128x64>, tensor<128x64xf32> {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>, %arg2: tensor<128x64xf32>):
      tile.wait_async "v" {tile.inst = "cp.async.wait_group+bar.sync"}
      %26 = arith.subi %arg0, %c1_i32 : i32
      %27 = arith.subi %arg0, %c2_i32 : i32
      %28 = arith.cmpi sge, %26, %16 : i32
      %29 = arith.cmpi sge, %27, %16 : i32
      tile.copy_async "k"[%27] if %29 {tile.inst = "cp.async.cg.shared.global.16"}
      tile.copy_async "v"[%26] if %28 {tile.inst = "cp.async.cg.shared.global.16"}
      %30 = tile.load "k"[%26] if %28 {tile.inst = "ldmatrix.x4"} : tensor<64x64xbf16>
      %31 = tile.qk %21, %30 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %32 = tile.mask %arg2 : tensor<128x64xf32> {
      ^bb0(%arg3: i32, %arg4: i32, %arg5: i32, %arg6: i32):
        %36 = tile.dim "seqlen_q"
        %37 = arith.subi %1, %36 : i32
        %38 = arith.addi %arg5, %37 : i32
        %39 = arith.cmpi sle, %arg6, %38 : i32
        tile.yield %39 : i1
      }
      %p, %alpha, %new_state = tile.softmax_update %32, %arg1 {fold_scale, tile.inst = "ex2.approx.f32+shfl.bfly"} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %33 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      %34 = tile.load "v"[%arg0] {tile.inst = "ldmatrix.x4.trans"} : tensor<64x64xbf16>
      %35 = tile.pv %p, %34, %33 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %35, %31 : !tile.state<128x64>, tensor<128x64xf32>
    }
    %result_2, %carriedResults_3 = tile.kv_loop from %16 to %18 iter_args(%result, %carriedResults) {order = "descending", segment = "interior"} : <128x64>, tensor<128x64xf32> -> <128x64>, tensor<128x64xf32> {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>, %arg2: tensor<128x64xf32>):
      tile.wait_async "v" {tile.inst = "cp.async.wait_group+bar.sync"}
      %26 = arith.subi %arg0, %c1_i32 : i32
      %27 = arith.subi %arg0, %c2_i32 : i32
      %28 = arith.cmpi sge, %26, %16 : i32
      %29 = arith.cmpi sge, %27, %16 : i32
      tile.copy_async "k"[%27] if %29 {tile.inst = "cp.async.cg.shared.global.16"}
      tile.copy_async "v"[%26] if %28 {tile.inst = "cp.async.cg.shared.global.16"}
      %30 = tile.load "k"[%26] if %28 {tile.inst = "ldmatrix.x4"} : tensor<64x64xbf16>
      %31 = tile.qk %21, %30 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %p, %alpha, %new_state = tile.softmax_update %arg2, %arg1 {fold_scale, tile.inst = "ex2.approx.f32+shfl.bfly"} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %32 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      %33 = tile.load "v"[%arg0] {tile.inst = "ldmatrix.x4.trans"} : tensor<64x64xbf16>
      %34 = tile.pv %p, %33, %32 {tile.inst = "mma.sync.aligned.m16n8k16.row.col.f32"} : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %34, %31 : !tile.state<128x64>, tensor<128x64xf32>
    }
    %o, %lse = tile.finalize %result_2 : <128x64> -> tensor<128x64xf32>, tensor<128xf32>
    tile.store "o" %o : tensor<128x64xf32>
    tile.store "lse" %lse : tensor<128xf32>
  }
}

