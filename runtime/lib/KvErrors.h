// KvErrors.h — the KV cache's device error records (KernelAbi.h: FlashtileKvError) on the runtime's side.
//
// Kernels of KV-cache calls clamp every cacheSeqlens, cacheBatchIdx and blockTable value they read, and write the
// first one out of range into an error record the runtime owns: one per context, allocated zeroed at the context's
// first KV-cache call and kept across calls (a launch-plan workspace with errorRecord set). The record holds the
// number of the call whose kernel met the value; the runtime keeps what it needs to name that call (its kernel,
// sizes and stream) for its last kRememberedCalls calls. It reads a record back where it synchronizes anyway (a
// stream that FLASHTILE_CHECK_KVCACHE or a growing workspace synchronizes) and in Runtime::checkErrors, reports it,
// and zeroes it for the next one.
#ifndef FLASHTILE_RUNTIME_LIB_KVERRORS_H
#define FLASHTILE_RUNTIME_LIB_KVERRORS_H

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/Status.h"

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace flashtile {
struct AttentionArgs;
}

namespace flashtile::detail {

/// What a report says of the call whose kernel met a bad value.
struct KvCallInfo {
  int number = 0; // FlashtileFwdParams::kvCall; 0: none filed here
  std::shared_ptr<const CachedKernel> kernel;
  CUstream stream = nullptr;
  int batch = 0, seqlenQ = 0;
  int capacity = 0;  // keys a sequence's cache holds (seqlenK)
  int seqlenNew = 0; // keys the call appended
  bool paged = false;
  int rows = 0; // numPages (paged) or cacheBatch (contiguous)

  /// The call's description from `args`, for kernel `kernel` on `stream`.
  static KvCallInfo of(const AttentionArgs &args, std::shared_ptr<const CachedKernel> kernel, CUstream stream);
};

/// The report of `record` (argument > 0), read back from a context's record: the call (`call`, or null when it is no
/// longer remembered), the kernel, the argument with its batch entry (and block-table column), its value and the
/// accepted range, and that the kernels clamped it.
std::string describeKvError(const FlashtileKvError &record, const KvCallInfo *call);

class KvErrorRecords {
public:
  /// Calls a report can name: the record holds a call's number, the runtime what it says of the last ones.
  static constexpr int kRememberedCalls = 256;

  KvErrorRecords() = default;
  KvErrorRecords(const KvErrorRecords &) = delete;
  KvErrorRecords &operator=(const KvErrorRecords &) = delete;

  /// The record of the current context `context` for a call `call` (its number is assigned here) on `stream`, and
  /// that number. The record is allocated and zeroed on `stream` at the context's first KV-cache call; under CUDA
  /// graph capture before that there is none (null: the kernels only clamp).
  StatusOr<std::pair<FlashtileKvError *, int>> bind(const CudaDriver &driver, CUcontext context, CUstream stream,
                                                    KvCallInfo call);
  /// After the caller synchronized `stream` of the current context `context`: reads the context's record; a value
  /// there is the error (naming the call that caused it), and the record is zeroed again (on `stream`, waited for).
  /// A record a kernel on another stream is still writing is left for a later read.
  Status readAfterSync(const CudaDriver &driver, CUcontext context, CUstream stream);
  /// Runtime::checkErrors: synchronizes every context that has a record and reads it as readAfterSync does; the
  /// caller's current context is kept. Several errors (several contexts) are reported together.
  Status checkAll(const CudaDriver &driver);
  /// Whether any context has a record (no KV-cache call has run otherwise).
  bool empty() {
    std::lock_guard<std::mutex> lock(guard);
    return records.empty();
  }
  /// Frees every record (each in its own context); for the runtime's destructor.
  void release(const CudaDriver &driver);

private:
  /// Reads the record at `address` (guard held): a published value is the error, and the record is zeroed on
  /// `stream` (waited for). `synchronized`: the whole context is idle, so a claimed record is a stale one.
  Status take(const CudaDriver &driver, CUdeviceptr address, bool synchronized, CUstream stream);

  std::mutex guard;
  std::map<CUcontext, CUdeviceptr> records;
  std::array<KvCallInfo, kRememberedCalls> calls;
  int nextCall = 1;
};

} // namespace flashtile::detail

#endif // FLASHTILE_RUNTIME_LIB_KVERRORS_H
