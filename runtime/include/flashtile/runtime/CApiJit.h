/* CApiJit.h — the compiler behind the C ABI (libflashtile_jit.so, the library inside the Python package).
 *
 * libflashtile_jit.so exports everything CApi.h declares plus the functions below; it carries the whole compiler
 * (MLIR and LLVM linked statically) and needs only libc, libcuda and NVRTC at run time. Errors follow CApi.h:
 * -1 (or NULL) with a message in flashtile_last_error(). Strings returned here are the caller's to free with
 * flashtile_string_free. */
#ifndef FLASHTILE_RUNTIME_CAPIJIT_H
#define FLASHTILE_RUNTIME_CAPIJIT_H

#include "flashtile/runtime/CApi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Installs the in-process compiler on `rt`: a kernel no ahead-of-time directory holds is compiled on first use
 * (MLIR, then NVRTC) and kept in the kernel cache (memory and disk, FLASHTILE_CACHE_DIR); every call's variant
 * numbers and inputs are checked against the variant (e.g. window sizes >= -1). */
int flashtile_enable_jit(flashtile_runtime *rt);

/* Registers a variant described in the JSON format of capi/VariantDescription.h ("flashtile.variant.v1", what
 * the Python package's tracer writes) with the process's compiler, for every runtime with the JIT enabled.
 * Returns its id (name#hash of its IR: the same hooks written in C++ have the same id) to pass as `variant` to
 * the forward calls; NULL on error. */
char *flashtile_register_variant(const char *description);

/* The id of a built-in variant name ("causal", ...) or of a description, without registering it. */
char *flashtile_variant_id(const char *variant);

/* What the compiler makes of a variant (a built-in name or a description) up to `stage`: "tile" (the program's
 * IR), "scheduled" (after the schedule's passes) or "cuda" (the generated kernel). dtype is FLASHTILE_F16 or
 * FLASHTILE_BF16; head_dim_v 0 means head_dim; arch is "sm_80", "sm_90a", "sm_100a" or an alias the CLI's --arch
 * takes (sm_86, sm_87 and sm_89 build sm_80 kernels, sm_90 is sm_90a, sm_100 is sm_100a; NULL: sm_90a). Needs no
 * GPU. */
char *flashtile_compile_variant(const char *variant, const char *stage, int dtype, int head_dim, int head_dim_v,
                                const char *arch);

/* The built-in variants' names, comma-separated. */
char *flashtile_builtin_variants(void);

/* The attention of a variant and its gradients in fp64 on the CPU, straight from the definitions, with the hooks'
 * derivatives from the compiler's derivative IR (what the backward kernels compute, checked here by nothing but
 * arithmetic): for torch.autograd.gradcheck and for checking a new variant's gradients before any GPU. Needs no GPU.
 * Dense layouts, every array contiguous: q batch x seqlen_q x heads_q x head_dim, k batch x seqlen_k x heads_kv x
 * head_dim, v batch x seqlen_k x heads_kv x head_dim_v, o and d_o batch x seqlen_q x heads_q x head_dim_v, lse
 * batch x heads_q x seqlen_q (natural log; -inf for a row that sees no key and no sink). d_o NULL: the forward only
 * (o, lse); else d_q, d_k, d_v (laid out as q, k, v) are written too, and input_grads[i] / param_grads when not NULL:
 * the gradients of the loss sum(d_o * o) with respect to the variant's f32 input i (input_lengths[i] elements; an
 * i32 input must have NULL) and its numbers. inputs[i]: input_lengths[i] host values, double for an f32 input and
 * int for an i32 one. The work is batch * heads_q * seqlen_q * seqlen_k * (head_dim + head_dim_v) and at most
 * FLASHTILE_REFERENCE_MAX_WORK. `size` must be sizeof(flashtile_reference_call).
 * Varlen: cu_seqlens_q and cu_seqlens_k (batch + 1 offsets each, from 0) make q, k, v, o and d_o packed rows
 * (seqlen_q / seqlen_k are then the totals: total x heads x dim) and lse heads_q x total_q; NULL: dense.
 * A block of a larger problem (context parallelism: a sequence split across processes): the hooks, masks and KV
 * ranges see the larger problem's coordinates and sizes. Query row i is q_offset + i (varlen: q_offsets[b] + i of
 * sequence b), key j is k_offset + j (k_offsets[b] + j), query head h is head_offset + h; seqlen_q / seqlen_k are
 * seqlen_q_global / seqlen_k_global (varlen: each sequence's of cu_seqlens_q_global / cu_seqlens_k_global), heads_q /
 * heads_kv heads_q_global / heads_kv_global, and a hook's key_offset b * seqlen_k_global (varlen:
 * cu_seqlens_k_global[b]). 0 or NULL: the call's own. A block's rows (keys) must lie inside the larger problem's,
 * its heads be whole groups of heads_q / heads_kv. fwd_o and fwd_lse (with d_o; laid out as o and lse): the larger
 * problem's forward for this call's rows, from which the backward takes P = e^(logit - lse) and D = rowsum(d_o * o)
 * (flash-attn's backward takes out and softmax_lse so); NULL: the call's own. o and lse are the call's own. */
enum { FLASHTILE_REFERENCE_MAX_WORK = 1 << 28 };
typedef struct flashtile_reference_call {
  unsigned long long size;
  const char *variant; /* a built-in name or a description; NULL: "none" */
  const double *q, *k, *v, *d_o;
  double *o, *lse, *d_q, *d_k, *d_v;
  const void *inputs[FLASHTILE_CALL_MAX_INPUTS];
  long long input_lengths[FLASHTILE_CALL_MAX_INPUTS];
  double *input_grads[FLASHTILE_CALL_MAX_INPUTS];
  double *param_grads; /* NULL or num_params values */
  double params[FLASHTILE_CALL_MAX_PARAMS];
  double softmax_scale; /* 0: 1/sqrt(head_dim) */
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, head_dim_v, num_params, num_inputs;
  const int *cu_seqlens_q, *cu_seqlens_k;               /* varlen; NULL: dense */
  long long q_offset, k_offset;                         /* dense: where row 0 and key 0 sit in the larger problem */
  int seqlen_q_global, seqlen_k_global;                 /* dense; 0: seqlen_q, seqlen_k */
  int head_offset, heads_q_global, heads_kv_global;     /* 0: heads_q, heads_kv */
  const int *q_offsets, *k_offsets;                     /* varlen: batch values each; NULL: 0 */
  const int *cu_seqlens_q_global, *cu_seqlens_k_global; /* varlen: batch + 1 each; NULL: cu_seqlens_q/k */
  const double *fwd_o, *fwd_lse; /* a block's backward: the larger problem's o and lse; NULL: the call's */
} flashtile_reference_call;
int flashtile_reference_attention(const flashtile_reference_call *call);
/* Frees a string returned by the functions above (NULL is fine). */
void flashtile_string_free(char *s);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_RUNTIME_CAPIJIT_H */
