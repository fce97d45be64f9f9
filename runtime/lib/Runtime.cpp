// Runtime.cpp — kernel selection (ahead-of-time directories, then the JIT cache), module loading and launch.
#include "flashtile/runtime/Runtime.h"
#include "KvCacheInternal.h"
#include "flashtile/runtime/TensorMap.h"
#include "RegularFile.h"
#include "SplitKvInternal.h"
#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Elf.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/SplitKv.h"
#include "flashtile/runtime/Version.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

using namespace flashtile;
namespace fs = std::filesystem;

namespace {

/// exp(x) == exp2(x * log2(e)): kernels fold this factor into the scale and use exp2.
constexpr float kLog2e = 1.44269504088896340736f;
/// Above this much dynamic shared memory a kernel must opt in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
constexpr int kDefaultDynamicSmemLimit = 48 * 1024;
constexpr std::string_view kManifestExtension = ".manifest";
constexpr std::string_view kCubinExtension = ".cubin";

struct AotKernel {
  std::shared_ptr<const CachedKernel> kernel;
  std::string manifestPath;
};

/// A cubin loaded into one context.
struct LoadedModule {
  std::shared_ptr<const CachedKernel> kernel; // keeps the map key's address from being reused
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  CUfunction combine = nullptr; // split-KV kernels: KernelInfo::combineEntry
  CUfunction append = nullptr;  // KV-cache kernels: KernelInfo::appendEntry
  int blocksPerSm = kSplitKvBlocksPerSm; // split-KV kernels: the driver's occupancy, for the split heuristic
};

/// Larger than any manifest or kernel the compiler writes; a bigger file is damage, not a kernel.
constexpr size_t kMaxManifestBytes = 64 * 1024;
constexpr size_t kMaxCubinBytes = 256 * 1024 * 1024;

/// Reads, parses and checks one ahead-of-time kernel: the manifest and the cubin beside it must be regular files
/// (a FIFO or a directory is refused before it is read), the manifest's fields in range and written by this
/// compiler version, the cubin an ELF image for the manifest's arch that defines the manifest's entry. Every error
/// names the file and the reason.
StatusOr<AotKernel> loadAotKernel(const fs::path &manifestPath) {
  StatusOr<std::string> text = readRegularFile(manifestPath.string(), kMaxManifestBytes);
  if (!text.ok())
    return text.status();
  StatusOr<KernelInfo> info = KernelInfo::parse(*text);
  if (!info.ok())
    return info.status().withContext(manifestPath.string());
  if (info->compilerVersion != compilerVersion())
    return Status::error(manifestPath.string() + ": written by flashtile " + info->compilerVersion +
                         ", but this runtime is " + std::string(compilerVersion()) +
                         "; kernels are only loaded by the version that built them (rebuild the library with "
                         "this version's `flashtile aot`)");
  fs::path cubinPath = manifestPath;
  cubinPath.replace_extension(kCubinExtension);
  StatusOr<std::string> cubin = readRegularFile(cubinPath.string(), kMaxCubinBytes);
  if (!cubin.ok())
    return cubin.status().withContext(manifestPath.string() + ": its cubin is missing or unreadable");
  if (Status s = checkCubin(*cubin, info->arch, info->entry); !s.ok())
    return s.withContext(cubinPath.string() + " (for " + manifestPath.filename().string() + ")");
  if (info->splitKv())
    if (Status s = checkCubin(*cubin, info->arch, info->combineEntry); !s.ok())
      return s.withContext(cubinPath.string() + " (for " + manifestPath.filename().string() + ")");
  if (!info->appendEntry.empty())
    if (Status s = checkCubin(*cubin, info->arch, info->appendEntry); !s.ok())
      return s.withContext(cubinPath.string() + " (for " + manifestPath.filename().string() + ")");
  return AotKernel{std::make_shared<const CachedKernel>(CachedKernel{std::move(*info), std::move(*cubin)}),
                   manifestPath.string()};
}

/// Runs `body`, turning any exception into an error: nothing thrown inside the runtime (bad_alloc, a filesystem
/// error, a hook the user installed) leaves its public API.
template <class Body> auto guarded(std::string_view what, Body &&body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception &e) {
    return Status::error(std::string(what) + ": internal error: " + e.what());
  } catch (...) {
    return Status::error(std::string(what) + ": internal error (a non-standard exception)");
  }
}

/// FLASHTILE_CHECK_VARLEN=1 (read at each varlen call): forward() copies the device offsets to the host and checks
/// them (Runtime::validateCuSeqlens) before launching.
bool checkVarlenOffsetsOnDevice() {
  const char *value = std::getenv("FLASHTILE_CHECK_VARLEN");
  return value && *value && std::string_view(value) != "0";
}

/// Copies args' device offsets after the work already on `stream` (which may be producing them) and checks them.
Status checkDeviceCuSeqlens(const CudaDriver &driver, const AttentionArgs &args, CUstream stream) {
  if (Status s = driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize"); !s.ok())
    return s;
  std::vector<int> offsetsQ(size_t(args.batch) + 1), offsetsK(size_t(args.batch) + 1);
  for (auto [device, host] : {std::pair{args.cuSeqlensQ, &offsetsQ}, {args.cuSeqlensK, &offsetsK}})
    if (Status s = driver.check(
            driver.cuMemcpyDtoH_v2(host->data(), reinterpret_cast<CUdeviceptr>(device), host->size() * sizeof(int)),
            "cuMemcpyDtoH(cu_seqlens)");
        !s.ok())
      return s;
  return Runtime::validateCuSeqlens(args, offsetsQ.data(), offsetsK.data()).withContext("FLASHTILE_CHECK_VARLEN");
}

/// Whether two lists of variant numbers are the same bit for bit: a rule may tell -0 from 0 (1 / x), and NaN is
/// never a number a rule accepted before.
bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y) && !std::isnan(x);
         });
}

/// The kernel parameter block of a call (KernelAbi.h): pointers, strides, sizes, scales and the variant's numbers.
/// Split-KV fields (split count, workspace) stay zero; the split launch sets them.
FlashtileFwdParams paramsFor(const AttentionArgs &args) {
  const bool varlen = args.isVarlen();
  FlashtileFwdParams params{};
  params.q = args.q;
  params.k = args.k;
  params.v = args.v;
  params.o = args.o;
  params.lse = args.lse;
  // Varlen: the kernel starts each sequence at its cu_seqlens offset; the batch strides are 0 (KernelAbi.h).
  params.qBatchStride = varlen ? 0 : args.qStride[0];
  params.qRowStride = args.qStride[1];
  params.qHeadStride = args.qStride[2];
  params.kBatchStride = varlen ? 0 : args.kStride[0];
  params.kRowStride = args.kStride[1];
  params.kHeadStride = args.kStride[2];
  params.vBatchStride = varlen ? 0 : args.vStride[0];
  params.vRowStride = args.vStride[1];
  params.vHeadStride = args.vStride[2];
  params.oBatchStride = varlen ? 0 : args.oStride[0];
  params.oRowStride = args.oStride[1];
  params.oHeadStride = args.oStride[2];
  // LSE: B x Hq x Sq, or Hq x total_q for varlen (each sequence's rows start at its offset).
  params.lseBatchStride = varlen ? 0 : static_cast<long long>(args.headsQ) * args.seqlenQ;
  params.lseHeadStride = args.seqlenQ;
  params.cuSeqlensQ = args.cuSeqlensQ;
  params.cuSeqlensK = args.cuSeqlensK;
  params.batch = args.batch;
  params.headsQ = args.headsQ;
  params.headsKv = args.headsKv;
  params.seqlenQ = args.seqlenQ;
  params.seqlenK = args.seqlenK;
  params.softmaxScale = args.effectiveScale();
  params.scaleLog2 = params.softmaxScale * kLog2e;
  std::copy(args.variantParams.begin(), args.variantParams.end(), params.variantParams);
  std::copy(args.inputs.begin(), args.inputs.end(), params.inputs);
  detail::fillKvCacheParams(args, params);
  return params;
}

