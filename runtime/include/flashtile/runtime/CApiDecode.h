/* CApiDecode.h — the C ABI of decode (split-KV, flash-decoding) on top of CApi.h. Calls with at most 16 query rows a
 * sequence run the decode schedule's kernels (see Runtime::setDecodeSchedule); these functions choose that
 * schedule, force the number of key-range splits and pass a caller-owned workspace. Every call returns 0 on
 * success or -1 with a message in flashtile_last_error(). */
#ifndef FLASHTILE_RUNTIME_CAPIDECODE_H
#define FLASHTILE_RUNTIME_CAPIDECODE_H

#include "flashtile/runtime/CApi.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The schedule of decode-sized calls: "decode" by default; NULL or "" sends them to the main schedule (fa2). */
int flashtile_set_decode_schedule(flashtile_runtime *rt, const char *schedule);
/* flashtile_forward_variant with split-KV controls: num_splits 0 lets the runtime choose (FlashAttention's
 * heuristic, from the shape and the SM count), 1..128 forces it; workspace (256-byte aligned device memory of
 * workspace_bytes, see flashtile_split_kv_workspace_bytes) NULL lets the runtime own one per stream (it synchronizes
 * the stream once when that grows; under CUDA graph capture such a call runs unsplit: pass one there). The fa1
 * schedule's kernels keep each query row's state in the workspace between their K/V steps ((head_dim_v + 2) x 4 bytes
 * per LSE row); kernels of other schedules ignore both. */
int flashtile_forward_decode(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                             int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                             int head_dim_v, const long long *q_stride, const long long *k_stride,
                             const long long *v_stride, const long long *o_stride, float softmax_scale,
                             const char *variant, const flashtile_variant_args *variant_args, int num_splits,
                             void *workspace, size_t workspace_bytes, void *stream);
/* The workspace bytes a call of `lse_rows` LSE rows (batch * heads_q * seqlen_q; varlen heads_q * total_q) needs
 * at V head dim head_dim_v with num_splits splits (0 when num_splits <= 1), into *bytes. */
int flashtile_split_kv_workspace_bytes(long long lse_rows, int head_dim_v, int num_splits, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_RUNTIME_CAPIDECODE_H */
