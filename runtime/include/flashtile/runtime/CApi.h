/* CApi.h — a C ABI over flashtile::Runtime, for ctypes/cffi callers (the benchmark harness, a future PyTorch
 * module). Every call returns 0 on success or -1 with a message in flashtile_last_error() (per thread). */
#ifndef FLASHTILE_RUNTIME_CAPI_H
#define FLASHTILE_RUNTIME_CAPI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flashtile_runtime flashtile_runtime;

/* Element types of q, k and v. FLASHTILE_E4M3 is float8_e4m3fn (docs/fp8.md): o is bf16 then, descales come through
 * flashtile_call's q_descale/k_descale/v_descale (the other entry points pass none: 1), and there is no backward.
 * e5m2 has no code: it is not supported. */
enum { FLASHTILE_F16 = 0, FLASHTILE_BF16 = 1, FLASHTILE_E4M3 = 2 };

/* A runtime with its kernel cache configured from the environment; NULL on failure. */
flashtile_runtime *flashtile_create(void);
void flashtile_destroy(flashtile_runtime *rt);
/* Adds the kernels `flashtile aot` wrote to `dir`. */
int flashtile_load_aot(flashtile_runtime *rt, const char *dir);
/* The schedule calls that name none run. Initially none is forced (unless FLASHTILE_SCHEDULE is set): each call runs
 * the fastest schedule with a kernel for it, as the schedules' dispatch rules order them (fa3 on sm_90a, decode for
 * decode-sized calls, fa2 elsewhere). A name forces that schedule ("fa3": sm_90a, TMA, wgmma, warp specialization;
 * "fa1": the teaching schedule); "" returns to the rules; decode-sized calls keep the schedules made for them. A
 * forced schedule without a kernel for a call falls back to the rules' order with one log line (strict mode: an
 * error). A name that is not an id is an error. */
int flashtile_set_schedule(flashtile_runtime *rt, const char *schedule);
/* Strict schedule mode (Runtime::setStrictSchedule): `strict` non-zero makes a call whose first schedule (forced, or
 * preferred by the rules) has no kernel for it fail, naming the schedule and the reason, instead of falling back.
 * Initially on when FLASHTILE_STRICT_SCHEDULE is set to anything but "" or "0". */
int flashtile_set_strict_schedule(flashtile_runtime *rt, int strict);
/* Attention forward (flash_attn_func layout): q B x Sq x Hq x D, k B x Sk x Hkv x D, v B x Sk x Hkv x Dv, o
 * B x Sq x Hq x Dv (head_dim_v: Dv, 0 = head_dim). Strides are in elements, {batch, seq, head, dim}; lse is fp32
 * B x Hq x Sq. softmax_scale 0 selects 1/sqrt(head_dim). `stream` is a CUstream (NULL: the default stream). */
int flashtile_forward(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                      int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                      int head_dim_v, const long long *q_stride, const long long *k_stride, const long long *v_stride,
                      const long long *o_stride, float softmax_scale, const char *variant, void *stream);
/* A variant's numbers and input arrays. params: num_params floats in the variant's declaration order (e.g.
 * "sliding_window": left, right; "softcap": cap). inputs: num_inputs device pointers in declaration order, each to
 * elements of the type the variant declares, which C cannot check: fp32 for ALiBi slopes (shape (H) for "alibi",
 * (B, H) for "alibi_per_batch") and for sinks ((H), "sinks"); int32 for document starts ((B, Sk), "document_mask";
 * with packed sequences (total_k), one per key row, positions within each sequence).
 * The kernel does not know an input's length either: it reads what the variant's index rule says. */
typedef struct flashtile_variant_args {
  const float *params;
  int num_params;
  const void *const *inputs;
  int num_inputs;
} flashtile_variant_args;
/* flashtile_forward for variants with numbers or inputs; `variant_args` NULL means none. */
int flashtile_forward_variant(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                              int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                              int head_dim_v, const long long *q_stride, const long long *k_stride,
                              const long long *v_stride, const long long *o_stride, float softmax_scale,
                              const char *variant, const flashtile_variant_args *variant_args, void *stream);
/* Attention forward over packed sequences (flash_attn_varlen_func layout): q total_q x Hq x D, k total_k x Hkv x D,
 * v total_k x Hkv x Dv, o total_q x Hq x Dv, lse fp32 Hq x total_q (head_dim_v: Dv, 0 = head_dim); cu_seqlens_q/k
 * are device pointers to batch + 1 int32 offsets. Strides are {seq, head, dim} in elements. Sequence b is rows
 * [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q/o and [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k/v; masks such as
 * causal align to each sequence's own lengths. */
