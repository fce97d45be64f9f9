/* CApiKvCache.h — the C ABI of attention over a KV cache (flash_attn_with_kvcache) on top of CApi.h. The call runs
 * the decode schedule's kernels (any number of query rows); see flashtile/runtime/KvCache.h for the semantics and
 * what is checked where. Returns 0 on success or -1 with a message in flashtile_last_error(). */
#ifndef FLASHTILE_RUNTIME_CAPIKVCACHE_H
#define FLASHTILE_RUNTIME_CAPIKVCACHE_H

#include "flashtile/runtime/CApi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One call over a KV cache in one self-contained struct; `size` must be sizeof(flashtile_kvcache_call). Zero the
 * struct first: fields left 0/NULL are "not used". Strides are in elements; a stride array of four zeros means the
 * packed layout of its tensor.
 *   q (B, seqlen_q, Hq, D), o (B, seqlen_q, Hq, Dv), lse fp32 (B, Hq, seqlen_q): as flashtile_forward.
 *   block_table NULL — contiguous caches: k_cache/v_cache (cache_batch, cache_seqlen, Hkv, D/Dv), strides {batch,
 *     seq, head, dim}; batch entry b reads cache row cache_batch_idx[b] (NULL: b).
 *   block_table set — paged caches: k_cache/v_cache (num_pages, page_size, Hkv, D/Dv), strides {page, row, head,
 *     dim}; block_table (B, block_table_stride) int32 (0: max_pages_per_seq), page_size 16, 32, 64, 128 or 256.
 *   cache_seqlens (B) int32: keys of each sequence in the cache before this call (NULL: all of them).
 *   k_new/v_new (B, seqlen_new, Hkv, D/Dv) or NULL: appended to the cache at cache_seqlens[b] by this call.
 *   *_host: optional host copies of cache_seqlens, cache_batch_idx, block_table whose values are checked.
 *   num_splits 0 (the runtime's choice) or 1..128; workspace as flashtile_forward_decode's.
 *   rotary_*: rotary embedding of q and k_new (KvCache.h's KvCacheArgs::rotaryDim and what it checks).
 * Device values are clamped, never trusted (see KvCache.h): a bad one gives wrong numbers, not a bad access, and the
 * kernels record the first one; flashtile_check_errors (CApi.h) reports it with the call that read it. */
typedef struct flashtile_kvcache_call {
  unsigned long long size;
  const void *q, *k_cache, *v_cache;
  void *o;
  float *lse;
  const void *k_new, *v_new;
  const int *cache_seqlens, *cache_batch_idx, *block_table;
  const int *cache_seqlens_host, *cache_batch_idx_host, *block_table_host;
  void *workspace;
  void *stream;                                  /* a CUstream; NULL: the default stream */
  const void *inputs[FLASHTILE_CALL_MAX_INPUTS]; /* the variant's num_inputs device arrays */
  const char *variant;                           /* NULL: "none" */
  const char *schedule;                          /* NULL or "": the runtime's choice (flashtile_call's schedule) */
  unsigned long long workspace_bytes;
  long long q_stride[4], o_stride[4], k_cache_stride[4], v_cache_stride[4], k_new_stride[4], v_new_stride[4];
  long long block_table_stride;
  int dtype, batch, seqlen_q, heads_q, heads_kv, head_dim, head_dim_v;
  int cache_batch, cache_seqlen;                /* contiguous caches */
  int num_pages, page_size, max_pages_per_seq; /* paged caches */
  int seqlen_new;
  int num_splits;
  int num_params, num_inputs;
  int strict_schedule;                     /* non-zero: strict schedule mode for this call */
  float softmax_scale;                     /* 0: 1/sqrt(head_dim) */
  float params[FLASHTILE_CALL_MAX_PARAMS]; /* the variant's num_params numbers */
  /* Rotary embedding of q and k_new (flash_attn_with_kvcache's rotary_cos/rotary_sin; needs k_new/v_new):
   * rotary_dim 0 (none) or even, at most head_dim; rotary_cos/rotary_sin (seqlen_ro, rotary_dim / 2) of dtype;
   * rotary_interleaved 1: pairs (2i, 2i + 1), 0: (i, i + rotary_dim / 2). */
  const void *rotary_cos, *rotary_sin;
  int rotary_dim, seqlen_ro, rotary_interleaved;
  /* An e4m3 KV cache (docs/fp8.md; flash_attn_with_kvcache with flash-attn 3's descales): cache_dtype FLASHTILE_E4M3
   * (2) makes k_cache/v_cache float8_e4m3fn while q, o, k_new, v_new and the rotary tables stay of dtype
   * (FLASHTILE_BF16 or FLASHTILE_F16); 0 or dtype's own code: the caches hold dtype. k_descale/v_descale: NULL (= 1)
   * or device fp32 (B, heads_kv), contiguous: the cache's value of (b, h) is its e4m3 value times k_descale[b][h]
   * (v_descale[b][h] for v), and k_new/v_new are written as e4m3(value / descale). The caches' strides are then
   * multiples of 16 elements. Descales with a 16-bit cache are refused. */
  int cache_dtype;
  const float *k_descale, *v_descale;
} flashtile_kvcache_call;

int flashtile_forward_kvcache(flashtile_runtime *rt, const flashtile_kvcache_call *call);

/* Which kernel flashtile_forward_kvcache(rt, call) runs, and why: flashtile_explain's text (CApi.h) for a KV-cache
 * call, whose entry names the cache's kernels (`..._kvcache`, `..._kvcache_e4m3` for an e4m3 cache). `arch` NULL:
 * this thread's GPU; else "sm_80", "sm_90a" or "sm_100a". Nothing runs; a call that would fail fails here. */
int flashtile_explain_kvcache(flashtile_runtime *rt, const flashtile_kvcache_call *call, const char *arch, char *buffer,
                              unsigned long long size);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_RUNTIME_CAPIKVCACHE_H */
