/* FakeCuda.c — a stand-in libcuda.so.1 for checking and timing flashtile's host path on a machine without a GPU.
 *
 * Every entry point the runtime resolves (CudaDriver.h) succeeds at once: one context on one device of compute
 * capability 9.0, modules and functions are dummy handles, launches run nothing but are recorded (the grid, the
 * block, the shared memory and the parameter block) for tests/python/test_warm_path.py to read back. Built with the
 * soname libcuda.so.1 and loaded before the runtime first asks for the driver (or found through LD_LIBRARY_PATH,
 * bench/host/overhead.sh), it stands in for the driver; the driver's own cost of a launch (about 2 µs on the
 * H200) is missing from timings. Never installed.
 *
 * The C++ runtime tests have a stand-in of their own (tests/unit/runtime/StandInDriver.h), which fills the runtime's
 * driver table inside the test process; this one must export the driver's C symbols from a shared library built with
 * the system's C compiler, so the two share the device they describe (tests/common/StandInDevice.h) and no code. */
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/PositionsAbi.h"
#include "tests/common/StandInDevice.h"

#include <cuda.h>
#include <stdlib.h>
#include <string.h>

static int fakeContext, fakeModule, fakeFunction, fakeEvent;
static unsigned long long launches;
static unsigned lastGrid[3], lastBlock[3], lastSmem;
static unsigned char lastParams[sizeof(struct FlashtileFwdParams)];
/* The launch's second kernel parameter, as FlashtilePositions: a block's positions for modules compiled with
   position offsets (PositionsAbi.h), the tensor maps (or zeros) for others. */
static unsigned char lastSecond[sizeof(struct FlashtilePositions)];

CUresult cuInit(unsigned flags) {
  (void)flags;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device) {
  (void)device;
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *value = kStandInComputeMajor;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *value = kStandInComputeMinor;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *value = kStandInSharedMemoryPerBlock;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *value = kStandInMultiprocessors;
    break;
  default:
    *value = 0;
    break;
  }
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  (void)device;
  *context = (CUcontext)&fakeContext;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *context) {
  *context = (CUcontext)&fakeContext;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext context) {
  (void)context;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *device) {
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  (void)image;
  *module = (CUmodule)&fakeModule;
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule module) {
  (void)module;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
  (void)module, (void)name;
  *function = (CUfunction)&fakeFunction;
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  (void)function, (void)attribute, (void)value;
  return CUDA_SUCCESS;
}
/* Blocks of any kernel an SM holds at once: FLASHTILE_FAKE_BLOCKS_PER_SM (a non-negative integer; the split-KV
   tests set it to show that forward() asks the driver), else kStandInBlocksPerMultiprocessor (two, the split
   heuristic's assumption before it asked).
   A value that is not such an integer is CUDA_ERROR_INVALID_VALUE, so that a mistyped test cannot pass. */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction function, int threads, size_t smem) {
  (void)function, (void)threads, (void)smem;
  const char *text = getenv("FLASHTILE_FAKE_BLOCKS_PER_SM");
  if (!text) {
    *blocks = kStandInBlocksPerMultiprocessor;
    return CUDA_SUCCESS;
  }
  char *end = NULL;
  long value = strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 64)
    return CUDA_ERROR_INVALID_VALUE;
  *blocks = (int)value;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream stream, void **params, void **extra) {
  (void)f, (void)stream, (void)extra;
  lastGrid[0] = gx, lastGrid[1] = gy, lastGrid[2] = gz;
  lastBlock[0] = bx, lastBlock[1] = by, lastBlock[2] = bz;
  lastSmem = smem;
  memcpy(lastParams, params[0], sizeof(lastParams));
  memcpy(lastSecond, params[1], sizeof(lastSecond));
  ++launches;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra) {
  return cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                        config->blockDimZ, config->sharedMemBytes, config->hStream, params, extra);
}
CUresult cuMemAlloc_v2(CUdeviceptr *pointer, size_t bytes) {
  (void)bytes;
  *pointer = 256;
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr pointer) {
  (void)pointer;
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return CUDA_SUCCESS;
}
/* Device memory the host tests plant (fakeCudaPlant): copies from it read the planted bytes, 32-bit memsets over it
   write them (so a test sees what the runtime zeroed); everywhere else device memory reads as zeros. */