/// The TMA descriptors of `args` for boxes of blockM/blockN rows. Encoding three descriptors costs a few
/// microseconds of driver calls; a thread's last call usually repeats (the same tensors, or the same shapes with new
/// pointers), so each thread keeps its last set and re-points it when only the pointers changed.
StatusOr<AttentionTensorMaps> tensorMapsFor(const AttentionArgs &args, int blockM, int blockN) {
  struct Key {
    const void *q, *k, *v;
    int dtype, batch, seqlenQ, seqlenK, headsQ, headsKv, headDim, headDimV, blockM, blockN;
    bool varlen;
    std::array<long long, 4> qStride, kStride, vStride;
    bool sameShape(const Key &o) const {
      return dtype == o.dtype && batch == o.batch && seqlenQ == o.seqlenQ && seqlenK == o.seqlenK &&
             headsQ == o.headsQ && headsKv == o.headsKv && headDim == o.headDim && headDimV == o.headDimV &&
             blockM == o.blockM && blockN == o.blockN && varlen == o.varlen && qStride == o.qStride &&
             kStride == o.kStride && vStride == o.vStride;
    }
  };
  struct Last {
    bool valid = false;
    Key key{};
    AttentionTensorMaps maps{};
  };
  thread_local Last last;
  const Key key{args.q,          args.k,       args.v,       static_cast<int>(args.dtype), args.batch, args.seqlenQ,
                args.seqlenK,    args.headsQ,  args.headsKv, args.headDim, args.headDimV, blockM, blockN,
                args.isVarlen(), args.qStride, args.kStride, args.vStride};
  if (last.valid && last.key.sameShape(key)) {
    if (key.q == last.key.q && key.k == last.key.k && key.v == last.key.v)
      return last.maps;
    AttentionTensorMaps maps = last.maps;
    bool repointed = replaceTensorMapAddress(maps.q, args.q).ok();
    if (repointed && args.seqlenK > 0)
      repointed = replaceTensorMapAddress(maps.k, args.k).ok() && replaceTensorMapAddress(maps.v, args.v).ok();
    if (repointed) {
      last.key = key;
      last.maps = maps;
      return maps;
    }
  }
  last.valid = false;
  StatusOr<AttentionTensorMaps> maps = attentionTensorMaps(args, blockM, blockN);
  if (!maps.ok())
    return maps.status();
  last = Last{true, key, *maps};
  return *maps;
}

/// Fills the kernel's parameter block from `args` and launches it on `stream`; the error text is built only
/// for a failed launch.
/// `smCount` is the device's SM count (read for persistent kernels only); `tileCounter` the zeroed counter of a
/// dynamic-scheduler kernel (tileCounterFor), else 0.
Status launchKernel(const CudaDriver &driver, CUfunction function, const KernelInfo &info, const AttentionArgs &args,
                    CUstream stream, int smCount, CUdeviceptr tileCounter = 0) {
  const bool varlen = args.isVarlen();
  const int gridRows = varlen ? args.maxSeqlenQ : args.seqlenQ;
  FlashtileFwdParams params = paramsFor(args);

  unsigned gridX = static_cast<unsigned>((static_cast<long long>(gridRows) + info.blockM - 1) / info.blockM);
  unsigned gridY = static_cast<unsigned>(args.headsQ), gridZ = static_cast<unsigned>(args.batch);
  if (info.persistent) {
    // One block an SM (a persistent block holds the SM's shared memory), never more blocks than units of work (two
    // Q tiles of a (batch, head) pair each, KernelInfo::persistent; one Q tile each for the dynamic scheduler); the
    // counts fit an int (validateFor bounds the grid of the non-persistent launch, the same tiles).
    const long long pairs = static_cast<long long>(args.headsQ) * args.batch;
    const long long units = info.tileCounter ? gridX * pairs : (static_cast<long long>(gridX) + 1) / 2 * pairs;
    params.tileCounter = reinterpret_cast<int *>(tileCounter);
    params.qTiles = static_cast<int>(gridX);
    gridX = static_cast<unsigned>(std::min<long long>(units, std::max(smCount, 1)));
    gridY = gridZ = 1;
  }
  // TMA kernels take the descriptors of Q, K and V as a second parameter, encoded for this call's tensors.
  AttentionTensorMaps maps{};
  if (info.tensorMaps) {
    StatusOr<AttentionTensorMaps> encoded = tensorMapsFor(args, info.blockM, info.blockN);
    if (!encoded.ok())
      return Status::error("TMA descriptors of " + info.entry + ": " + encoded.status().message());
    maps = *encoded;
  }
  void *kernelParams[] = {&params, &maps};
  CUresult launched = driver.cuLaunchKernel(function, gridX, gridY, gridZ, info.threads, 1, 1, info.smemBytes, stream,
                                            kernelParams, nullptr);
  if (launched == CUDA_SUCCESS)
    return Status();
  return driver.check(launched, "cuLaunchKernel(" + info.entry + ")");
}

