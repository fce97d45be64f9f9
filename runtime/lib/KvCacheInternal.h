// KvCacheInternal.h — the runtime's own pieces of KV-cache calls: argument checks, the kernel parameters, and the
// launch of the append kernel.
#ifndef FLASHTILE_RUNTIME_LIB_KVCACHEINTERNAL_H
#define FLASHTILE_RUNTIME_LIB_KVCACHEINTERNAL_H

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"

namespace flashtile::detail {

/// Runtime::validate's checks of AttentionArgs::kvCache (and of the fields a cache call gives other meanings).
Status checkKvCacheArgs(const AttentionArgs &args);

/// KernelSpec::rotary of a call: kRotaryHalves or kRotaryInterleaved when kvCache.rotaryDim > 0, else empty.
std::string rotaryPairs(const AttentionArgs &args);

/// The cache fields of the kernel parameter block (KernelAbi.h); leaves `params` alone for other calls.
void fillKvCacheParams(const AttentionArgs &args, FlashtileFwdParams &params);

/// FLASHTILE_CHECK_KVCACHE=1 (read at each KV-cache call): forward() copies the device cacheSeqlens, cacheBatchIdx
/// and block table to the host and checks them before launching (as host copies are checked), after reading back
/// the error record of earlier calls.
bool checkKvCacheValuesOnDevice();

/// Copies args' device cacheSeqlens, cacheBatchIdx and block table (the first maxPagesPerSeq entries of each row)
/// to the host and runs checkKvCacheArgs with them as the host copies; the caller has waited for the work that
/// writes them.
Status checkDeviceKvCacheValues(const CudaDriver &driver, const AttentionArgs &args);

} // namespace flashtile::detail

#endif // FLASHTILE_RUNTIME_LIB_KVCACHEINTERNAL_H
