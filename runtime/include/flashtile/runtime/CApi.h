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
/* Attention forward (flash_attn_func layout). Strides are in elements, {batch, seq, head, dim}; lse is fp32
 * B x Hq x Sq. softmax_scale 0 selects 1/sqrt(head_dim). `stream` is a CUstream (NULL: the default stream). */
int flashtile_forward(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                      int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                      const long long *q_stride, const long long *k_stride, const long long *v_stride,
                      const long long *o_stride, float softmax_scale, const char *variant, void *stream);
const char *flashtile_last_error(void);
const char *flashtile_version(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_RUNTIME_CAPI_H */