/// Dynamic-scheduler kernels (KernelInfo::tileCounter): the launch's tile counter, an int zeroed on `stream` before
/// the kernel (cuMemsetD32Async, ordered after the stream's earlier work and before this launch), so each launch
/// starts at unit 0 and no two launches in flight share one: the first 4 bytes of the caller's workspace (the
/// caller keeps one workspace per stream, as for split-KV), else of the runtime's own buffer for (context, stream),
/// whose mutex `lock` then holds until the kernel is queued (another call on the stream may not grow it meanwhile).
/// Under CUDA graph capture the caller must pass a workspace: the runtime's buffer may move between replays.
StatusOr<CUdeviceptr> tileCounterFor(const CudaDriver &driver, detail::SplitKvWorkspaces &workspaces,
                                     std::unique_lock<std::mutex> &lock, const KernelInfo &info,
                                     const AttentionArgs &args, CUstream stream) {
  constexpr size_t kCounterBytes = sizeof(int);
  CUdeviceptr counter = reinterpret_cast<CUdeviceptr>(args.workspace);
  if (args.workspace) {
    if (args.workspaceBytes < kCounterBytes)
      return Status::error("workspaceBytes is " + std::to_string(args.workspaceBytes) + "; kernel " + info.entry +
                           " (schedule " + info.schedule +
                           ", dynamic scheduler) keeps its tile counter there and "
                           "needs " +
                           std::to_string(kCounterBytes));
    if (reinterpret_cast<uintptr_t>(args.workspace) % kCounterBytes != 0)
      return Status::error("workspace is not 4-byte aligned; kernel " + info.entry +
                           " (dynamic scheduler) keeps an int tile counter at its start");
  } else {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (Status s = driver.check(driver.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing"); !s.ok())
      return s;
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
      return Status::error("kernel " + info.entry + " (schedule " + info.schedule +
                           ", dynamic scheduler) takes its tiles from a counter in a workspace; under CUDA graph "
                           "capture pass one (workspace, workspaceBytes >= " +
                           std::to_string(kCounterBytes) + ")");
    CUcontext context = nullptr;
    if (Status s = driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
      return s;
    lock = std::unique_lock<std::mutex>(workspaces.mutex());
    StatusOr<CUdeviceptr> owned = workspaces.buffer(driver, context, stream, kCounterBytes);
    if (!owned.ok())
      return owned.status();
    counter = *owned;
  }
  if (Status s = driver.check(driver.cuMemsetD32Async(counter, 0, 1, stream), "cuMemsetD32Async (tile counter)");
      !s.ok())
    return s;
  return counter;
}

/// K/V-step kernels (KernelInfo::kvSteps, the fa1 schedule): one launch per K/V tile of the longest sequence (one
/// when there is no key), in order on `stream`, the online-softmax state of every LSE row in `workspace` between
/// launches (KernelAbi.h: stateAcc, then stateMax, then stateSum).
Status launchSteps(const CudaDriver &driver, CUfunction function, const KernelInfo &info, const AttentionArgs &args,
                   CUstream stream, CUdeviceptr workspace, long long rows) {
  const long long keys = args.isVarlen() ? args.maxSeqlenK : args.seqlenK;
  const long long steps = std::max(1LL, (keys + info.blockN - 1) / info.blockN);
  const long long gridRows = args.isVarlen() ? args.maxSeqlenQ : args.seqlenQ;
  const unsigned gridX = static_cast<unsigned>((gridRows + info.blockM - 1) / info.blockM);
  FlashtileFwdParams params = paramsFor(args);
  params.stateAcc = reinterpret_cast<float *>(workspace);
  params.stateMax = reinterpret_cast<float *>(workspace + rows * args.headDimV * sizeof(float));
  params.stateSum = reinterpret_cast<float *>(workspace + rows * (args.headDimV + 1) * sizeof(float));
  void *kernelParams[] = {&params};
  // cuLaunchKernel copies the parameter block, so each launch keeps its own step.
  for (long long step = 0; step < steps; ++step) {
    params.kvStep = static_cast<int>(step);
    if (Status s = driver.check(driver.cuLaunchKernel(function, gridX, args.headsQ, args.batch, info.threads, 1, 1,
                                                      info.smemBytes, stream, kernelParams, nullptr),
                                "cuLaunchKernel(" + info.entry + ", K/V step " + std::to_string(step) + ")");
        !s.ok())
      return s;
  }
  return Status();
}

std::string listOrNone(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "none" : text;
}

} // namespace

struct Runtime::Impl {
  explicit Impl(KernelCache::Options cacheOptions) : cache(std::move(cacheOptions)) {}

  KernelCache cache;

  std::mutex configMutex; // guards the eight fields below
  std::vector<AotKernel> aotKernels;
  std::map<std::string, std::shared_ptr<const CachedKernel>> aotKernelByVariant; // one kernel of each variant
  std::vector<std::string> aotDirs;
  CompileFn compile;
  ShapeClassFn shapeClassOf;
  std::map<std::string, std::string> ownShapeClass; // spec key -> shapeClassOf's answer
  VariantCheckFn variantCheck;
  std::string schedule{kDefaultSchedule};
  bool scheduleSet = false; // setSchedule was called: the libraries' dispatch rules (preferredOver) are not used
  std::string decodeSchedule{kDefaultDecodeSchedule};

  /// Whether a loaded library has a kernel of `schedule` for `spec`'s arch, dtype, head dims and variant (any
  /// shape class: the default class's serves every shape).
  /// The schedule of a loaded kernel whose dispatch rule prefers it over `spec`'s schedule for `spec`'s arch,
  /// dtype, head dims and variant (KernelInfo::preferredOver), or empty.
  std::string preferredSchedule(const KernelSpec &spec) const {
    auto it = std::find_if(aotKernels.begin(), aotKernels.end(), [&](const AotKernel &aot) {
      const KernelInfo &info = aot.kernel->info;
      return info.preferredOver == spec.schedule && info.arch == spec.arch && info.dtype == spec.dtype &&
             info.headDim == spec.headDim && info.headDimV == spec.headDimV && info.variant == spec.variant &&
             info.readsKvCache() == spec.kvCache;
    });
    return it == aotKernels.end() ? std::string() : it->kernel->info.schedule;
  }

  std::mutex gpuMutex; // guards the two maps below
  std::map<std::pair<CUcontext, const CachedKernel *>, LoadedModule> modules;
  std::map<CUdevice, std::string> archByDevice;
  std::map<CUdevice, int> smCountByDevice;
  detail::SplitKvWorkspaces workspaces;

  /// The SM count of the current context's device.
  StatusOr<int> smCount(const CudaDriver &driver);

  /// What a launched call resolved to, for the calls after it (the warm path): the kernel and function for its
  /// variant, dtype, head dims and shape class on one context, and the variant numbers last accepted for it. The
  /// spec, its key strings and the maps above are then skipped; every argument check still runs, only the
  /// variant-number rules are not evaluated again for numbers they accepted before. Emptied whenever the
  /// configuration (compiler, variant check, schedule, ahead-of-time kernels) changes.
  struct Dispatch {
    CUcontext context = nullptr;
    DType dtype = DType::BF16;
    int headDim = 0;
    int headDimV = 0;
    std::string_view shapeClass; // one of the kShapeClasses constants, as shapeClassFor returns it
    std::shared_ptr<const CachedKernel> kernel;
    CUfunction function = nullptr;
    std::vector<float> acceptedParams;

    bool serves(CUcontext ctx, const AttentionArgs &args, std::string_view cls) const {
      return context == ctx && dtype == args.dtype && headDim == args.headDim && headDimV == args.headDimV &&
             shapeClass.data() == cls.data();
    }
  };
  std::mutex dispatchMutex; // guards the two fields below
  std::unordered_map<std::string, std::vector<Dispatch>> dispatchByVariant;
  /// Counts clearDispatch() calls, so that a call resolved under an older configuration files nothing.
  uint64_t dispatchGeneration = 0;

  void clearDispatch() {
    std::lock_guard<std::mutex> lock(dispatchMutex);
    dispatchByVariant.clear();
    ++dispatchGeneration;
  }
  uint64_t currentDispatchGeneration() {
    std::lock_guard<std::mutex> lock(dispatchMutex);
    return dispatchGeneration;
  }
  /// Files the dispatch of a call that passed every check on `context` and resolved `kernel` (null: only refresh
  /// the accepted numbers of a dispatch filed before), unless the configuration changed since `generation`.
  void remember(CUcontext context, const AttentionArgs &args, std::shared_ptr<const CachedKernel> kernel,
                CUfunction function, uint64_t generation);
  /// The variant-number checks of forward(): the compiler's variant check, then the rules of an ahead-of-time
  /// kernel of the variant.
  Status checkVariantNumbers(const AttentionArgs &args);
  /// forward() for a call whose kernel a previous call resolved on this thread's context; nothing when there is no
  /// such dispatch (or no current context), and the slow path must run.
  std::optional<Status> forwardWarm(const AttentionArgs &args, CUstream stream);

  StatusOr<std::string> arch(const CudaDriver &driver);
  /// The ahead-of-time kernel for `spec` in the default shape class, or null; configMutex held.
  std::shared_ptr<const CachedKernel> aotKernelOfDefaultClass(const KernelSpec &spec) const {
    KernelSpec fallback = spec;
    fallback.shapeClass = std::string(kDefaultShapeClass);
    for (const AotKernel &aot : aotKernels)
      if (matches(aot.kernel->info, fallback))
        return aot.kernel;
    return nullptr;
  }
  /// Any ahead-of-time kernel of `variant`, or null.
  std::shared_ptr<const CachedKernel> aotKernelOfVariant(const std::string &variant) {
    std::lock_guard<std::mutex> lock(configMutex);
    auto it = aotKernelByVariant.find(variant);
    return it == aotKernelByVariant.end() ? nullptr : it->second;
  }
  StatusOr<LoadedModule> function(const CudaDriver &driver, const std::shared_ptr<const CachedKernel> &kernel);
};

StatusOr<int> Runtime::Impl::smCount(const CudaDriver &driver) {
  StatusOr<CUdevice> device = driver.currentDevice();
  if (!device.ok())
    return device.status();
  std::lock_guard<std::mutex> lock(gpuMutex);
  if (auto it = smCountByDevice.find(*device); it != smCountByDevice.end())
    return it->second;
  int count = 0;
  if (Status s = driver.check(driver.cuDeviceGetAttribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, *device),
                              "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
      !s.ok())
    return s;
  smCountByDevice[*device] = count;
  return count;
}

StatusOr<std::string> Runtime::Impl::arch(const CudaDriver &driver) {
  StatusOr<CUdevice> device = driver.currentDevice();
  if (!device.ok())
    return device.status();
  {
    std::lock_guard<std::mutex> lock(gpuMutex);
    if (auto it = archByDevice.find(*device); it != archByDevice.end())
      return it->second;
  }
  StatusOr<std::string> detected = driver.detectArch();
  if (!detected.ok())
    return detected;
  std::lock_guard<std::mutex> lock(gpuMutex);
  archByDevice[*device] = *detected;
  return detected;
}

StatusOr<LoadedModule> Runtime::Impl::function(const CudaDriver &driver,
                                               const std::shared_ptr<const CachedKernel> &kernel) {
  CUcontext context = nullptr;
  if (Status s = driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
    return s;
  std::lock_guard<std::mutex> lock(gpuMutex);
  if (auto it = modules.find({context, kernel.get()}); it != modules.end())
    return it->second;

  const KernelInfo &info = kernel->info;
  LoadedModule loaded{kernel, context};
  // Ahead-of-time kernels were checked without a GPU (Elf.h); what only the driver can tell (a cubin it will not
  // load here, an entry it cannot find) still names the file.
  auto withOrigin = [&](const Status &status) {
    std::lock_guard<std::mutex> configLock(configMutex);
    for (const AotKernel &aot : aotKernels)
      if (aot.kernel == kernel)
        return status.withContext(aot.manifestPath);
    return status;
  };
  if (Status s = driver.check(driver.cuModuleLoadData(&loaded.module, kernel->cubin.data()),
                              "cuModuleLoadData(" + info.entry + ")");
      !s.ok())
    return withOrigin(s);
  auto fail = [&](Status status) {
    driver.cuModuleUnload(loaded.module);
    return withOrigin(status);
  };
  if (Status s = driver.check(driver.cuModuleGetFunction(&loaded.function, loaded.module, info.entry.c_str()),
                              "cuModuleGetFunction(" + info.entry + ")");
      !s.ok())
    return fail(s);
  if (info.splitKv())
    if (Status s = driver.check(driver.cuModuleGetFunction(&loaded.combine, loaded.module, info.combineEntry.c_str()),
                                "cuModuleGetFunction(" + info.combineEntry + ")");
        !s.ok())
      return fail(s);
  if (!info.appendEntry.empty())
    if (Status s = driver.check(driver.cuModuleGetFunction(&loaded.append, loaded.module, info.appendEntry.c_str()),
                                "cuModuleGetFunction(" + info.appendEntry + ")");
        !s.ok())
      return fail(s);
  if (info.smemBytes > kDefaultDynamicSmemLimit) {
    CUdevice device = 0;
    int limit = 0;
    if (Status s = driver.check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice"); !s.ok())
      return fail(s);
    if (Status s = driver.check(
            driver.cuDeviceGetAttribute(&limit, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
            "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
        !s.ok())
      return fail(s);
    if (info.smemBytes > limit)
      return fail(Status::error("kernel " + info.entry + " needs " + std::to_string(info.smemBytes) +
                                " bytes of dynamic shared memory; this GPU allows " + std::to_string(limit)));
    if (Status s = driver.check(
            driver.cuFuncSetAttribute(loaded.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, info.smemBytes),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + info.entry + ")");
        !s.ok())
      return fail(s);
  }
  if (info.splitKv()) {
    // The split heuristic counts waves of this kernel's blocks: its registers and shared memory decide how many an
    // SM holds (2 for 64-row blocks at head dim 128, 3 for 32-row ones).
    int blocks = 0;
    if (Status s = driver.check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, loaded.function,
                                                                                 info.threads, info.smemBytes),
                                "cuOccupancyMaxActiveBlocksPerMultiprocessor(" + info.entry + ")");
        !s.ok())
      return fail(s);
    if (blocks < 1)
      return fail(Status::error("kernel " + info.entry + " fits no thread block on an SM of this GPU (" +
                                std::to_string(info.threads) + " threads, " + std::to_string(info.smemBytes) +
                                " bytes of shared memory)"));
    loaded.blocksPerSm = blocks;
  }
  modules.emplace(std::pair{context, kernel.get()}, loaded);
  return loaded;
}

void Runtime::Impl::remember(CUcontext context, const AttentionArgs &args, std::shared_ptr<const CachedKernel> kernel,
                             CUfunction function, uint64_t generation) {
  const std::string_view shapeClass = shapeClassFor(args);
  std::lock_guard<std::mutex> lock(dispatchMutex);
  if (generation != dispatchGeneration)
    return;
  std::vector<Dispatch> &known = dispatchByVariant[args.variant];
  for (Dispatch &dispatch : known)
    if (dispatch.serves(context, args, shapeClass)) {
      dispatch.acceptedParams = args.variantParams;
      return;
    }
  if (!kernel)
    return;
  known.push_back(Dispatch{context, args.dtype, args.headDim, args.headDimV, shapeClass, std::move(kernel), function,
                           args.variantParams});
}

Status Runtime::Impl::checkVariantNumbers(const AttentionArgs &args) {
  VariantCheckFn check;
  {
    std::lock_guard<std::mutex> lock(configMutex);
    check = variantCheck;
  }
  if (check)
    if (Status s = check(args); !s.ok())
      return s;
  // Variant numbers are checked before anything touches the GPU, with or without one: every kernel of a variant
  // carries the variant's rules, so any of its ahead-of-time kernels can judge them.
  if (std::shared_ptr<const CachedKernel> ofVariant = aotKernelOfVariant(args.variant))
    if (Status s = validateVariantArgs(args, ofVariant->info); !s.ok())
      return s;
  return Status();
}

std::optional<Status> Runtime::Impl::forwardWarm(const AttentionArgs &args, CUstream stream) {
  StatusOr<const CudaDriver *> loaded = CudaDriver::get();
  if (!loaded.ok())
    return std::nullopt;
  const CudaDriver &driver = **loaded;
  CUcontext context = nullptr;
  if (driver.cuCtxGetCurrent(&context) != CUDA_SUCCESS || !context)
    return std::nullopt; // the slow path makes a context current (or reports why it cannot)
  const std::string_view shapeClass = shapeClassFor(args);
  const CachedKernel *kernel = nullptr;
  CUfunction function = nullptr;
  bool numbersAccepted = false;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(dispatchMutex);
    generation = dispatchGeneration;
    auto known = dispatchByVariant.find(args.variant);
    if (known == dispatchByVariant.end())
      return std::nullopt;
    for (const Dispatch &dispatch : known->second)
      if (dispatch.serves(context, args, shapeClass)) {
        kernel = dispatch.kernel.get(); // kept alive by the module table and the caches, as long as the runtime
        function = dispatch.function;
        numbersAccepted = sameBits(dispatch.acceptedParams, args.variantParams);
        break;
      }
  }
  if (!kernel)
    return std::nullopt;
  const KernelInfo &info = kernel->info;
  if (!numbersAccepted)
    if (Status s = checkVariantNumbers(args); !s.ok())
      return s;
  if (args.isVarlen() && checkVarlenOffsetsOnDevice())
    if (Status s = checkDeviceCuSeqlens(driver, args, stream); !s.ok())
      return s;
  if (numbersAccepted) {
    // The same checks as validateFor, minus the rules that accepted these numbers already; its message on failure.
    bool inputsOk = args.inputs.size() == info.inputNames.size();
    for (size_t i = 0; inputsOk && i < args.inputs.size(); ++i)
      inputsOk = args.inputs[i] && reinterpret_cast<uintptr_t>(args.inputs[i]) % sizeof(float) == 0;
    const long long gridRows = args.isVarlen() ? args.maxSeqlenQ : args.seqlenQ;
    const long long blocks = (gridRows + info.blockM - 1) / std::max(info.blockM, 1) * args.headsQ * args.batch;
    if (!inputsOk || blocks > std::numeric_limits<int>::max())
      if (Status s = validateFor(args, info); !s.ok())
        return s;
  } else {
    if (Status s = validateFor(args, info); !s.ok())
      return s;
    remember(context, args, nullptr, function, generation);
  }
  int sms = 0;
  if (info.persistent) {
    StatusOr<int> counted = smCount(driver);
    if (!counted.ok())
      return counted.status();
    sms = *counted;
  }
  std::unique_lock<std::mutex> workspaceLock;
  CUdeviceptr counter = 0;
  if (info.tileCounter) {
    StatusOr<CUdeviceptr> zeroed = tileCounterFor(driver, workspaces, workspaceLock, info, args, stream);
    if (!zeroed.ok())
      return zeroed.status();
    counter = *zeroed;
  }
  return launchKernel(driver, function, info, args, stream, sms, counter);
}

Runtime::Runtime() : Runtime(KernelCache::optionsFromEnvironment()) {}

Runtime::Runtime(KernelCache::Options cacheOptions) : impl(std::make_unique<Impl>(std::move(cacheOptions))) {}

Runtime::~Runtime() {
  if (impl->modules.empty())
    return;
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return;
  impl->workspaces.release(**driver);
  // cuModuleUnload acts on the current context, so each module's own context is made current for it and the
  // caller's is restored afterwards. Errors are ignored: a context destroyed by its owner took its modules along.
  CUcontext callerContext = nullptr;
  (*driver)->cuCtxGetCurrent(&callerContext);
  for (auto &[key, loaded] : impl->modules) {
    if ((*driver)->cuCtxSetCurrent(loaded.context) == CUDA_SUCCESS)
      (*driver)->cuModuleUnload(loaded.module);
  }
  (*driver)->cuCtxSetCurrent(callerContext);
}

KernelCache &Runtime::cache() { return impl->cache; }

LogHandler Runtime::setLogHandler(LogHandler handler) { return flashtile::setLogHandler(std::move(handler)); }

void Runtime::setCompiler(CompileFn compile, ShapeClassFn shapeClassOf) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->compile = std::move(compile);
  impl->shapeClassOf = std::move(shapeClassOf);
  impl->ownShapeClass.clear();
  impl->clearDispatch();
}

void Runtime::setVariantCheck(VariantCheckFn check) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->variantCheck = std::move(check);
  impl->clearDispatch();
}

void Runtime::setSchedule(std::string schedule) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->schedule = std::move(schedule);
  impl->scheduleSet = true;
  impl->clearDispatch();
}

