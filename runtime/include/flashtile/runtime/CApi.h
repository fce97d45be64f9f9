/* CApi.h — a C ABI over flashtile::Runtime, for ctypes/cffi callers (the benchmark harness, a future PyTorch
 * module). Every call returns 0 on success or -1 with a message in flashtile_last_error() (per thread). */
#ifndef FLASHTILE_RUNTIME_CAPI_H
#define FLASHTILE_RUNTIME_CAPI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flashtile_runtime flashtile_runtime;

enum { FLASHTILE_F16 = 0, FLASHTILE_BF16 = 1 };

/* A runtime with its kernel cache configured from the environment; NULL on failure. */
flashtile_runtime *flashtile_create(void);
void flashtile_destroy(flashtile_runtime *rt);
/* Adds the kernels `flashtile aot` wrote to `dir`. */
int flashtile_load_aot(flashtile_runtime *rt, const char *dir);
/* The schedule whose kernels calls run: "fa2" (the default), "fa3" (sm_90a: TMA, wgmma, warp specialization), "fa1"
 * (the teaching schedule: one launch per K/V tile, each row's state in a workspace between them);
 * decode-sized calls keep the decode schedule where a kernel of it is loaded. A name that is not an id is an error;
 * a schedule none of the loaded kernels has makes a call fail naming the kernel it looked for. */
int flashtile_set_schedule(flashtile_runtime *rt, const char *schedule);
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
  long long q_stride[4], k_stride[4], v_stride[4], o_stride[4];
  int dtype, batch, seqlen_q, seqlen_k, max_seqlen_q, max_seqlen_k, heads_q, heads_kv, head_dim, head_dim_v;
  int num_params, num_inputs;
  float softmax_scale;                     /* 0: 1/sqrt(head_dim) */
  float params[FLASHTILE_CALL_MAX_PARAMS]; /* num_params numbers (flashtile_variant_args) */
} flashtile_call;
int flashtile_forward_call(flashtile_runtime *rt, const flashtile_call *call);

const char *flashtile_last_error(void);
const char *flashtile_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_RUNTIME_CAPI_H */
