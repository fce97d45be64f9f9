// CApiInternal.h — what the C ABI's translation units share (CApi.cpp and the compiler's CApiJit.cpp): the
// handle behind flashtile_runtime and the per-thread message flashtile_last_error() returns.
#ifndef FLASHTILE_RUNTIME_CAPIINTERNAL_H
#define FLASHTILE_RUNTIME_CAPIINTERNAL_H

#include "flashtile/runtime/Runtime.h"

#include <exception>
#include <string>

struct flashtile_runtime {
  flashtile::Runtime runtime;
};

namespace flashtile::capi {
/// Sets the message flashtile_last_error() returns on this thread.
void setLastError(std::string message);

/// Runs `fn` (returning int: 0, or -1 with the error set) and turns an exception into -1 with "<what>: internal
/// error[: ...]": nothing thrown crosses the C ABI.
template <typename Fn> int guarded(const char *what, Fn &&fn) noexcept {
  try {
    return fn();
  } catch (const std::exception &e) {
    setLastError(std::string(what) + ": internal error: " + e.what());
  } catch (...) {
    setLastError(std::string(what) + ": internal error");
  }
  return -1;
}
} // namespace flashtile::capi

#endif // FLASHTILE_RUNTIME_CAPIINTERNAL_H