void Runtime::setDecodeSchedule(std::string schedule) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->decodeSchedule = std::move(schedule);
}

Status Runtime::loadAotDirectory(const std::string &dir) {
  return guarded("loadAotDirectory('" + dir + "')", [&] { return loadAotDirectoryUnguarded(dir); });
}

Status Runtime::loadAotDirectoryUnguarded(const std::string &dir) {
  std::error_code error;
  fs::directory_iterator entries(dir, error);
  if (error)
    return Status::error("ahead-of-time directory '" + dir + "' cannot be read: " + error.message());
  std::vector<fs::path> manifests;
  // Incremented with an error code: a directory that fails mid-listing is an error value, not an exception.
  for (fs::directory_iterator end; entries != end; entries.increment(error)) {
    if (error)
      break;
    if (entries->path().extension() == kManifestExtension)
      manifests.push_back(entries->path());
  }
  if (error)
    return Status::error("ahead-of-time directory '" + dir + "' cannot be listed: " + error.message());
  if (manifests.empty())
    return Status::error("ahead-of-time directory '" + dir + "' has no *" + std::string(kManifestExtension) + " files");
  // Sorted so that errors (and the order kernels are listed in) do not depend on the file system.
  std::sort(manifests.begin(), manifests.end());

  std::lock_guard<std::mutex> lock(impl->configMutex);
  std::vector<AotKernel> added;
  for (const fs::path &manifest : manifests) {
    StatusOr<AotKernel> kernel = loadAotKernel(manifest);
    if (!kernel.ok())
      return kernel.status();
    KernelSpec spec = kernel->kernel->info.spec();
    for (const std::vector<AotKernel> *known : {&impl->aotKernels, &added})
      for (const AotKernel &other : *known)
        if (matches(other.kernel->info, spec))
          return Status::error(manifest.string() + " and " + other.manifestPath + " both provide " + spec.key());
    added.push_back(std::move(*kernel));
  }
  impl->aotKernels.insert(impl->aotKernels.end(), added.begin(), added.end());
  for (const AotKernel &aot : added)
    impl->aotKernelByVariant.emplace(aot.kernel->info.variant, aot.kernel);
  impl->aotDirs.push_back(dir);
  impl->clearDispatch(); // ahead-of-time kernels come before the JIT's
  return Status();
}

