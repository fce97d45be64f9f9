// CApiInternal.h — what the C ABI's translation units share (CApi.cpp and the compiler's CApiJit.cpp): the
// handle behind flashtile_runtime and the per-thread message flashtile_last_error() returns.
#ifndef FLASHTILE_RUNTIME_CAPIINTERNAL_H
#define FLASHTILE_RUNTIME_CAPIINTERNAL_H

#include "flashtile/runtime/Runtime.h"

#include <string>

struct flashtile_runtime {
  flashtile::Runtime runtime;
};

namespace flashtile::capi {
/// Sets the message flashtile_last_error() returns on this thread.
void setLastError(std::string message);
} // namespace flashtile::capi

#endif // FLASHTILE_RUNTIME_CAPIINTERNAL_H
