// Fp8Internal.h — the runtime's checks of FP8 (e4m3) calls: descales, strides, and the paths e4m3 has none of.
#ifndef FLASHTILE_RUNTIME_LIB_FP8INTERNAL_H
#define FLASHTILE_RUNTIME_LIB_FP8INTERNAL_H

#include "flashtile/runtime/Runtime.h"

namespace flashtile::detail {

/// Runtime::validate's checks of a call's FP8 fields: descales only with dtype E4M3 (each null or 4-byte aligned),
/// E4M3's Q/K/V strides whole 16-byte vectors, and no KV cache under an e4m3 Q. An e4m3 KV cache (KvCacheArgs::dtype)
/// under a bf16 or f16 Q takes kDescale and vDescale (not qDescale) and 16-element cache strides.
Status checkFp8Args(const AttentionArgs &args);

/// Runtime::validateFor's: an e4m3 call runs an e4m3 kernel (whose kernels take FlashtileFp8Params last, Fp8Abi.h)
/// and an e4m3 kernel serves e4m3 calls only; likewise a call over an e4m3 cache and a kernel that reads one
/// (KernelInfo::kvDtype).
Status checkFp8Launch(const AttentionArgs &args, const KernelInfo &kernel);

/// Runtime::validateBackward's: an E4M3 forward has no backward (as flash-attn 3's FP8).
Status checkFp8Backward(const AttentionArgs &forward);

} // namespace flashtile::detail

#endif // FLASHTILE_RUNTIME_LIB_FP8INTERNAL_H
