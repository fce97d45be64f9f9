// StandInDriver.h — a stand-in CUDA driver for the runtime tests (no GPU, no libcuda): one context and device whose
// architecture, SM count, shared memory and occupancy the test chooses, modules whose functions are named handles,
// stream capture on demand, device memory held in host buffers, and every launch recorded. A test may give launches
// something to do (Device::kernel: SelfCheckTest computes attention on the host) and plant arrays at addresses of its
// own (KvErrorsTest's cache tables). tests/common/StandInDevice.h says what it shares with tests/python/FakeCuda.c.
#ifndef FLASHTILE_TESTS_UNIT_RUNTIME_STANDINDRIVER_H
#define FLASHTILE_TESTS_UNIT_RUNTIME_STANDINDRIVER_H

#include "TestUtil.h"
#include "tests/common/StandInDevice.h"

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/PositionsAbi.h"
#include "flashtile/runtime/Runtime.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace flashtile::stand_in {

/// Where the stand-in's allocations start: far above the addresses tests plant arrays at or pass as tensors.
inline constexpr CUdeviceptr kFirstAllocation = 0x40000000;

/// One launch the stand-in driver saw.
struct Launch {
  std::string entry;
  std::array<unsigned, 3> grid{};
  std::array<unsigned, 3> cluster{1, 1, 1}; ///< CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, else 1 x 1 x 1
  unsigned threads = 0, smem = 0;           ///< block.x, dynamic shared memory
  bool dependent = false;                   ///< programmatic dependent launch allowed
  FlashtileFwdParams params{};
  /// The bytes of the second kernel parameter, read as FlashtilePositions: a module compiled with position offsets
  /// takes the call's positions there (PositionsAbi.h); other modules' kernels get their tensor maps there.
  FlashtilePositions second{};
};

/// What the stand-in device answers, holds and saw; a test resets it (`device = Device{}`) before it runs.
struct Device {
  int major = kStandInComputeMajor, minor = kStandInComputeMinor, multiprocessors = kStandInMultiprocessors;
  int sharedMemoryPerBlock = kStandInSharedMemoryPerBlock;     ///< every other attribute asked for, too
  int blocksPerMultiprocessor = kStandInBlocksPerMultiprocessor; ///< cuOccupancyMaxActiveBlocksPerMultiprocessor
  bool capturing = false;                                        ///< cuStreamIsCapturing
  std::vector<std::string> functionNames;                        ///< a function handle is its index + 1
  int streamSyncs = 0, contextSyncs = 0;

  /// Device memory by start address: allocations (from kFirstAllocation up, filled with 0x5a: what cuMemAlloc leaves
  /// is garbage) and the arrays a test planted.
  std::map<CUdeviceptr, std::vector<char>> memory;
  CUdeviceptr nextAllocation = kFirstAllocation;
  int allocations = 0;                                 ///< cuMemAlloc calls
  CUdeviceptr lastAllocation = 0;                      ///< the last cuMemAlloc's address (0: none yet)
  size_t lastAllocationBytes = 0;                      ///< and its size
  std::vector<std::pair<CUdeviceptr, size_t>> memsets; ///< cuMemsetD32Async calls: (address, 32-bit words)

  std::vector<Launch> launches;
  std::function<void(const Launch &)> kernel; ///< what a launch does once recorded; none: nothing
};
inline Device device;

/// The entry name behind a handle cuModuleGetFunction gave.
inline const std::string &functionName(CUfunction f) {
  return device.functionNames.at(reinterpret_cast<uintptr_t>(f) - 1);
}

/// The host bytes behind [address, address + bytes) of device memory, or null where no allocation or planted array
/// holds them all.
inline char *hostOf(CUdeviceptr address, size_t bytes = 1) {
  auto it = device.memory.upper_bound(address);
  if (it == device.memory.begin())
    return nullptr;
  --it;
  if (address + bytes > it->first + it->second.size())
    return nullptr;
  return it->second.data() + (address - it->first);
}
inline char *hostOf(const void *address, size_t bytes = 1) {
  return hostOf(reinterpret_cast<CUdeviceptr>(address), bytes);
}

/// Puts `bytes` bytes of `data` in device memory at `address` (a test's own address, below kFirstAllocation),
/// replacing what was planted there.
inline void plant(const void *address, const void *data, size_t bytes) {
  const auto at = reinterpret_cast<CUdeviceptr>(address);
  device.memory.erase(at);
  const auto next = device.memory.lower_bound(at);
  if (hostOf(at) || (next != device.memory.end() && next->first < at + bytes) || at + bytes > kFirstAllocation)
    ADD_FAILURE() << "planting " << bytes << " bytes at " << address << " overlaps device memory";
  std::vector<char> &planted = device.memory[at];
  planted.resize(bytes);
  std::memcpy(planted.data(), data, bytes);
}

/// Records `launch` (its entry and parameter block taken from the call) and runs the test's kernel on it.
inline CUresult recordLaunch(Launch launch, CUfunction f, void **params) {
  launch.entry = functionName(f);
  std::memcpy(&launch.params, params[0], sizeof(launch.params));
  std::memcpy(&launch.second, params[1], sizeof(launch.second));
  device.launches.push_back(launch);
  if (device.kernel)
    device.kernel(device.launches.back());
  return CUDA_SUCCESS;
}