StatusOr<KernelSpec> Runtime::specFor(const AttentionArgs &args, const std::string &arch) const {
  return guarded("specFor", [&] { return specForUnguarded(args, arch); });
}

StatusOr<KernelSpec> Runtime::specForUnguarded(const AttentionArgs &args, const std::string &arch) const {
  if (Status s = validate(args); !s.ok())
    return s;
  if (std::find(kSupportedArchs.begin(), kSupportedArchs.end(), arch) == kSupportedArchs.end())
    return Status::error("arch '" + arch + "' is not supported; supported: sm_80, sm_90a, sm_100a");
  std::string schedule;
  {
    std::lock_guard<std::mutex> lock(impl->configMutex);
    schedule = impl->schedule;
    // Decode-sized calls (a few query rows a sequence) run the decode schedule's split-KV kernels.
    if (!impl->decodeSchedule.empty() && isDecodeCall(args))
      schedule = impl->decodeSchedule;
  }
  if (!isValidId(schedule))
    return Status::error("schedule '" + schedule + "' (set with setSchedule or setDecodeSchedule) is not an id such as "
                         "\"fa2\"");
  KernelSpec spec{arch,     std::string(dtypeName(args.dtype)), args.headDim, args.headDimV, args.variant,
                  schedule, std::string(shapeClassFor(args))};
  // Cache calls run kernels compiled with the cache code, plain calls kernels without it.
  spec.kvCache = args.kvCache.enabled();
  spec.rotary = detail::rotaryPairs(args);
  {
    std::lock_guard<std::mutex> lock(impl->configMutex);
    if (!impl->scheduleSet && !impl->compile && schedule == kDefaultSchedule)
      if (std::string preferred = impl->preferredSchedule(spec); !preferred.empty())
        spec.schedule = preferred;
  }
  return spec;
}