enum { kPlantedRegions = 8, kPlantedBytes = 4096 };
static struct {
  CUdeviceptr address;
  size_t bytes;
  unsigned char data[kPlantedBytes];
} planted[kPlantedRegions];
/* The planted bytes of [address, address + bytes), or NULL. */
static unsigned char *plantedAt(CUdeviceptr address, size_t bytes) {
  for (int i = 0; i < kPlantedRegions; ++i)
    if (planted[i].bytes && address >= planted[i].address && address + bytes <= planted[i].address + planted[i].bytes)
      return planted[i].data + (address - planted[i].address);
  return NULL;
}
/* Plants `bytes` (at most 4096) at `address`, replacing a region planted there before; 0 on success. */
int fakeCudaPlant(CUdeviceptr address, const void *data, size_t bytes) {
  int slot = -1;
  for (int i = 0; i < kPlantedRegions && slot < 0; ++i)
    if (planted[i].address == address || !planted[i].bytes)
      slot = i;
  if (slot < 0 || bytes > kPlantedBytes)
    return -1;
  planted[slot].address = address;
  planted[slot].bytes = bytes;
  memcpy(planted[slot].data, data, bytes);
  return 0;
}
/* Copies planted bytes back (what the runtime left there); 0 on success, -1 where nothing is planted. */
int fakeCudaPlanted(CUdeviceptr address, void *data, size_t bytes) {
  const unsigned char *at = plantedAt(address, bytes);
  if (!at)
    return -1;
  memcpy(data, at, bytes);
  return 0;
}
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  const unsigned char *at = plantedAt(src, bytes);
  if (at)
    memcpy(dst, at, bytes);
  else
    memset(dst, 0, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t bytes) {
  (void)dst, (void)value, (void)bytes;
  return CUDA_SUCCESS;
}
/* The tile counter of dynamic-scheduler kernels: recorded, for tests/python/host/dynsched_counter.py. */
static unsigned long long memsets32, lastMemset32Dst;
static unsigned lastMemset32Value;
static size_t lastMemset32Count;
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t count, CUstream stream) {
  (void)stream;
  unsigned char *at = plantedAt(dst, count * 4);
  for (size_t i = 0; at && i < count; ++i)
    memcpy(at + 4 * i, &value, 4);
  ++memsets32;
  lastMemset32Dst = dst;
  lastMemset32Value = value;
  lastMemset32Count = count;
  return CUDA_SUCCESS;
}
unsigned long long fakeCudaMemsetsD32(void) { return memsets32; }
unsigned long long fakeCudaLastMemsetD32(unsigned *value, size_t *count) {
  *value = lastMemset32Value;
  *count = lastMemset32Count;
  return lastMemset32Dst;
}
CUresult cuStreamSynchronize(CUstream stream) {
  (void)stream;
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
  (void)stream;
  *status = CU_STREAM_CAPTURE_STATUS_NONE; /* never inside a CUDA graph capture */
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent *event, unsigned flags) {
  (void)flags;
  *event = (CUevent)&fakeEvent;
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent event, CUstream stream) {
  (void)event, (void)stream;
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent event) {
  (void)event;
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  (void)start, (void)end;
  *ms = 0.f;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent event) {
  (void)event;
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult error, const char **text) {
  (void)error;
  *text = "fake driver";
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult error, const char **text) {
  (void)error;
  *text = "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
                                CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill) {
  (void)type, (void)rank, (void)address, (void)dims, (void)strides, (void)box, (void)elementStrides, (void)interleave,
      (void)swizzle, (void)l2, (void)fill;
  memset(map, 0, sizeof(*map));
  return CUDA_SUCCESS;
}
CUresult cuTensorMapReplaceAddress(CUtensorMap *map, void *address) {
  (void)map, (void)address;
  return CUDA_SUCCESS;
}

/* For tests and the benchmark: how many launches reached the driver, and the last one's configuration. */
unsigned long long fakeCudaLaunches(void) { return launches; }
void fakeCudaLastLaunch(unsigned grid[3], unsigned block[3], unsigned *smem) {
  memcpy(grid, lastGrid, sizeof(lastGrid));
  memcpy(block, lastBlock, sizeof(lastBlock));
  *smem = lastSmem;
}
const unsigned char *fakeCudaLastParams(void) { return lastParams; }
const unsigned char *fakeCudaLastSecond(void) { return lastSecond; }

/* NVRTC looks for libcuda.so.1 too and asks it for its private tables: there are none here, so it goes on
   without them, as on a machine with no driver. */
CUresult cuGetExportTable(const void **table, const CUuuid *id) {
  (void)id;
  *table = NULL;
  return CUDA_ERROR_NOT_SUPPORTED;
}