/// The driver: every call answers from and records into `device`; copies outside its memory are
/// CUDA_ERROR_INVALID_VALUE, as a wild pointer would be on a GPU.
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

  d.cuMemAlloc_v2 = [](CUdeviceptr *pointer, size_t bytes) {
    ++device.allocations;
    *pointer = device.lastAllocation = device.nextAllocation;
    device.lastAllocationBytes = bytes;
    device.nextAllocation += (bytes + 0xfff) / 0x1000 * 0x1000 + 0x1000; // page-aligned, with a gap between
    device.memory[*pointer] = std::vector<char>(bytes, '\x5a');
    return CUDA_SUCCESS;
  };
  d.cuMemFree_v2 = [](CUdeviceptr pointer) {
    return device.memory.erase(pointer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  };
  d.cuMemcpyHtoD_v2 = [](CUdeviceptr to, const void *from, size_t bytes) {
    char *host = hostOf(to, bytes);
    if (!host)
      return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(host, from, bytes);
    return CUDA_SUCCESS;
  };
  d.cuMemcpyDtoH_v2 = [](void *to, CUdeviceptr from, size_t bytes) {
    const char *host = hostOf(from, bytes);
    if (!host)
      return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(to, host, bytes);
    return CUDA_SUCCESS;
  };
  d.cuMemsetD8_v2 = [](CUdeviceptr to, unsigned char value, size_t bytes) {
    char *host = hostOf(to, bytes);
    if (!host)
      return CUDA_ERROR_INVALID_VALUE;
    std::memset(host, value, bytes);
    return CUDA_SUCCESS;
  };
  // Recorded wherever it points (a test may hand the runtime a workspace of its own); written where memory is.
  d.cuMemsetD32Async = [](CUdeviceptr to, unsigned value, size_t words, CUstream) {
    device.memsets.emplace_back(to, words);
    if (char *host = hostOf(to, words * 4))
      for (size_t i = 0; i < words; ++i)
        std::memcpy(host + 4 * i, &value, 4);
    return CUDA_SUCCESS;
  };

  d.cuLaunchKernel = [](CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned, unsigned,
                        unsigned smem, CUstream, void **params, void **) {
    Launch launch;
    launch.grid = {gx, gy, gz};
    launch.threads = bx;
    launch.smem = smem;
    return recordLaunch(launch, f, params);
  };
  d.cuLaunchKernelEx = [](const CUlaunchConfig *c, CUfunction f, void **params, void **) {
    Launch launch;
    launch.grid = {c->gridDimX, c->gridDimY, c->gridDimZ};
    launch.threads = c->blockDimX;
    launch.smem = c->sharedMemBytes;
    for (unsigned i = 0; i < c->numAttrs; ++i) {
      const CUlaunchAttribute &attribute = c->attrs[i];
      if (attribute.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        launch.dependent |= attribute.value.programmaticStreamSerializationAllowed != 0;
      if (attribute.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        launch.cluster = {attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z};
    }
    return recordLaunch(launch, f, params);
  };

  d.cuGetErrorName = [](CUresult, const char **text) {
    *text = "CUDA_ERROR_STAND_IN";
    return CUDA_SUCCESS;
  };
  d.cuGetErrorString = [](CUresult, const char **text) {
    *text = "stand-in";
    return CUDA_SUCCESS;
  };
  return d;
}

/// What a stand-in JIT returns for `spec`: `info` with the fields a compiler takes from the spec it was asked for.
inline KernelInfo forSpec(KernelInfo info, const KernelSpec &spec) {
  info.kind = spec.kind;
  info.arch = spec.arch;
  info.dtype = spec.dtype;
  info.headDim = spec.headDim;
  info.headDimV = spec.headDimV;
  info.variant = spec.variant;
  info.schedule = spec.schedule;
  info.shapeClass = spec.shapeClass;
  info.kvCache = spec.kvCache;
  info.rotary = spec.rotary;
  info.positions = spec.positions;
  return info;
}

/// A backward call of `forward` whose dO, dQ, dK and dV are distinct stand-in addresses (never read by the stand-in
/// driver) with the forward's strides.
inline BackwardArgs backwardOf(const AttentionArgs &forward) {
  BackwardArgs args;
  args.forward = forward;
  auto *base = reinterpret_cast<char *>(0x900000);
  args.dO = base;
  args.dQ = base + 0x100000;
  args.dK = base + 0x200000;
  args.dV = base + 0x300000;
  args.dOStride = args.dQStride = forward.qStride;
  args.dKStride = args.dVStride = forward.kStride;
  return args;
}

/// A stand-in JIT's module for `spec` whose main kernel is `entry`: test::fakeKernel's fields with the spec's
/// (forSpec), a plan of one launch, or for the backward three (preprocess "<entry>_pre", main, postprocess
/// "<entry>_post"), and a cubin that defines them.
inline CachedKernel moduleFor(const KernelSpec &spec, const std::string &entry) {
  CachedKernel kernel = test::fakeKernel(spec.schedule);
  KernelInfo &info = kernel.info = forSpec(kernel.info, spec);
  info.entry = entry;
  info.plan = codegen::planLaunches(test::mainFacts(info, 128, 65536));
  std::vector<std::string> entries = {entry};
  if (spec.kind == kBackwardKind) {
    PlanLaunch pre = info.plan.launches[0], post = pre;
    pre.entry = entry + "_pre";
    post.entry = entry + "_post";
    info.plan.launches.insert(info.plan.launches.begin(), pre);
    info.plan.launches.push_back(post);
    entries = {pre.entry, entry, post.entry};
  }
  kernel.cubin = test::fakeCubin(90, entries);
  return kernel;
}

} // namespace flashtile::stand_in

#endif // FLASHTILE_TESTS_UNIT_RUNTIME_STANDINDRIVER_H