int flashtile_forward_varlen(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                             const int *cu_seqlens_q, const int *cu_seqlens_k, int dtype, int batch, int total_q,
                             int total_k, int max_seqlen_q, int max_seqlen_k, int heads_q, int heads_kv, int head_dim,
                             int head_dim_v, const long long *q_stride, const long long *k_stride,
                             const long long *v_stride, const long long *o_stride, float softmax_scale,
                             const char *variant, void *stream);
/* flashtile_forward_varlen for variants with numbers or inputs; `variant_args` NULL means none. */
int flashtile_forward_varlen_variant(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o,
                                     float *lse, const int *cu_seqlens_q, const int *cu_seqlens_k, int dtype, int batch,
                                     int total_q, int total_k, int max_seqlen_q, int max_seqlen_k, int heads_q,
                                     int heads_kv, int head_dim, int head_dim_v, const long long *q_stride,
                                     const long long *k_stride, const long long *v_stride, const long long *o_stride,
                                     float softmax_scale, const char *variant,
                                     const flashtile_variant_args *variant_args, void *stream);

/* The most numbers and input arrays a variant has (KernelAbi.h's FLASHTILE_MAX_VARIANT_PARAMS/_INPUTS). */
enum { FLASHTILE_CALL_MAX_PARAMS = 8, FLASHTILE_CALL_MAX_INPUTS = 4 };

/* Where a call sits in a larger problem it is one block of (context parallelism, a sequence split across GPUs:
 * flashtile.parallel, docs/parallel.md; flashtile::BlockPositions). The call runs kernels compiled with position
 * offsets: the variant's hooks and KV-range rules see the larger problem's coordinates and sizes, while loads, stores
 * and the tile walk stay in the call's own rows. Query row i is q_offset + i (varlen: q_offsets[b] + i of sequence
 * b), key j is k_offset + j (k_offsets[b] + j), query head h is head_offset + h; the hooks' sizes are seqlen_q_global
 * and seqlen_k_global (varlen: each sequence's of cu_seqlens_q_global / cu_seqlens_k_global), heads_q_global and
 * heads_kv_global. 0 and NULL: the call's own. Offsets are >= 0, the call's rows (keys) inside the larger problem's,
 * its heads whole groups of heads_q / heads_kv; dense calls use the dense fields only, varlen calls the arrays only
 * (device int32, 4-byte aligned: q_offsets and k_offsets batch values, the cu_seqlens batch + 1). KV-cache calls take
 * none. */
typedef struct flashtile_positions {
  int q_offset, k_offset;                               /* dense */
  int seqlen_q_global, seqlen_k_global;                 /* dense; 0: seqlen_q, seqlen_k */
  const int *q_offsets, *k_offsets;                     /* varlen; NULL: 0 */
  const int *cu_seqlens_q_global, *cu_seqlens_k_global; /* varlen; NULL: cu_seqlens_q, cu_seqlens_k */
  int head_offset, heads_q_global, heads_kv_global;     /* 0: heads_q, heads_kv */
} flashtile_positions;

/* One forward call in one self-contained struct: the arguments of flashtile_forward_variant (dense: cu_seqlens_q
 * and cu_seqlens_k NULL, seqlen_q/k the rows of every sequence, strides {batch, seq, head, dim}) or of
 * flashtile_forward_varlen_variant (both set, seqlen_q/k = total_q/total_k, max_seqlen_q/k the longest sequences,
 * stride[0] ignored). A caller that repeats one call shape fills it once, copies it per call and changes only the
 * pointers and the stream (the pointers come first, so that they are contiguous); every field is checked at every
 * call as the other entry points check theirs. `size` must be sizeof(flashtile_call). */
typedef struct flashtile_call {
  unsigned long long size;
  const void *q, *k, *v;
  void *o;
  float *lse;
  const int *cu_seqlens_q, *cu_seqlens_k;
  void *stream;                                  /* a CUstream; NULL: the default stream */
  const void *inputs[FLASHTILE_CALL_MAX_INPUTS]; /* num_inputs device pointers (flashtile_variant_args) */
  const char *variant;                           /* NULL: "none" */
  const char *schedule; /* NULL or "": the runtime's choice; a name: that schedule (as flashtile_set_schedule's) */
  long long q_stride[4], k_stride[4], v_stride[4], o_stride[4];
  int dtype, batch, seqlen_q, seqlen_k, max_seqlen_q, max_seqlen_k, heads_q, heads_kv, head_dim, head_dim_v;
  int num_params, num_inputs;
  int strict_schedule;                     /* non-zero: strict schedule mode for this call */
  float softmax_scale;                     /* 0: 1/sqrt(head_dim) */
  float params[FLASHTILE_CALL_MAX_PARAMS]; /* num_params numbers (flashtile_variant_args) */
  /* FP8 descales (dtype FLASHTILE_E4M3 only; flash-attn 3's q_descale, k_descale, v_descale): NULL (= 1) or a device
   * pointer to batch x heads_kv contiguous fp32 values. q_descale·k_descale scales the scores (inside the softmax
   * scale), v_descale the output. With another dtype all three must be NULL. */
  const float *q_descale, *k_descale, *v_descale;
  /* A block of a larger problem (flashtile_positions, read during the call only): NULL for a plain call. A backward
   * call's forward.positions places its gradients' block as it placed the forward's. */
  const flashtile_positions *positions;
  /* The call's scratch memory (its plan's workspaces: e4m3's transposed V, split-KV's partials, fa1's K/V-step state):
   * NULL lets the runtime own it; under CUDA graph capture pass one of workspace_bytes >=
   * flashtile_forward_workspace_size's (an error names the size needed). 4-byte aligned. A backward call's
   * forward.workspace is ignored (its own is flashtile_bwd_call.workspace). */
  void *workspace;
  unsigned long long workspace_bytes;
} flashtile_call;
int flashtile_forward_call(flashtile_runtime *rt, const flashtile_call *call);
/* The bytes of workspace flashtile_forward_call(rt, call) needs (0: none) into *bytes, for a caller that allocates it
 * (needed under CUDA graph capture). The kernel is selected or built and loaded as the call would; nothing runs.
 * call->workspace is ignored. */
