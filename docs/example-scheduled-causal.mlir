// docs/example-program-causal.mlir after the FA2 passes with stages = 2 (two K/V slots, Q·Kᵀ one tile ahead):
// flashtile-opt docs/example-program-causal.mlir --tile-verify-program --canonicalize \
//   --tile-apply-schedule="options=stages=2" --tile-split-boundary --tile-pipeline-copies \
//   --tile-lower-to-target=arch=sm_90a --canonicalize --cse
// (= flashtile compile --variant causal --head-dim 64 --stages 2 --arch sm_90a --emit scheduled);
// tests/lit/docs-examples.test checks that it parses, verifies and is still what those passes print.
module {
  tile.func @attention attributes {dtype = bf16, head_dim = 64 : i64, head_dim_v = 64 : i64, params = [], schedule = #tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32, stages = 2, lptGroupBlocks = 512>, target = #tile.target<arch = "sm_90a", isa = "sm80">, variant = "causal"} {
    %c2_i32 = arith.constant 2 : i32
    %c64_i32 = arith.constant 64 : i32
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %0 = tile.buffer q : <tensor<128x64xbf16>, slots = 1>
    %1 = tile.buffer k : <tensor<64x64xbf16>, slots = 2>
    %2 = tile.buffer v : <tensor<64x64xbf16>, slots = 2>
    %lo, %hi = tile.kv_range may {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %35 = tile.dim seqlen_k
      %36 = arith.addi %arg1, %35 : i32
      %37 = tile.dim seqlen_q
      %38 = arith.subi %36, %37 : i32
      %39 = arith.addi %38, %c1_i32 : i32
      tile.yield %c0_i32, %39 : i32, i32
    }
    %lo_0, %hi_1 = tile.kv_range full {
    ^bb0(%arg0: i32, %arg1: i32, %arg2: i32, %arg3: i32):
      %35 = tile.dim seqlen_k
      %36 = arith.addi %arg0, %35 : i32
      %37 = tile.dim seqlen_q
      %38 = arith.subi %36, %37 : i32
      %39 = arith.addi %38, %c1_i32 : i32
      tile.yield %c0_i32, %39 : i32, i32
    }
    %stats, %acc = tile.init_state : !tile.stats<128>, !tile.acc<128x64>
    %3 = tile.dim seqlen_k
    %4 = arith.maxsi %lo, %c0_i32 : i32
    %5 = arith.minsi %4, %3 : i32
    %6 = arith.maxsi %hi, %c0_i32 : i32
    %7 = arith.minsi %6, %3 : i32
    %8 = arith.divsi %5, %c64_i32 : i32
    %9 = arith.ceildivsi %7, %c64_i32 : i32
    %10 = arith.maxsi %9, %8 : i32
    %11 = arith.maxsi %lo_0, %c0_i32 : i32
    %12 = arith.minsi %11, %3 : i32
    %13 = arith.ceildivsi %12, %c64_i32 : i32
    %14 = arith.maxsi %hi_1, %c0_i32 : i32
    %15 = arith.minsi %14, %3 : i32
    %16 = arith.divsi %15, %c64_i32 : i32
    %17 = arith.maxsi %13, %8 : i32
    %18 = arith.minsi %17, %10 : i32
    %19 = arith.maxsi %16, %18 : i32
    %20 = arith.minsi %19, %10 : i32
    %21 = tile.slot %0 : <tensor<128x64xbf16>, slots = 1>
    %22 = tile.copy_async q into %21 : <tensor<128x64xbf16>>
    %23 = arith.subi %10, %c1_i32 : i32
    %24 = arith.cmpi sge, %23, %18 : i32
    %25 = tile.slot %1[%23] : <tensor<64x64xbf16>, slots = 2>
    %26 = tile.copy_async k[%23] into %25 if %24 : <tensor<64x64xbf16>>
    tile.wait %22, %26
    %27 = tile.load q from %21 : !tile.slot<tensor<128x64xbf16>> : tensor<128x64xbf16>
    %28 = tile.slot %2[%23] : <tensor<64x64xbf16>, slots = 2>
    %29 = tile.copy_async v[%23] into %28 if %24 : <tensor<64x64xbf16>>
    %30 = arith.subi %10, %c2_i32 : i32
    %31 = arith.cmpi sge, %30, %18 : i32
    %32 = tile.slot %1[%30] : <tensor<64x64xbf16>, slots = 2>
    %33 = tile.copy_async k[%30] into %32 if %31 : <tensor<64x64xbf16>>
    %34 = tile.load k[%23] from %25 : !tile.slot<tensor<64x64xbf16>> if %24 : tensor<64x64xbf16>
    %s = tile.qk %27, %34 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    %stats_2, %acc_3, %carriedResults:3 = tile.kv_loop from %20 to %10 segment tail_boundary order descending iter_args(%stats, %acc, %s, %29, %33) : !tile.stats<128>, !tile.acc<128x64>, tensor<128x64xf32>, !tile.token, !tile.token -> !tile.stats<128>, !tile.acc<128x64>, tensor<128x64xf32>, !tile.token, !tile.token {
    ^bb0(%arg0: i32, %arg1: !tile.stats<128>, %arg2: !tile.acc<128x64>, %arg3: tensor<128x64xf32>, %arg4: !tile.token, %arg5: !tile.token):
      tile.wait %arg4, %arg5
      %35 = arith.subi %arg0, %c1_i32 : i32
      %36 = arith.subi %arg0, %c2_i32 : i32
      %37 = arith.cmpi sge, %35, %18 : i32
      %38 = arith.cmpi sge, %36, %18 : i32
      %39 = tile.slot %1[%36] : <tensor<64x64xbf16>, slots = 2>
      %40 = tile.copy_async k[%36] into %39 if %38 : <tensor<64x64xbf16>>
      %41 = tile.slot %2[%35] : <tensor<64x64xbf16>, slots = 2>
      %42 = tile.copy_async v[%35] into %41 if %37 : <tensor<64x64xbf16>>
      %43 = tile.slot %1[%35] : <tensor<64x64xbf16>, slots = 2>
      %44 = tile.load k[%35] from %43 : !tile.slot<tensor<64x64xbf16>> if %37 : tensor<64x64xbf16>
      %s_7 = tile.qk %27, %44 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %45 = tile.mask %arg3 : tensor<128x64xf32> {
      ^bb0(%arg6: i32, %arg7: i32, %arg8: i32, %arg9: i32):
        %49 = arith.addi %arg8, %3 : i32
        %50 = tile.dim seqlen_q
        %51 = arith.subi %49, %50 : i32
        %52 = arith.cmpi sle, %arg9, %51 : i32
        tile.yield %52 : i1
      }
      %p, %alpha, %new_stats = tile.softmax_update %45, %arg1 {fold_scale} : tensor<128x64xf32>, !tile.stats<128> -> tensor<128x64xbf16>, tensor<128xf32>
      %46 = tile.rescale %arg2, %alpha : !tile.acc<128x64>, tensor<128xf32>
      %47 = tile.slot %2[%arg0] : <tensor<64x64xbf16>, slots = 2>
      %48 = tile.load v[%arg0] from %47 : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
      %result = tile.pv %p, %48, %46 : tensor<128x64xbf16>, tensor<64x64xbf16>, !tile.acc<128x64>
      tile.yield %new_stats, %result, %s_7, %42, %40 : !tile.stats<128>, !tile.acc<128x64>, tensor<128x64xf32>, !tile.token, !tile.token
    }
    %stats_4, %acc_5, %carriedResults_6:3 = tile.kv_loop from %18 to %20 segment interior order descending iter_args(%stats_2, %acc_3, %carriedResults#0, %carriedResults#1, %carriedResults#2) : !tile.stats<128>, !tile.acc<128x64>, tensor<128x64xf32>, !tile.token, !tile.token -> !tile.stats<128>, !tile.acc<128x64>, tensor<128x64xf32>, !tile.token, !tile.token {
    ^bb0(%arg0: i32, %arg1: !tile.stats<128>, %arg2: !tile.acc<128x64>, %arg3: tensor<128x64xf32>, %arg4: !tile.token, %arg5: !tile.token):
      tile.wait %arg4, %arg5
      %35 = arith.subi %arg0, %c1_i32 : i32
      %36 = arith.subi %arg0, %c2_i32 : i32
      %37 = arith.cmpi sge, %35, %18 : i32
      %38 = arith.cmpi sge, %36, %18 : i32
      %39 = tile.slot %1[%36] : <tensor<64x64xbf16>, slots = 2>
      %40 = tile.copy_async k[%36] into %39 if %38 : <tensor<64x64xbf16>>
      %41 = tile.slot %2[%35] : <tensor<64x64xbf16>, slots = 2>
      %42 = tile.copy_async v[%35] into %41 if %37 : <tensor<64x64xbf16>>
      %43 = tile.slot %1[%35] : <tensor<64x64xbf16>, slots = 2>
      %44 = tile.load k[%35] from %43 : !tile.slot<tensor<64x64xbf16>> if %37 : tensor<64x64xbf16>
      %s_7 = tile.qk %27, %44 : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
      %p, %alpha, %new_stats = tile.softmax_update %arg3, %arg1 {fold_scale} : tensor<128x64xf32>, !tile.stats<128> -> tensor<128x64xbf16>, tensor<128xf32>
      %45 = tile.rescale %arg2, %alpha : !tile.acc<128x64>, tensor<128xf32>
      %46 = tile.slot %2[%arg0] : <tensor<64x64xbf16>, slots = 2>
      %47 = tile.load v[%arg0] from %46 : !tile.slot<tensor<64x64xbf16>> : tensor<64x64xbf16>
      %result = tile.pv %p, %47, %45 : tensor<128x64xbf16>, tensor<64x64xbf16>, !tile.acc<128x64>
      tile.yield %new_stats, %result, %s_7, %42, %40 : !tile.stats<128>, !tile.acc<128x64>, tensor<128x64xf32>, !tile.token, !tile.token
    }
    %o, %lse = tile.finalize %stats_4, %acc_5 : !tile.stats<128>, !tile.acc<128x64> -> tensor<128x64xf32>, tensor<128xf32>
    tile.store o %o through %21 : tensor<128x64xf32>, !tile.slot<tensor<128x64xbf16>>
    tile.store lse %lse : tensor<128xf32>
  }
}
