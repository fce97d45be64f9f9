// RUN: flashtile-opt %s --tile-verify-program --canonicalize --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-lower-to-target=arch=sm_90a --canonicalize --cse --tile-emit-cuda -o /dev/null | FileCheck %s
// RUN: not flashtile-opt %s --tile-emit-cuda -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNSCHEDULED
// RUN: not flashtile-opt %s --tile-apply-schedule --tile-split-boundary --tile-pipeline-copies --tile-emit-cuda -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOTARGET

// The kernel parameters are KernelAbi.h verbatim; the prelude holds the instruction wrappers.
// CHECK: struct FlashtileFwdParams {
// CHECK: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK: cp.async.cg.shared.global [%0], [%1], 16, %2;

// The variant's mask region, printed once as a function.
// CHECK-LABEL: __device__ __forceinline__ bool keep(int b, int h, int q, int kv, const FlashtileSequence &p) {
// CHECK-NEXT:    return kv <= (q + (p.seqlenK - p.seqlenQ));
// CHECK-NEXT:  }

// CHECK-LABEL: extern "C" __global__ void __launch_bounds__(128) flashtile_fa2_causal_bf16_d64(const FlashtileFwdParams params) {
// CHECK:         constexpr int kBlockM = 128;
// CHECK:         constexpr int kBlockN = 64;
// CHECK:         constexpr int kWarps = 4;

// The block's tile: Q tiles heaviest (last) first across the grid, in groups of (batch, head) pairs of >= 512 blocks.
// CHECK:         const int blockLinear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
// CHECK:         const int groupPairs = min(pairs, (512 + qTiles - 1) / qTiles);
// CHECK:         const int qTile = qTiles - 1 - inGroup / groupSize;
// CHECK-NEXT:    const int pair = groupFirst + inGroup % groupSize;
// CHECK-NEXT:    const int blockBatch = pair / gridDim.y, blockHead = pair % gridDim.y;

// The block's sequence: a batch entry, or (varlen) packed rows from cu_seqlens; p is its view, seqlens included.
// CHECK:         FlashtileSequence p{params, blockBatch * params.seqlenK, 1.f / params.softmaxScale};
// CHECK-NEXT:    if (params.cuSeqlensQ) {
// CHECK:           const int qBegin = min(max(params.cuSeqlensQ[z], 0), params.seqlenQ);
// CHECK:           p.q = static_cast<const unsigned short *>(params.q) + qBegin * params.qRowStride;
// CHECK:           p.seqlenQ = qEnd - qBegin;
// CHECK-NEXT:      p.seqlenK = kEnd - kBegin;
// CHECK-NEXT:      p.keyOffset = kBegin;
// CHECK-NEXT:    }
// CHECK-NEXT:    if (qTile * kBlockM >= p.seqlenQ)
// CHECK-NEXT:      return;
// CHECK:         extern __shared__ __align__(128) unsigned char smem[];

// The KV-range rules, evaluated for this block's rows.
// CHECK:         const int qLast = min(qFirst + kBlockM, p.seqlenQ) - 1;
// CHECK:         const int mayHi = (qLast + (p.seqlenK - p.seqlenQ)) + 1;
// CHECK:         const int fullHi = (qFirst + (p.seqlenK - p.seqlenQ)) + 1;

// Prologue: Q and the first K tile in flight, Q waited for.
// CHECK:         copyQ();
// CHECK-NEXT:    sm80::cpAsyncCommit();
// CHECK:         if (hasFirstTile)
// CHECK-NEXT:      copyKTile(firstTile);
// CHECK-NEXT:    sm80::cpAsyncCommit();
// CHECK:         sm80::cpAsyncWait<1>();
// CHECK-NEXT:    __syncthreads();

// The tail boundary segment, walked from the last tile down, is masked.
// CHECK:         // ---- K/V tiles [tailBoundaryBegin, tailBoundaryEnd): tail boundary segment, masked, walked descending ----
// CHECK-NEXT:    for (int j = tailBoundaryEnd - 1; j >= tailBoundaryBegin; --j) {
// CHECK:           copyVTile(j);
// CHECK:           sm80::mmaBf16(score[mt][2 * np], qFrag[mt][ks], kFrag[0], kFrag[1]);
// CHECK:           if ((kv >= p.seqlenK) || !keep(b, h, q, kv, p))
// CHECK:           const float scoreScale = p.scaleLog2;
// CHECK:           sm80::mmaBf16(acc[mt][2 * np], prob[mt][k], vFrag[0], vFrag[1]);

// The interior segment continues the walk without the mask.
// CHECK:         // ---- K/V tiles [interiorBegin, tailBoundaryBegin): interior segment, no mask, walked descending ----
// CHECK-NEXT:    for (int j = tailBoundaryBegin - 1; j >= interiorBegin; --j) {
// CHECK-NOT:       keep(
// CHECK:         // ---- finalize
// CHECK:         float *const gLse = p.lse + b * p.lseBatchStride + h * p.lseHeadStride;
// CHECK:         gLse[q] = lse[mt][r];

// UNSCHEDULED: error: 'tile.func' op is not scheduled; run the schedule's passes
// NOTARGET: error: 'tile.func' op has no #tile.target; run tile-lower-to-target before emitting CUDA

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
