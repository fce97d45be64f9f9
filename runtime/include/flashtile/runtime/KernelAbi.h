/* KernelAbi.h — the one struct every generated kernel takes by value (forward and backward programs alike).
 *
 * This header is shared verbatim by the host runtime and by the generated CUDA (codegen embeds its text at build
 * time), so it must compile both as host C++ and under NVRTC: no includes, fixed-width types only.
 * Strides are in elements. Layout of Q/K/V/O is B x S x H x D (flash_attn_func); the last dim is contiguous.
 * LSE is fp32: B x Hq x Sq, or Hq x total_q in varlen mode (flash-attn 2.x varlen's layout).
 * Varlen (flash_attn_varlen_func) when cuSeqlensQ is non-null: Q/O are total_q x H x D and K/V total_k x H x D,
 * packed sequences; seqlenQ/seqlenK are total_q/total_k and every batch stride is 0 (kernels offset each sequence's
 * base pointers and keep the batch terms: fields they leave alone stay kernel-argument reads, not registers).
 */
#ifndef FLASHTILE_RUNTIME_KERNELABI_H
#define FLASHTILE_RUNTIME_KERNELABI_H

#define FLASHTILE_MAX_VARIANT_PARAMS 8
#define FLASHTILE_MAX_VARIANT_INPUTS 4

/* The KV cache's device error record (FlashtileFwdParams::kvErrors). Kernels clamp every cacheSeqlens,
 * cacheBatchIdx and blockTable value they read into range; the first one that was out of range is also written here,
 * for the runtime to report (Runtime::checkErrors). The first kernel to meet one claims the record (argument 0 ->
 * FLASHTILE_KV_ERROR_CLAIMED), writes the other fields, then publishes the argument's code; later values leave it
 * alone until the runtime reads it and zeroes it again. */
#define FLASHTILE_KV_ERROR_CLAIMED (-1)
#define FLASHTILE_KV_ERROR_CACHE_SEQLENS 1    /* argument: cacheSeqlens[row] */
#define FLASHTILE_KV_ERROR_CACHE_BATCH_IDX 2  /* argument: cacheBatchIdx[row] */
#define FLASHTILE_KV_ERROR_BLOCK_TABLE 3      /* argument: blockTable[row][column] */
#define FLASHTILE_KV_ERROR_IN_APPEND 1        /* kernel: the append kernel (`<entry>_append`) */
#define FLASHTILE_KV_ERROR_IN_ATTENTION 2     /* kernel: the attention kernel */

struct FlashtileKvError {
  int argument; /* 0: none; FLASHTILE_KV_ERROR_CLAIMED: being written; else FLASHTILE_KV_ERROR_CACHE_SEQLENS ... */
  int call;     /* the kvCall of the call whose kernel read it */
  int kernel;   /* FLASHTILE_KV_ERROR_IN_APPEND or FLASHTILE_KV_ERROR_IN_ATTENTION */
  int row;      /* the batch entry b */
  int column;   /* blockTable: the entry of row b (key / pageSize); -1 for the others */
  int value;    /* what the array held */
  int last;     /* the largest value accepted there (the least is 0) */
  int reserved;
};