std::string_view Runtime::shapeClassFor(const AttentionArgs &args) {
  // Dense: every sequence has seqlenQ and seqlenK rows; varlen: they are total_q and total_k, over `batch`
  // sequences. Both must be short: a few queries over long keys (chunked prefill) walk long, like the default.
  long long sequences = args.isVarlen() ? std::max(args.batch, 1) : 1, limit = kShortSeqlen * sequences;
  return args.seqlenQ <= limit && args.seqlenK <= limit ? kShortShapeClass : kDefaultShapeClass;
}

StatusOr<KernelSpec> Runtime::specFor(const AttentionArgs &args) {
  return guarded("specFor", [&]() -> StatusOr<KernelSpec> {
    if (Status s = validate(args); !s.ok())
      return s;
    StatusOr<const CudaDriver *> driver = CudaDriver::get();
    if (!driver.ok())
      return driver.status();
    StatusOr<std::string> arch = impl->arch(**driver);
    if (!arch.ok())
      return arch.status();
    return specFor(args, *arch);
  });
}

StatusOr<std::shared_ptr<const CachedKernel>> Runtime::findKernel(const KernelSpec &spec) {
  return guarded("findKernel", [&] { return findKernelUnguarded(spec); });
}

StatusOr<std::shared_ptr<const CachedKernel>> Runtime::findKernelUnguarded(const KernelSpec &asked) {
  KernelSpec spec = asked;
  CompileFn compile;
  ShapeClassFn shapeClassOf;
  {
    std::lock_guard<std::mutex> lock(impl->configMutex);
    for (const AotKernel &aot : impl->aotKernels)
      if (matches(aot.kernel->info, spec))
        return aot.kernel;
    if (spec.shapeClass != kDefaultShapeClass && impl->shapeClassOf) {
      // The compiler knows whether the class is tiled differently; its answer is the same for every call.
      auto known = impl->ownShapeClass.find(spec.key());
      if (known != impl->ownShapeClass.end())
        spec.shapeClass = known->second;
      else
        shapeClassOf = impl->shapeClassOf;
    }
  }
  if (shapeClassOf) {
    // Asked outside the lock: the compiler may take milliseconds (it schedules the variant's program). Its answer
    // is filed in the disk cache beside the kernels, so that a fresh process asks only the disk.
    const std::string noteKey = "flashtile-shape-class;" + spec.key() + ";compiler=" + std::string(compilerVersion());
    std::optional<std::string> noted = impl->cache.readNote(noteKey);
    if (noted && *noted != spec.shapeClass && *noted != kDefaultShapeClass)
      noted.reset(); // not an answer the hook could give: asked again
    StatusOr<std::string> own = noted ? StatusOr<std::string>(*noted) : shapeClassOf(spec);
    if (own.ok() && !noted && (*own == spec.shapeClass || *own == kDefaultShapeClass))
      impl->cache.writeNote(noteKey, *own);
    if (!own.ok()) {
      // The compiler cannot tell (e.g. a variant only a kernel library has): the default class's kernel, if any.
      std::lock_guard<std::mutex> lock(impl->configMutex);
      if (std::shared_ptr<const CachedKernel> kernel = impl->aotKernelOfDefaultClass(spec))
        return kernel;
      return own.status();
    }
    if (*own != spec.shapeClass && *own != kDefaultShapeClass)
      return Status::error("the JIT compiler's shape-class hook answered '" + *own + "' for " + spec.key() +
                           "; expected '" + spec.shapeClass + "' or '" + std::string(kDefaultShapeClass) + "'");
    std::lock_guard<std::mutex> lock(impl->configMutex);
    impl->ownShapeClass.emplace(spec.key(), *own);
    spec.shapeClass = *own;
  }
  {
    std::lock_guard<std::mutex> lock(impl->configMutex);
    // A class that shares the default's tiling, or one nothing can build a kernel for, runs the default class's
    // kernel (ahead of time), which serves any shape.
    if (spec.shapeClass != asked.shapeClass || !impl->compile)
      if (std::shared_ptr<const CachedKernel> kernel = impl->aotKernelOfDefaultClass(spec))
        return kernel;
    if (!impl->compile) {
      // A few kernels are listed whole; a library of hundreds by the ones closest to the request (same arch,
      // dtype and head dims), at most kListed of them, and a count.
      constexpr size_t kListed = 8;
      std::vector<std::string> available, close;
      for (const AotKernel &aot : impl->aotKernels) {
        const KernelInfo &info = aot.kernel->info;
        available.push_back(info.spec().key());
        if (info.arch == spec.arch && info.dtype == spec.dtype && info.headDim == spec.headDim &&
            info.headDimV == spec.headDimV && close.size() < kListed)
          close.push_back(available.back());
      }
      std::string where = impl->aotDirs.empty() ? "(no ahead-of-time directory loaded)"
                                                : "in the ahead-of-time directory " + listOrNone(impl->aotDirs);
      std::string listed = available.size() <= kListed
                               ? "available: " + listOrNone(available)
                               : std::to_string(available.size()) + " kernels loaded; with this arch, dtype and head "
                                                                    "dims: " +
                                     listOrNone(close) +
                                     (close.size() == kListed ? ", ..." : "") +
                                     " (`flashtile aot --check DIR` checks a library, its index.txt lists it)";
      return Status::error("no kernel for " + spec.key() + " " + where + " and no JIT compiler installed; " + listed);
    }
    compile = impl->compile;
  }
  std::string key = "flashtile-fwd;" + spec.key() + ";compiler=" + std::string(compilerVersion());
  return impl->cache.getOrCompile(key, [&]() -> StatusOr<CachedKernel> {
    StatusOr<CachedKernel> kernel = compile(spec);
    if (kernel.ok() && !matches(kernel->info, spec))
      return Status::error("the JIT compiler was asked for " + spec.key() + " but returned a kernel for " +
                           kernel->info.spec().key());
    return kernel;
  });
}

