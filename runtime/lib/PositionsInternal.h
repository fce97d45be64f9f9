// PositionsInternal.h — the runtime's side of calls that are blocks of a larger problem (AttentionArgs::positions):
// their checks and the kernels' FlashtilePositions (PositionsAbi.h).
#ifndef FLASHTILE_RUNTIME_LIB_POSITIONSINTERNAL_H
#define FLASHTILE_RUNTIME_LIB_POSITIONSINTERNAL_H

#include "flashtile/runtime/PositionsAbi.h"
#include "flashtile/runtime/Runtime.h"

namespace flashtile::detail {

/// Runtime::validate's checks of a call's positions (none: ok): no KV cache; offsets and sizes >= 0; the call's rows,
/// keys and heads inside the larger problem's (heads in whole GQA groups); the dense fields for dense calls and the
/// per-sequence arrays for varlen ones (device pointers 4-byte aligned; host copies checked value by value). Each
/// message names the field and the accepted values.
Status checkPositionArgs(const AttentionArgs &args);

/// Runtime::validateFor's: a call with positions runs only a module compiled with position offsets, and a plain call
/// only one without (KernelInfo::positions): their kernels' parameter lists differ.
Status checkPositionsLaunch(const AttentionArgs &args, const KernelInfo &kernel);

/// The kernels' FlashtilePositions of a call: its positions as the kernels read them (0 and null: the call's own),
/// all zero for a call without positions.
FlashtilePositions positionsFor(const AttentionArgs &args);

} // namespace flashtile::detail

#endif // FLASHTILE_RUNTIME_LIB_POSITIONSINTERNAL_H
