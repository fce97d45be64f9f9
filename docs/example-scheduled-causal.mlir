// docs/example-program-causal.mlir after the FA2 passes with stages = 2 (two K/V slots, Q·Kᵀ one tile ahead):
// flashtile-opt docs/example-program-causal.mlir --tile-verify-program --canonicalize --tile-apply-schedule="options=stages=2" \
//   --tile-split-boundary --tile-fa2-pipeline --tile-lower-to-target=arch=sm_90a --canonicalize --cse
module {
  tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, stages = 2, lptGroupBlocks = 512>, target = #tile.target<arch = "sm_90a", isa = "sm80">, variant = "causal"} {
    %c2_i32 = arith.constant 2 : i32
    %c64_i32 = arith.constant 64 : i32
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %0 = tile.buffer q : <tensor<128x64xbf16>, slots = 1>
    %1 = tile.buffer k : <tensor<64x64xbf16>, slots = 2>
    %2 = tile.buffer v : <tensor<64x64xbf16>, slots = 2>
    %lo, %hi = tile.kv_range may {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %37 = tile.dim "seqlen_q"
      %38 = tile.dim "seqlen_k"
      %39 = arith.subi %38, %37 : i32
      %40 = arith.addi %arg1, %39 : i32
      %41 = arith.addi %40, %c1_i32 : i32
      tile.yield %c0_i32, %41 : i32, i32
    }
    %lo_0, %hi_1 = tile.kv_range full {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %37 = tile.dim "seqlen_q"
      %38 = tile.dim "seqlen_k"
      %39 = arith.subi %38, %37 : i32
      %40 = arith.addi %arg0, %39 : i32
      %41 = arith.addi %40, %c1_i32 : i32
      tile.yield %c0_i32, %41 : i32, i32
    }
    %3 = tile.init_state : <128x64>
    %4 = tile.dim "seqlen_k"
    %5 = arith.maxsi %lo, %c0_i32 : i32
    %6 = arith.minsi %5, %4 : i32
    %7 = arith.maxsi %hi, %c0_i32 : i32
    %8 = arith.minsi %7, %4 : i32
    %9 = arith.divsi %6, %c64_i32 : i32
    %10 = arith.ceildivsi %8, %c64_i32 : i32
    %11 = arith.maxsi %10, %9 : i32
    %12 = arith.maxsi %lo_0, %c0_i32 : i32
    %13 = arith.minsi %12, %4 : i32
    %14 = arith.ceildivsi %13, %c64_i32 : i32
    %15 = arith.maxsi %hi_1, %c0_i32 : i32
    %16 = arith.minsi %15, %4 : i32
    %17 = arith.divsi %16, %c64_i32 : i32
    %18 = arith.maxsi %14, %9 : i32
    %19 = arith.minsi %18, %11 : i32
    %20 = arith.maxsi %17, %19 : i32
    %21 = arith.minsi %20, %11 : i32
    %22 = tile.slot %0 : <tensor<128x64xbf16>, slots = 1>
    %23 = tile.copy_async q into %22 : <tensor<128x64xbf16>>
    %24 = arith.subi %11, %c1_i32 : i32
    %25 = arith.cmpi sge, %24, %19 : i32
    %26 = tile.slot %1[%24] : <tensor<64x64xbf16>, slots = 2>
    %27 = tile.copy_async k[%24] into %26 if %25 : <tensor<64x64xbf16>>
    tile.wait %23, %27
    %28 = tile.load q from %22 : !tile.slot<tensor<128x64xbf16>> : tensor<128x64xbf16>
    %29 = tile.slot %2[%24] : <tensor<64x64xbf16>, slots = 2>
    %30 = tile.copy_async v[%24] into %29 if %25 : <tensor<64x64xbf16>>
    %31 = arith.subi %11, %c2_i32 : i32
    %32 = arith.cmpi sge, %31, %19 : i32
    %33 = tile.slot %1[%31] : <tensor<64x64xbf16>, slots = 2>
    %34 = tile.copy_async k[%31] into %33 if %32 : <tensor<64x64xbf16>>
    %35 = tile.load k[%24] from %26 : !tile.slot<tensor<64x64xbf16>> if %25 : tensor<64x64xbf16>
    %36 = tile.qk %28, %35 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    %result, %carriedResults:3 = tile.kv_loop from %21 to %11 segment tail_boundary order descending iter_args(%3, %36, %30, %34) : <128x64>, tensor<128x64xf32>, !tile.token, !tile.token -> <128x64>, tensor<128x64xf32>, !tile.token, !tile.token {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>, %arg2: tensor<128x64xf32>, %arg3: !tile.token, %arg4: !tile.token):
      tile.wait %arg3, %arg4
      %37 = arith.subi %arg0, %c1_i32 : i32
      %38 = arith.subi %arg0, %c2_i32 : i32
      %39 = arith.cmpi sge, %37, %19 : i32
      %40 = arith.cmpi sge, %38, %19 : i32
      %41 = tile.slot %1[%38] : <tensor<64x64xbf16>, slots = 2>
      %42 = tile.copy_async k[%38] into %41 if %40 : <tensor<64x64xbf16>>
      %43 = tile.slot %2[%37] : <tensor<64x64xbf16>, slots = 2>
      %44 = tile.copy_async v[%37] into %43 if %39 : <tensor<64x64xbf16>>
      %45 = tile.slot %1[%37] : <tensor<64x64xbf16>, slots = 2>
      %46 = tile.load k[%37] from %45 : !tile.slot<tensor<64x64xbf16>> if %39 : tensor<64x64xbf16>
      %47 = tile.qk %28, %46 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %48 = tile.mask %arg2 : tensor<128x64xf32> {
      ^bb0(%arg5: i32, %arg6: i32, %arg7: i32, %arg8: i32):
        %53 = tile.dim "seqlen_q"
        %54 = arith.subi %4, %53 : i32
        %55 = arith.addi %arg7, %54 : i32
        %56 = arith.cmpi sle, %arg8, %55 : i32
        tile.yield %56 : i1
      }
      %p, %alpha, %new_state = tile.softmax_update %48, %arg1 {fold_scale} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %49 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      %50 = tile.slot %2[%arg0] : <tensor<64x64xbf16>, slots = 2>
      %51 = tile.load v[%arg0] from %50 : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
      %52 = tile.pv %p, %51, %49 : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %52, %47, %44, %42 : !tile.state<128x64>, tensor<128x64xf32>, !tile.token, !tile.token
    }
    %result_2, %carriedResults_3:3 = tile.kv_loop from %19 to %21 segment interior order descending iter_args(%result, %carriedResults#0, %carriedResults#1, %carriedResults#2) : <128x64>, tensor<128x64xf32>, !tile.token, !tile.token -> <128x64>, tensor<128x64xf32>, !tile.token, !tile.token {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>, %arg2: tensor<128x64xf32>, %arg3: !tile.token, %arg4: !tile.token):
      tile.wait %arg3, %arg4
      %37 = arith.subi %arg0, %c1_i32 : i32
      %38 = arith.subi %arg0, %c2_i32 : i32
      %39 = arith.cmpi sge, %37, %19 : i32
      %40 = arith.cmpi sge, %38, %19 : i32
      %41 = tile.slot %1[%38] : <tensor<64x64xbf16>, slots = 2>
      %42 = tile.copy_async k[%38] into %41 if %40 : <tensor<64x64xbf16>>
      %43 = tile.slot %2[%37] : <tensor<64x64xbf16>, slots = 2>
      %44 = tile.copy_async v[%37] into %43 if %39 : <tensor<64x64xbf16>>
      %45 = tile.slot %1[%37] : <tensor<64x64xbf16>, slots = 2>
      %46 = tile.load k[%37] from %45 : !tile.slot<tensor<64x64xbf16>> if %39 : tensor<64x64xbf16>
      %47 = tile.qk %28, %46 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %p, %alpha, %new_state = tile.softmax_update %arg2, %arg1 {fold_scale} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %48 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      %49 = tile.slot %2[%arg0] : <tensor<64x64xbf16>, slots = 2>
      %50 = tile.load v[%arg0] from %49 : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
      %51 = tile.pv %p, %50, %48 : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %51, %47, %44, %42 : !tile.state<128x64>, tensor<128x64xf32>, !tile.token, !tile.token
    }
    %o, %lse = tile.finalize %result_2 : <128x64> -> tensor<128x64xf32>, tensor<128xf32>
    tile.store o %o : tensor<128x64xf32>
    tile.store lse %lse : tensor<128xf32>
  }
}

