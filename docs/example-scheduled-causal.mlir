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
      %36 = tile.dim seqlen_q
      %37 = tile.dim seqlen_k
      %38 = arith.subi %37, %36 : i32
      %39 = arith.addi %arg1, %38 : i32
      %40 = arith.addi %39, %c1_i32 : i32
      tile.yield %c0_i32, %40 : i32, i32
    }
    %lo_0, %hi_1 = tile.kv_range full {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %36 = tile.dim seqlen_q
      %37 = tile.dim seqlen_k
      %38 = arith.subi %37, %36 : i32
      %39 = arith.addi %arg0, %38 : i32
      %40 = arith.addi %39, %c1_i32 : i32
      tile.yield %c0_i32, %40 : i32, i32
    }
    %3 = tile.init_state : <128x64>
    %4 = tile.dim seqlen_k
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
    %s = tile.qk %28, %35 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    %result, %carriedResults:3 = tile.kv_loop from %21 to %11 segment tail_boundary order descending iter_args(%3, %s, %30, %34) : <128x64>, tensor<128x64xf32>, !tile.token, !tile.token -> <128x64>, tensor<128x64xf32>, !tile.token, !tile.token {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>, %arg2: tensor<128x64xf32>, %arg3: !tile.token, %arg4: !tile.token):
      tile.wait %arg3, %arg4
      %36 = arith.subi %arg0, %c1_i32 : i32
      %37 = arith.subi %arg0, %c2_i32 : i32
      %38 = arith.cmpi sge, %36, %19 : i32
      %39 = arith.cmpi sge, %37, %19 : i32
      %40 = tile.slot %1[%37] : <tensor<64x64xbf16>, slots = 2>
      %41 = tile.copy_async k[%37] into %40 if %39 : <tensor<64x64xbf16>>
      %42 = tile.slot %2[%36] : <tensor<64x64xbf16>, slots = 2>
      %43 = tile.copy_async v[%36] into %42 if %38 : <tensor<64x64xbf16>>
      %44 = tile.slot %1[%36] : <tensor<64x64xbf16>, slots = 2>
      %45 = tile.load k[%36] from %44 : !tile.slot<tensor<64x64xbf16>> if %38 : tensor<64x64xbf16>
      %s_4 = tile.qk %28, %45 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %46 = tile.mask %arg2 : tensor<128x64xf32> {
      ^bb0(%arg5: i32, %arg6: i32, %arg7: i32, %arg8: i32):
        %50 = tile.dim seqlen_q
        %51 = arith.subi %4, %50 : i32
        %52 = arith.addi %arg7, %51 : i32
        %53 = arith.cmpi sle, %arg8, %52 : i32
        tile.yield %53 : i1
      }
      %p, %alpha, %new_state = tile.softmax_update %46, %arg1 {fold_scale} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %47 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      %48 = tile.slot %2[%arg0] : <tensor<64x64xbf16>, slots = 2>
      %49 = tile.load v[%arg0] from %48 : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
      %result_5 = tile.pv %p, %49, %47 : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %result_5, %s_4, %43, %41 : !tile.state<128x64>, tensor<128x64xf32>, !tile.token, !tile.token
    }
    %result_2, %carriedResults_3:3 = tile.kv_loop from %19 to %21 segment interior order descending iter_args(%result, %carriedResults#0, %carriedResults#1, %carriedResults#2) : <128x64>, tensor<128x64xf32>, !tile.token, !tile.token -> <128x64>, tensor<128x64xf32>, !tile.token, !tile.token {
    ^bb0(%arg0: i32, %arg1: !tile.state<128x64>, %arg2: tensor<128x64xf32>, %arg3: !tile.token, %arg4: !tile.token):
      tile.wait %arg3, %arg4
      %36 = arith.subi %arg0, %c1_i32 : i32
      %37 = arith.subi %arg0, %c2_i32 : i32
      %38 = arith.cmpi sge, %36, %19 : i32
      %39 = arith.cmpi sge, %37, %19 : i32
      %40 = tile.slot %1[%37] : <tensor<64x64xbf16>, slots = 2>
      %41 = tile.copy_async k[%37] into %40 if %39 : <tensor<64x64xbf16>>
      %42 = tile.slot %2[%36] : <tensor<64x64xbf16>, slots = 2>
      %43 = tile.copy_async v[%36] into %42 if %38 : <tensor<64x64xbf16>>
      %44 = tile.slot %1[%36] : <tensor<64x64xbf16>, slots = 2>
      %45 = tile.load k[%36] from %44 : !tile.slot<tensor<64x64xbf16>> if %38 : tensor<64x64xbf16>
      %s_4 = tile.qk %28, %45 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %p, %alpha, %new_state = tile.softmax_update %arg2, %arg1 {fold_scale} : tensor<128x64xf32>, <128x64> -> tensor<128x64xbf16>, tensor<128xf32>
      %46 = tile.rescale %new_state, %alpha : <128x64>, tensor<128xf32>
      %47 = tile.slot %2[%arg0] : <tensor<64x64xbf16>, slots = 2>
      %48 = tile.load v[%arg0] from %47 : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
      %result_5 = tile.pv %p, %48, %46 : tensor<128x64xbf16>, tensor<64x64xbf16>, <128x64>
      tile.yield %result_5, %s_4, %43, %41 : !tile.state<128x64>, tensor<128x64xf32>, !tile.token, !tile.token
    }
    %o, %lse = tile.finalize %result_2 : <128x64> -> tensor<128x64xf32>, tensor<128xf32>
    tile.store o %o : tensor<128x64xf32>
    tile.store lse %lse : tensor<128xf32>
  }
}

