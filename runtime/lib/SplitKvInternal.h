// SplitKvInternal.h — the runtime's own pieces of split-KV: argument checks and the workspaces it owns.
#ifndef FLASHTILE_RUNTIME_LIB_SPLITKVINTERNAL_H
#define FLASHTILE_RUNTIME_LIB_SPLITKVINTERNAL_H

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Runtime.h"

#include <map>
#include <mutex>
#include <utility>

namespace flashtile::detail {

/// Runtime::validate's checks of AttentionArgs::numSplits, workspace and workspaceBytes.
Status checkSplitKvArgs(const AttentionArgs &args);

/// LSE rows of a call: B x Hq x Sq dense, Hq x total_q varlen (the workspace's rows).
long long lseRows(const AttentionArgs &args);

/// Device buffers for split-KV partials, one per (context, stream), grown on demand. A buffer that grows is freed
/// after its stream's queued work (a stream synchronization, once per growth). The mutex is held by the caller
/// from buffer() until its kernels are queued, so that no other thread frees a buffer between the two.
class SplitKvWorkspaces {
public:
  SplitKvWorkspaces() = default;
  SplitKvWorkspaces(const SplitKvWorkspaces &) = delete;
  SplitKvWorkspaces &operator=(const SplitKvWorkspaces &) = delete;

  std::mutex &mutex() { return guard; }
  /// A buffer of at least `bytes` for `stream` in the current context `context`; guard held. `synchronized` (when
  /// given) is set when the buffer grew, which waited for the stream's queued work.
  StatusOr<CUdeviceptr> buffer(const CudaDriver &driver, CUcontext context, CUstream stream, size_t bytes,
                               bool *synchronized = nullptr);
  /// Frees every buffer (each in its own context); for the runtime's destructor.
  void release(const CudaDriver &driver);

private:
  struct Buffer {
    CUdeviceptr pointer = 0;
    size_t bytes = 0;
  };
  std::mutex guard;
  std::map<std::pair<CUcontext, CUstream>, Buffer> buffers;
};

} // namespace flashtile::detail

#endif // FLASHTILE_RUNTIME_LIB_SPLITKVINTERNAL_H
