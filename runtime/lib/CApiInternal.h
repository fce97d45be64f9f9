// CApiInternal.h — what the C ABI's translation units share (CApi.cpp and the compiler's CApiJit.cpp): the
// handle behind flashtile_runtime and the per-thread message flashtile_last_error() returns.
#ifndef FLASHTILE_RUNTIME_CAPIINTERNAL_H
#define FLASHTILE_RUNTIME_CAPIINTERNAL_H

#include "flashtile/runtime/CApi.h"
#include "flashtile/runtime/Runtime.h"

#include <exception>
#include <string>

struct flashtile_runtime {
  flashtile::Runtime runtime;
};

namespace flashtile::capi {
/// Whether `code` is a dtype of CApi.h: the error names the accepted codes.
inline Status checkDtypeCode(int code) {
  if (code == FLASHTILE_F16 || code == FLASHTILE_BF16 || code == FLASHTILE_E4M3)
    return Status();
  return Status::error("dtype: " + std::to_string(code) +
                       " is not FLASHTILE_F16 (0), FLASHTILE_BF16 (1) or FLASHTILE_E4M3 (2)");
}
/// Whether `code` is a q dtype the decode schedule's entry points (flashtile_forward_decode, the KV-cache calls) run:
/// an e4m3 q is named, as the split-KV and KV-cache kernels read q in 16 bits (a KV cache may be e4m3: cache_dtype).
inline Status checkDecodeDtypeCode(int code) {
  if (code == FLASHTILE_F16 || code == FLASHTILE_BF16)
    return Status();
  if (code == FLASHTILE_E4M3)
    return Status::error("dtype: FLASHTILE_E4M3 (2): the split-KV and KV-cache kernels read q in bf16 or f16 (an e4m3 "
                         "q is not built; a KV cache may be e4m3: cache_dtype FLASHTILE_E4M3 with a bf16 or f16 q); "
                         "accepted: FLASHTILE_F16 (0), FLASHTILE_BF16 (1)");
  return Status::error("dtype: " + std::to_string(code) + " is not FLASHTILE_F16 (0) or FLASHTILE_BF16 (1)");
}
/// The DType of a code checkDtypeCode accepts.
inline DType dtypeOfCode(int code) {
  return code == FLASHTILE_E4M3 ? DType::E4M3 : code == FLASHTILE_BF16 ? DType::BF16 : DType::F16;
}

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
