// CudaDriver.h — the CUDA driver API, loaded with dlopen at first use.
//
// libcuda is never linked: a binary built here must start (and compile or emit kernels) on a machine without an
// NVIDIA driver, and only report an error when asked to run a kernel. <cuda.h> is included for types and enums.
#ifndef FLASHTILE_RUNTIME_CUDADRIVER_H
#define FLASHTILE_RUNTIME_CUDADRIVER_H

#include "flashtile/runtime/Status.h"

#include <cuda.h>

#include <string>
#include <string_view>

namespace flashtile {

// X(member, symbol candidates...): the first candidate that libcuda exports is used. Versioned (_v2) symbols
// are named explicitly because dlsym bypasses the header's #defines that select them.
#define FLASHTILE_CUDA_DRIVER_FUNCTIONS(X)                                                                             \
  X(cuInit, "cuInit")                                                                                                  \
  X(cuDeviceGet, "cuDeviceGet")                                                                                        \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                                                                      \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                                              \
  X(cuCtxGetCurrent, "cuCtxGetCurrent")                                                                                \
  X(cuCtxSetCurrent, "cuCtxSetCurrent")                                                                                \
  X(cuCtxGetDevice, "cuCtxGetDevice")                                                                                  \
  X(cuCtxSynchronize, "cuCtxSynchronize")                                                                              \
  X(cuModuleLoadData, "cuModuleLoadData")                                                                              \
  X(cuModuleUnload, "cuModuleUnload")                                                                                  \
  X(cuModuleGetFunction, "cuModuleGetFunction")                                                                        \
  X(cuFuncSetAttribute, "cuFuncSetAttribute")                                                                          \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor")                        \
  X(cuLaunchKernel, "cuLaunchKernel")                                                                                  \
  X(cuLaunchKernelEx, "cuLaunchKernelEx")                                                                              \
  X(cuMemAlloc_v2, "cuMemAlloc_v2")                                                                                    \
  X(cuMemFree_v2, "cuMemFree_v2")                                                                                      \
  X(cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2")                                                                                \
  X(cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2")                                                                                \
  X(cuMemsetD8_v2, "cuMemsetD8_v2")                                                                                    \
  X(cuMemsetD32Async, "cuMemsetD32Async")                                                                              \
  X(cuStreamSynchronize, "cuStreamSynchronize")                                                                        \
  X(cuStreamIsCapturing, "cuStreamIsCapturing")                                                                        \
  X(cuEventCreate, "cuEventCreate")                                                                                    \
  X(cuEventRecord, "cuEventRecord")                                                                                    \
  X(cuEventSynchronize, "cuEventSynchronize")                                                                          \
  /* _v2 (CUDA 12.8+) fixes timing across contexts; same signature, so older drivers fall back. */                     \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime")                                                 \
  X(cuEventDestroy_v2, "cuEventDestroy_v2")                                                                            \
  X(cuGetErrorString, "cuGetErrorString")                                                                              \
  X(cuGetErrorName, "cuGetErrorName")                                                                                  \
  /* TMA descriptors for sm90 kernels (TensorMap.h); both exist since CUDA 12.0. */                                    \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")                                                                  \
  X(cuTensorMapReplaceAddress, "cuTensorMapReplaceAddress")

/// The loaded driver: one process-wide table of entry points. Call the members like the C API, e.g.
/// `driver->cuMemAlloc_v2(&ptr, bytes)`, and turn results into a Status with check().
class CudaDriver {
public:
  /// Loads libcuda.so.1, resolves every entry point and calls cuInit(0) on the first call (thread-safe); later
  /// calls return the same table or the same error. Never fails the process: without a driver the error says so.
  static StatusOr<const CudaDriver *> get();

#define FLASHTILE_DECLARE_DRIVER_FUNCTION(member, ...) decltype(&::member) member = nullptr;
  FLASHTILE_CUDA_DRIVER_FUNCTIONS(FLASHTILE_DECLARE_DRIVER_FUNCTION)
#undef FLASHTILE_DECLARE_DRIVER_FUNCTION

  /// Ok for CUDA_SUCCESS; otherwise "<call> failed: CUDA_ERROR_… (<description>)".
  Status check(CUresult result, std::string_view call) const;

  /// Makes sure this thread has a current context (retaining device 0's primary context when it has none) and
  /// returns that context's device.
  StatusOr<CUdevice> currentDevice() const;

  /// The kernel target for the current context's device, one of kSupportedArchs.
  StatusOr<std::string> detectArch() const;

  /// A table with no entry point resolved, for tests that install stand-ins of the calls they exercise.
  static CudaDriver unloaded() { return CudaDriver(); }
  /// For tests without a GPU: get() returns `driver` (stand-ins on an unloaded() table, which must outlive its use)
  /// instead of libcuda's table until this is called again with null.
  static void useInsteadForTesting(const CudaDriver *driver);

private:
  CudaDriver() = default;
  Status load();
};

/// Maps a compute capability to the target whose cubins run on it, or explains which ones are supported.
StatusOr<std::string> archForComputeCapability(int major, int minor);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_CUDADRIVER_H
