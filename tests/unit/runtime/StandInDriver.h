// StandInDriver.h — the part of a stand-in CUDA driver (no GPU, no libcuda) every runtime test needs: one context
// and device whose architecture, SM count, shared memory and occupancy the test chooses, modules whose functions are
// named handles, stream capture on demand. Memory and launches differ from test to test (recorded, simulated), so
// each test adds its own to the driver standInDriver() returns.
#ifndef FLASHTILE_TESTS_UNIT_RUNTIME_STANDINDRIVER_H
#define FLASHTILE_TESTS_UNIT_RUNTIME_STANDINDRIVER_H

#include "flashtile/runtime/CudaDriver.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flashtile::stand_in {

/// What the stand-in device answers; a test resets it (`device = Device{...}`) before it runs.
struct Device {
  int major = 9, minor = 0, multiprocessors = 132;
  int sharedMemoryPerBlock = 227 * 1024; ///< every other attribute asked for, too
  int blocksPerMultiprocessor = 2;       ///< cuOccupancyMaxActiveBlocksPerMultiprocessor
  bool capturing = false;                ///< cuStreamIsCapturing
  std::vector<std::string> functionNames; ///< a function handle is its index + 1
  int streamSyncs = 0, contextSyncs = 0;
};
inline Device device;

/// The entry name behind a handle cuModuleGetFunction gave.
inline const std::string &functionName(CUfunction f) {
  return device.functionNames.at(reinterpret_cast<uintptr_t>(f) - 1);
}

/// The driver: context, device, module, function and stream calls answer from `device`; the rest are unloaded.
inline CudaDriver standInDriver() {
  CudaDriver d = CudaDriver::unloaded();
  d.cuCtxGetCurrent = [](CUcontext *context) {
    *context = reinterpret_cast<CUcontext>(0x2);
    return CUDA_SUCCESS;
  };
  d.cuCtxSetCurrent = [](CUcontext) { return CUDA_SUCCESS; };
  d.cuCtxGetDevice = [](CUdevice *dev) {
    *dev = 0;
    return CUDA_SUCCESS;
  };
  d.cuCtxSynchronize = [] {
    ++device.contextSyncs;
    return CUDA_SUCCESS;
  };
  d.cuDeviceGetAttribute = [](int *value, CUdevice_attribute attribute, CUdevice) {
    *value = attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? device.major
             : attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? device.minor
             : attribute == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? device.multiprocessors
                                                                         : device.sharedMemoryPerBlock;
    return CUDA_SUCCESS;
  };
  d.cuModuleLoadData = [](CUmodule *module, const void *) {
    *module = reinterpret_cast<CUmodule>(0x1);
    return CUDA_SUCCESS;
  };
  d.cuModuleUnload = [](CUmodule) { return CUDA_SUCCESS; };
  d.cuModuleGetFunction = [](CUfunction *function, CUmodule, const char *name) {
    device.functionNames.push_back(name);
    *function = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(device.functionNames.size()));
    return CUDA_SUCCESS;
  };
  d.cuFuncSetAttribute = [](CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; };
  d.cuOccupancyMaxActiveBlocksPerMultiprocessor = [](int *blocks, CUfunction, int, size_t) {
    *blocks = device.blocksPerMultiprocessor;
    return CUDA_SUCCESS;
  };
  d.cuStreamIsCapturing = [](CUstream, CUstreamCaptureStatus *status) {
    *status = device.capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  };
  d.cuStreamSynchronize = [](CUstream) {
    ++device.streamSyncs;
    return CUDA_SUCCESS;
  };
  return d;
}

} // namespace flashtile::stand_in

#endif // FLASHTILE_TESTS_UNIT_RUNTIME_STANDINDRIVER_H