int flashtile_forward_workspace_size(flashtile_runtime *rt, const flashtile_call *call, unsigned long long *bytes);

/* Which kernel flashtile_forward_call(rt, call) runs, and why, as text of `key=value` lines: schedule, entry, source
 * (aot or jit), order (the schedules tried, comma-separated), forced_by (what named the first, empty: nothing),
 * fell_back (0 or 1), reason (one line). `arch` NULL: this thread's GPU; else "sm_80", "sm_90a" or "sm_100a" (no GPU
 * needed). The kernel is found as the call would find it (the JIT builds what the caches lack); nothing runs. The
 * text and its NUL fit `size` bytes of `buffer`, or -1 names the size needed; a call that would fail fails here. */
int flashtile_explain(flashtile_runtime *rt, const flashtile_call *call, const char *arch, char *buffer,
                      unsigned long long size);

/* One attention backward call (flashtile::Runtime::backward): the gradients of the forward call `forward` given
 * d_o, the gradient of its output. `forward` is the flashtile_call of the forward as it was made (its o and lse are
 * the forward's results, read here; its stream is the one the backward runs on; its schedule and strict_schedule
 * name the backward's schedule as they name the forward's). d_o has o's shape and d_q, d_k, d_v q's, k's and v's,
 * each with its own strides ({batch, seq, head, dim} in elements, as the forward's). input_grads[i]: NULL (not
 * wanted) or a device fp32 array shaped as the variant's input i, overwritten where a (batch, head) reads it (the
 * rest is left as it is); int32 inputs have none.
 * deterministic: non-zero for bitwise reproducible gradients (accumulations in a fixed order); 0 for atomics in
 * arrival order. workspace: NULL lets the runtime own the backward's scratch memory; under CUDA graph capture pass
 * one of workspace_bytes (an error names the size needed). `size` must be sizeof(flashtile_bwd_call). */
typedef struct flashtile_bwd_call {
  unsigned long long size;
  flashtile_call forward;
  const void *d_o;
  void *d_q, *d_k, *d_v;
  float *input_grads[FLASHTILE_CALL_MAX_INPUTS];
  void *workspace;
  unsigned long long workspace_bytes;
  long long d_o_stride[4], d_q_stride[4], d_k_stride[4], d_v_stride[4];
  int deterministic;
} flashtile_bwd_call;
int flashtile_backward_call(flashtile_runtime *rt, const flashtile_bwd_call *call);
/* The bytes of workspace flashtile_backward_call(rt, call) needs (0: none) into *bytes, for a caller that allocates
 * it (under CUDA graph capture: with its own allocator, outside the capture or from the capture's pool). The kernel
 * is selected or built as the call would; nothing runs. call->workspace is ignored. */
int flashtile_backward_workspace_size(flashtile_runtime *rt, const flashtile_bwd_call *call, unsigned long long *bytes);

/* Reads back the device error records of the KV-cache calls this runtime made (Runtime::checkErrors): their kernels
 * clamp every out-of-range cache_seqlens, cache_batch_idx or block_table value and record the first one. Synchronizes
 * each GPU context the runtime ran such calls in; returns 0 when nothing was recorded, else -1 with a message naming
 * the call (its number, kernel, sizes, stream), the argument (e.g. `block_table[1][7] = 1048576`) and the accepted
 * range, and zeroes the record. A call that synchronizes anyway (FLASHTILE_CHECK_KVCACHE=1) reports it too. */
int flashtile_check_errors(flashtile_runtime *rt);

const char *flashtile_last_error(void);
const char *flashtile_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_RUNTIME_CAPI_H */