Status Runtime::forward(const AttentionArgs &args, CUstream stream) {
  return guarded("forward", [&] { return forwardUnguarded(args, stream); });
}

Status Runtime::forwardUnguarded(const AttentionArgs &args, CUstream stream) {
  if (Status s = validate(args); !s.ok())
    return s;
  const bool varlen = args.isVarlen();
  // Varlen: the grid covers the longest sequence; with none longer than 0 rows there is nothing to write.
  const int gridRows = varlen ? args.maxSeqlenQ : args.seqlenQ;
  const bool empty = args.seqlenQ == 0 || gridRows == 0;
  if (!empty && !isDecodeCall(args))
    if (std::optional<Status> warm = impl->forwardWarm(args, stream))
      return *warm;
  const uint64_t generation = impl->currentDispatchGeneration();
  if (Status s = impl->checkVariantNumbers(args); !s.ok())
    return s;
  if (empty)
    return Status();
  StatusOr<const CudaDriver *> loadedDriver = CudaDriver::get();
  if (!loadedDriver.ok())
    return loadedDriver.status();
  const CudaDriver &driver = **loadedDriver;
  if (varlen && checkVarlenOffsetsOnDevice())
    if (Status s = checkDeviceCuSeqlens(driver, args, stream); !s.ok())
      return s;
  StatusOr<std::string> arch = impl->arch(driver);
  if (!arch.ok())
    return arch.status();
  StatusOr<KernelSpec> spec = specFor(args, *arch);
  if (!spec.ok())
    return spec.status();
  StatusOr<std::shared_ptr<const CachedKernel>> kernel = findKernel(*spec);
  {
    // Without a JIT, a decode-sized call that no ahead-of-time directory has a decode kernel for runs the other
    // schedule's kernel (a library built before the decode schedule, or without it).
    std::unique_lock<std::mutex> lock(impl->configMutex);
    if (!kernel.ok() && !impl->compile && !args.kvCache.enabled() && spec->schedule == impl->decodeSchedule &&
        spec->schedule != impl->schedule) {
      spec->schedule = impl->schedule;
      lock.unlock();
      kernel = findKernel(*spec);
      lock.lock();
    }
    // Likewise a call the chosen schedule has no kernel for (fa3 has none for head dims that are not multiples of
    // 64, nor off sm_90a) runs the default schedule's, when a directory has one.
    if (!kernel.ok() && !impl->compile && spec->schedule != kDefaultSchedule) {
      KernelSpec fallback = *spec;
      fallback.schedule = kDefaultSchedule;
      lock.unlock();
      if (StatusOr<std::shared_ptr<const CachedKernel>> other = findKernel(fallback); other.ok())
        kernel = std::move(other);
    }
  }
  if (!kernel.ok())
    return kernel.status();
  const KernelInfo &info = (*kernel)->info;
  if (Status s = validateFor(args, info); !s.ok())
    return s;
  if (args.kvCache.enabled() && !info.readsKvCache())
    return Status::error("kernel " + info.entry + " (schedule " + info.schedule + ") does not read a KV cache; "
                         "cache calls run the decode schedule's kernels (setDecodeSchedule(\"decode\"), or an "
                         "ahead-of-time library built by this version's `flashtile aot --schedule decode`)");
  if (info.rotary != detail::rotaryPairs(args))
    return Status::error("kernel " + info.entry + " rotates " + (info.rotary.empty() ? "nothing" : info.rotary) +
                         " but the call's kvCache.rotaryDim asks for " +
                         (args.kvCache.rotaryDim ? detail::rotaryPairs(args) : std::string("no rotation")) +
                         "; rotary calls run `flashtile aot --schedule decode --rotary halves,interleaved` kernels");
  StatusOr<LoadedModule> function = impl->function(driver, *kernel);
  if (!function.ok())
    return function.status();
  if (info.kvSteps) {
    // K/V-step kernels (fa1): the state of every LSE row lives in a workspace between the launches, headDimV + 2 fp32
    // values a row: the caller's (workspace, workspaceBytes) or the runtime's own buffer for the stream.
    const long long rows = detail::lseRows(args);
    const size_t bytes = static_cast<size_t>(rows) * (static_cast<size_t>(args.headDimV) + 2) * sizeof(float);
    if (args.workspace) {
      if (args.workspaceBytes < bytes)
        return Status::error("workspaceBytes is " + std::to_string(args.workspaceBytes) + "; kernel " + info.entry +
                             " (schedule " + info.schedule +
                             ", K/V steps) keeps each query row's state there and "
                             "needs " +
                             std::to_string(bytes) + " (LSE rows x (headDimV + 2) x 4)");
      return launchSteps(driver, function->function, info, args, stream, reinterpret_cast<CUdeviceptr>(args.workspace),
                         rows);
    }
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (Status s = driver.check(driver.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing"); !s.ok())
      return s;
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
      return Status::error("kernel " + info.entry + " (schedule " + info.schedule +
                           ") keeps each query row's state "
                           "in a workspace between its K/V steps; under CUDA graph capture pass one (workspace, "
                           "workspaceBytes >= " +
                           std::to_string(bytes) + ")");
    CUcontext context = nullptr;
    if (Status s = driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
      return s;
    std::lock_guard<std::mutex> workspaceLock(impl->workspaces.mutex()); // until every step is queued
    StatusOr<CUdeviceptr> owned = impl->workspaces.buffer(driver, context, stream, bytes);
    if (!owned.ok())
      return owned.status();
    return launchSteps(driver, function->function, info, args, stream, *owned, rows);
  }
  if (!info.splitKv()) {
    // Decode-sized calls resolve their kernel every time (their schedule differs from that of a longer call with
    // the same variant and shapes, and split-KV kernels launch differently), so only other calls are filed for the
    // warm path.
    CUcontext context = nullptr;
    if (!isDecodeCall(args) && driver.cuCtxGetCurrent(&context) == CUDA_SUCCESS && context)
      impl->remember(context, args, *kernel, function->function, generation);
    int smCount = 0;
    if (info.persistent) {
      StatusOr<int> counted = impl->smCount(driver);
      if (!counted.ok())
        return counted.status();
      smCount = *counted;
    }
    std::unique_lock<std::mutex> workspaceLock;
    CUdeviceptr counter = 0;
    if (info.tileCounter) {
      StatusOr<CUdeviceptr> zeroed = tileCounterFor(driver, impl->workspaces, workspaceLock, info, args, stream);
      if (!zeroed.ok())
        return zeroed.status();
      counter = *zeroed;
    }
    return launchKernel(driver, function->function, info, args, stream, smCount, counter);
  }

  // Split-KV: the parameter block, with the split count and the workspace.
  FlashtileFwdParams params = paramsFor(args);

  unsigned gridX = static_cast<unsigned>((static_cast<long long>(gridRows) + info.blockM - 1) / info.blockM);
  void *kernelParams[] = {&params};

  // Split-KV: numSplits blocks per Q tile; with more than one, partials in the workspace and the combine kernel.
  // GQA packing: a block's rows are a K/V head's query heads x query rows, grid.y the K/V heads.
  const int group = args.headsQ / args.headsKv;
  const unsigned gridY = static_cast<unsigned>(info.packQueryHeads ? args.headsKv : args.headsQ);
  if (info.packQueryHeads)
    gridX = static_cast<unsigned>((static_cast<long long>(gridRows) * group + info.blockM - 1) / info.blockM);
  int smCount = 1;
  if (args.numSplits == 0) {
    StatusOr<int> counted = impl->smCount(driver);
    if (!counted.ok())
      return counted.status();
    smCount = *counted;
  }
  params.numSplits = numSplitsFor(args, info, smCount, function->blocksPerSm);
  if (params.numSplits > 1 && !args.workspace) {
    // Under CUDA graph capture the runtime's own workspace cannot grow (no allocation, no synchronization), and a
    // graph would keep a pointer to a buffer that a later growth frees: without a caller's workspace, one split.
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (Status s = driver.check(driver.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing"); !s.ok())
      return s;
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
      params.numSplits = 1;
  }
  if (static_cast<long long>(gridX) * params.numSplits * gridY * args.batch > std::numeric_limits<int>::max())
    return Status::error("the launch grid would have " + std::to_string(gridX) + " x " +
                         std::to_string(params.numSplits) + " splits x heads x batch thread blocks; at most " +
                         std::to_string(std::numeric_limits<int>::max()) + " are supported: use fewer splits "
                         "(numSplits) or split the batch into several calls");
  gridX *= static_cast<unsigned>(params.numSplits);
  // KV cache: the new keys and values land in the cache before the attention kernel reads it (same stream).
  if (Status s = detail::launchKvCacheAppend(driver, function->append, info.appendEntry, args, params, stream); !s.ok())
    return s;
  if (params.numSplits == 1)
    return driver.check(driver.cuLaunchKernel(function->function, gridX, gridY, args.batch, info.threads, 1, 1,
                                              info.smemBytes, stream, kernelParams, nullptr),
                        "cuLaunchKernel(" + info.entry + ")");
  const long long rows = detail::lseRows(args);
  const size_t bytes = splitKvWorkspaceBytes(rows, args.headDimV, params.numSplits);
  std::unique_lock<std::mutex> workspaceLock(impl->workspaces.mutex(), std::defer_lock);
  CUdeviceptr workspace = reinterpret_cast<CUdeviceptr>(args.workspace);
  if (args.workspace) {
    if (args.workspaceBytes < bytes)
      return Status::error("workspaceBytes is " + std::to_string(args.workspaceBytes) + "; this call's " +
                           std::to_string(params.numSplits) + " splits need " + std::to_string(bytes) +
                           " (splitKvWorkspaceBytes)");
  } else {
    CUcontext context = nullptr;
    if (Status s = driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
      return s;
    workspaceLock.lock(); // held until both kernels are queued: no other call frees this buffer meanwhile
    StatusOr<CUdeviceptr> owned = impl->workspaces.buffer(driver, context, stream, bytes);
    if (!owned.ok())
      return owned.status();
    workspace = *owned;
  }
  params.oAccum = reinterpret_cast<float *>(workspace);
  params.lseAccum = reinterpret_cast<float *>(workspace + splitKvLseOffset(rows, args.headDimV, params.numSplits));
  params.accumSplitStride = rows;
  if (Status s = driver.check(driver.cuLaunchKernel(function->function, gridX, gridY, args.batch, info.threads, 1,
                                                    1, info.smemBytes, stream, kernelParams, nullptr),
                              "cuLaunchKernel(" + info.entry + ")");
      !s.ok())
    return s;
  unsigned combineX =
      static_cast<unsigned>((static_cast<long long>(gridRows) + info.combineRows - 1) / info.combineRows);
  CUlaunchConfig combine{};
  combine.gridDimX = combineX;
  combine.gridDimY = static_cast<unsigned>(args.headsQ);
  combine.gridDimZ = static_cast<unsigned>(args.batch);
  combine.blockDimX = static_cast<unsigned>(info.combineThreads);
  combine.blockDimY = combine.blockDimZ = 1;
  combine.hStream = stream;
  // sm_90 kernels: programmatic dependent launch — the combine grid launches while the attention grid's last
  // blocks write their partials (they call griddepcontrol.launch_dependents) and waits in griddepcontrol.wait
  // until that grid completed, instead of launching after it. sm_80 cubins run on 8.x GPUs, which have no PDL.
  CUlaunchAttribute overlap{};
  overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  overlap.value.programmaticStreamSerializationAllowed = 1;
  if (info.arch != "sm_80") {
    combine.attrs = &overlap;
    combine.numAttrs = 1;
  }
  return driver.check(driver.cuLaunchKernelEx(&combine, function->combine, kernelParams, nullptr),
                      "cuLaunchKernelEx(" + info.combineEntry + ")");
}
