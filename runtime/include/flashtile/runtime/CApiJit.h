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
 * FLASHTILE_BF16; head_dim_v 0 means head_dim; arch is "sm_80", "sm_90a", "sm_100a" (NULL: sm_90a). Needs no GPU. */
char *flashtile_compile_variant(const char *variant, const char *stage, int dtype, int head_dim, int head_dim_v,
                                const char *arch);

/* The built-in variants' names, comma-separated. */
char *flashtile_builtin_variants(void);

/* Frees a string returned by the functions above (NULL is fine). */
void flashtile_string_free(char *s);

#ifdef __cplusplus
}
#endif

#endif /* FLASHTILE_RUNTIME_CAPIJIT_H */