struct FlashtileFwdParams {
  const void *q;
  const void *k;
  const void *v;
  void *o;
  float *lse;
  long long qBatchStride, qRowStride, qHeadStride;
  long long kBatchStride, kRowStride, kHeadStride;
  long long vBatchStride, vRowStride, vHeadStride;
  long long oBatchStride, oRowStride, oHeadStride;
  long long lseBatchStride, lseHeadStride; /* LSE of (b, h, row i): lse[b * lseBatchStride + h * lseHeadStride + i] */
  /* Varlen: null (dense) or batch + 1 int32 offsets each, both or neither. Sequence b is rows
   * [cuSeqlensQ[b], cuSeqlensQ[b + 1]) of Q/O (and of LSE's rows) and [cuSeqlensK[b], cuSeqlensK[b + 1]) of K/V. */
  const int *cuSeqlensQ;
  const int *cuSeqlensK;
  int batch;
  int headsQ;
  int headsKv; /* headsQ % headsKv == 0; query head h reads K/V head h / (headsQ / headsKv) */
  int seqlenQ;
  int seqlenK;
  float softmaxScale;
  float scaleLog2;                                   /* softmaxScale * log2(e): scores are exponentiated with exp2 */
  float variantParams[FLASHTILE_MAX_VARIANT_PARAMS]; /* a variant's numbers, in declaration order */
  /* A variant's extra input arrays (tile.input), in declaration order, of the element type each declares (f32 or
   * int32). The kernel does not know their lengths: the variant's index rule defines each one's shape. */
  const void *inputs[FLASHTILE_MAX_VARIANT_INPUTS];
  /* Split-KV (kernels of the decode schedule; others ignore these fields). The keys of each (sequence, head, Q
   * tile) are split into numSplits ranges of whole K/V tiles, one per thread block (grid.x = Q tiles x numSplits,
   * the split fastest). numSplits = 1: blocks write O and LSE themselves. numSplits > 1: split s writes the fp32 O
   * and LSE of LSE row r (r = b * lseBatchStride + h * lseHeadStride + i, as `lse` is indexed, varlen rows
   * included) to oAccum[(s * accumSplitStride + r) * headDimV + d] and lseAccum[s * accumSplitStride + r], and
   * the combine kernel merges them into O and LSE. accumSplitStride is the number of LSE rows (B * Hq * Sq dense,
   * Hq * total_q varlen). */
  float *oAccum;
  float *lseAccum;
  long long accumSplitStride;
  int numSplits;
  /* KV cache (flash_attn_with_kvcache; kernels of the decode schedule, others ignore these fields). kvCache 0: K/V
   * are plain tensors. 1 (contiguous): K/V are caches of cacheBatches rows of cacheCapacity keys, row
   * cacheBatchIdx[b] (b when null, clamped to [0, cacheBatches)) at k + row * kCacheBatchStride. 2 (paged): K/V are
   * pools of cacheBatches pages of 2^pageShift keys, page i at k + i * kCacheBatchStride; key row r of sequence b is
   * row r % pageSize of page blockTable[b * blockTableStride + r / pageSize] (clamped to [0, cacheBatches)), and a
   * sequence holds at most cacheCapacity keys (max pages per sequence x page size). Either way kBatchStride and
   * vBatchStride are 0, and sequence b has min(max(cacheSeqlens[b], 0), cacheCapacity - seqlenNew) + seqlenNew keys
   * (cacheCapacity when cacheSeqlens is null): when kNew/vNew are set, B x seqlenNew x Hkv x D rows that the append
   * kernel (`<entry>_append`, before the attention kernel) wrote at rows cacheSeqlens[b]... of its cache. */
  int kvCache;
  int cacheBatches;
  int cacheCapacity;
  int pageShift;
  long long kCacheBatchStride, vCacheBatchStride;
  const int *cacheSeqlens;
  const int *cacheBatchIdx;
  const int *blockTable;
  long long blockTableStride;
  const void *kNew;
  const void *vNew;
  long long kNewBatchStride, kNewRowStride, kNewHeadStride;
  long long vNewBatchStride, vNewRowStride, vNewHeadStride;
  int seqlenNew;
  /* The error record (FlashtileKvError above) the kernels report the first out-of-range cacheSeqlens, cacheBatchIdx or
   * blockTable value to, or null (they clamp either way), and the number of this call, which goes into it. The
   * runtime owns the record, one per context (a launch-plan workspace with errorRecord set, LaunchPlan.h). */
  struct FlashtileKvError *kvErrors;
  int kvCall;
  /* Persistent kernels (their plan sets qTiles, LaunchPlan.h): the grid is about one block per SM, and block x runs
   * units x, x + gridDim.x, ... of the ceil(qTiles / 2) x headsQ x batch units of two Q tiles (qTiles - 1 - k, then k)
   * of one (head, sequence), qTiles = ceil(rows / blockM) with rows seqlenQ dense and the longest sequence's varlen.
   * Other kernels ignore it (their grid is the tiles). */
  int qTiles;
  /* Rotary embedding (flash_attn_with_kvcache's rotary_cos/rotary_sin; kernels whose Q load carries tile.rotary,
   * others ignore these fields): rotaryCos and rotarySin are seqlenRo x rotaryDim / 2 tables of the kernel's dtype
   * (packed rows); rotaryDim is even, 2 to the head dim. Sequence b's query rows are rotated at positions from
   * c = (its keys) - seqlenNew (cacheSeqlens[b] in a cache call), and the append kernel rotates new key row i at
   * c + i; a position past the tables reads their last row. */
  const void *rotaryCos;
  const void *rotarySin;
  int rotaryDim;
  int seqlenRo;
  /* K/V-step kernels (a plan that repeats its launch over kvStep; the fa1 schedule, others ignore these fields): the
   * kernel is launched once per K/V tile, kvStep = 0 .. ceil(seqlenK / blockN) - 1 (varlen: of the longest sequence;
   * one launch when there is no key), and each launch runs every Q tile against K/V tile kvStep only. Between launches
   * the online-softmax state of LSE row r (r as `lse` is indexed, varlen rows included) is fp32 workspace: running max
   * stateMax[r] (log2 domain), running sum stateSum[r], unnormalized output stateAcc[r * headDimV + d]. Launch 0
   * reads no state; every launch writes it back, and O and LSE of the keys seen so far. */
  float *stateAcc;
  float *stateMax;
  float *stateSum;
  int kvStep;
  /* Persistent kernels of the dynamic scheduler (a plan whose zeroed workspace binds tileCounter; others ignore it):
   * one int, zero at the launch's start, that the blocks' producers atomically increment to take units u = 0, 1, ... of
   * one Q tile each: Q tile qTiles - 1 - u / (headsQ * batch) of (batch, head) pair u % (headsQ * batch), query head
   * fastest. */
  int *tileCounter;
  /* Backward (modules of kind "backward": the plan runs their preprocess, main and postprocess kernels; forward
   * kernels ignore these fields). q, k, v, o, lse and their strides above are the forward call's: o and lse are its
   * results, which the backward reads. dO has O's shape, dQ Q's, dK K's and dV V's, each with its own strides (batch
   * strides 0 in varlen mode, as above); the kernels write dQ, dK and dV in the call's dtype. */
  const void *dO;
  void *dQ;
  void *dK;
  void *dV;
  long long dOBatchStride, dORowStride, dOHeadStride;
  long long dQBatchStride, dQRowStride, dQHeadStride;
  long long dKBatchStride, dKRowStride, dKHeadStride;
  long long dVBatchStride, dVRowStride, dVHeadStride;
  /* Gradients of the variant's fp32 inputs, in the order of `inputs` and shaped as each one: fp32, overwritten by
   * the call. Null: not wanted (and always null for int32 inputs). */
  float *inputGrads[FLASHTILE_MAX_VARIANT_INPUTS];
  /* 1: every accumulation (dQ, dK/dV over a GQA group, input gradients) in a fixed order, so results are bitwise
   * identical across runs; 0: atomics in arrival order. */
  int deterministic;
  /* Workspaces the backward's plan binds; their layouts are the schedule's and its plan's (docs/backward.md).
   * delta: fp32 rowsum(dO * O), one per LSE row, indexed as lse. dqAccum: fp32 dQ accumulator, headDim per LSE row.
   * dkAccum/dvAccum: fp32 partial dK/dV where a GQA group's heads are summed. semaphores: int32 counters that order
   * the deterministic mode's accumulations. */
  float *delta;
  float *dqAccum;
  float *dkAccum;
  float *dvAccum;
  int *semaphores;
  /* The backward's tile counts per (batch entry, query head): kvTiles = ceil(keys / blockN) (the main kernel's
   * grid.x; varlen: of the longest sequence), and qTiles above = ceil(rows / blockM) (the preprocess kernel's). */
  int kvTiles;
  /* Gradients of the variant's f32 inputs: each program instance's share (one fp32 number per input read, per batch
   * entry, query head and tile), summed in a fixed order by the `<entry>_input_grads` kernel (docs/backward.md). */
  float *inputGradPartials;
};

/* Threads of a block of the KV cache's append kernel: grid (ceil(seqlenNew x (headDim + headDimV) / 8 /
 * FLASHTILE_APPEND_THREADS), headsKv, batch), one 16-byte chunk of a new K or V row a thread. */
#define FLASHTILE_APPEND_THREADS 128

#endif /* FLASHTILE_RUNTIME_KERNELABI_H */
