// CudaDriver.cpp — dlopen of libcuda.so.1, symbol resolution, context setup and arch detection.
#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelInfo.h"

#include <dlfcn.h>

#include <atomic>
#include <initializer_list>

using namespace flashtile;

namespace {

constexpr const char *kDriverLibrary = "libcuda.so.1";

/// Returns the first candidate symbol the library exports, or null.
void *findSymbol(void *library, std::initializer_list<const char *> candidates) {
  for (const char *name : candidates)
    if (void *symbol = dlsym(library, name))
      return symbol;
  return nullptr;
}

} // namespace

namespace {
std::atomic<const CudaDriver *> standIn{nullptr};
} // namespace

void CudaDriver::useInsteadForTesting(const CudaDriver *driver) { standIn = driver; }

StatusOr<const CudaDriver *> CudaDriver::get() {
  if (const CudaDriver *driver = standIn.load(std::memory_order_relaxed))
    return driver;
  // Function-local statics give thread-safe one-time loading. The library is never closed: kernels and contexts
  // created through it may outlive any owner we could tie dlclose to.
  static CudaDriver driver;
  static const Status loaded = driver.load();
  if (!loaded.ok())
    return loaded;
  return &driver;
}

Status CudaDriver::load() {
  void *library = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *reason = dlerror();
    return Status::error(std::string("no NVIDIA driver: ") + kDriverLibrary + " could not be loaded (" +
                         (reason ? reason : "unknown reason") +
                         "); compiling/emitting kernels works without a GPU, running them needs one");
  }
#define FLASHTILE_RESOLVE_DRIVER_FUNCTION(member, ...)                                                                 \
  member = reinterpret_cast<decltype(member)>(findSymbol(library, {__VA_ARGS__}));                                     \
  if (!member)                                                                                                         \
    return Status::error(std::string(kDriverLibrary) + " does not export " + #__VA_ARGS__ +                            \
                         ": the NVIDIA driver is too old for flashtile (a CUDA 12 or newer driver is needed)");
  FLASHTILE_CUDA_DRIVER_FUNCTIONS(FLASHTILE_RESOLVE_DRIVER_FUNCTION)
#undef FLASHTILE_RESOLVE_DRIVER_FUNCTION
  return check(cuInit(0), "cuInit");
}

Status CudaDriver::check(CUresult result, std::string_view call) const {
  if (result == CUDA_SUCCESS)
    return Status();
  const char *name = nullptr;
  const char *description = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || !name)
    name = "unknown CUDA error";
  if (cuGetErrorString(result, &description) != CUDA_SUCCESS || !description)
    description = "no description";
  return Status::error(std::string(call) + " failed: " + name + " (" + description + ", code " +
                       std::to_string(static_cast<int>(result)) + ")");
}

StatusOr<CUdevice> CudaDriver::currentDevice() const {
  CUcontext context = nullptr;
  if (Status s = check(cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
    return s;
  if (!context) {
    // The primary context is the one the CUDA runtime (and so PyTorch) uses, so device pointers from either
    // side are valid in ours. It is deliberately never released: it lives until the process exits.
    CUdevice device = 0;
    if (Status s = check(cuDeviceGet(&device, 0), "cuDeviceGet(0)"); !s.ok())
      return s;
    if (Status s = check(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain"); !s.ok())
      return s;
    if (Status s = check(cuCtxSetCurrent(context), "cuCtxSetCurrent"); !s.ok())
      return s;
  }
  CUdevice device = 0;
  if (Status s = check(cuCtxGetDevice(&device), "cuCtxGetDevice"); !s.ok())
    return s;
  return device;
}

StatusOr<std::string> CudaDriver::detectArch() const {
  StatusOr<CUdevice> device = currentDevice();
  if (!device.ok())
    return device.status();
  int major = 0;
  int minor = 0;
  if (Status s = check(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *device),
                       "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
      !s.ok())
    return s;
  if (Status s = check(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *device),
                       "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
      !s.ok())
    return s;
  return archForComputeCapability(major, minor);
}

StatusOr<std::string> flashtile::archForComputeCapability(int major, int minor) {
  // A cubin for sm_XY runs on every X.Z device with Z >= Y (sm_80 on all of 8.x). The "a" targets use arch-specific
  // instructions (wgmma, tcgen05) and run only on exactly that compute capability, so 10.3 (which needs sm_103a) is
  // not matched by sm_100a. The major version is all but the last digit of the number: sm_100a is 10.0.
  std::string supported;
  for (std::string_view arch : kSupportedArchs) {
    std::string_view number = arch.substr(arch.find('_') + 1);
    const bool archSpecific = number.ends_with('a');
    if (archSpecific)
      number.remove_suffix(1);
    const int archMajor = std::stoi(std::string(number.substr(0, number.size() - 1)));
    const int archMinor = number.back() - '0';
    if (major == archMajor && (archSpecific ? minor == archMinor : minor >= archMinor))
      return std::string(arch);
    supported += (supported.empty() ? "" : ", ") + std::to_string(archMajor) + "." +
                 (archSpecific ? std::to_string(archMinor) : std::string("x")) + " (" + std::string(arch) + ")";
  }
  return Status::error("GPU compute capability " + std::to_string(major) + "." + std::to_string(minor) +
                       " is not supported; supported: " + supported);
}
