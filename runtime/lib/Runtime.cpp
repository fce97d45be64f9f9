// Runtime.cpp — ahead-of-time directories, the kernel cache, module loading and launch; the dispatch (which schedule
// and kernel serve a call, and why) is RuntimeDispatch.cpp, Runtime::Impl is RuntimeImpl.h.
#include "flashtile/runtime/Runtime.h"
#include "RuntimeImpl.h"
#include "KvCacheInternal.h"
#include "PlanRunner.h"
#include "flashtile/runtime/TensorMap.h"
#include "RegularFile.h"
#include "SelfCheck.h"
#include "SplitKvInternal.h"
#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Elf.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/SplitKv.h"
#include "flashtile/runtime/Version.h"

#include <algorithm>
#include <atomic>
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
using flashtile::detail::guarded;
using flashtile::detail::LoadedModule;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kManifestExtension = ".manifest";
constexpr std::string_view kCubinExtension = ".cubin";


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
  for (const PlanLaunch &launch : info->plan.launches)
    if (Status s = checkCubin(*cubin, info->arch, launch.entry); !s.ok())
      return s.withContext(cubinPath.string() + " (for " + manifestPath.filename().string() + ")");
  return AotKernel{std::make_shared<const CachedKernel>(CachedKernel{std::move(*info), std::move(*cubin)}),
                   manifestPath.string()};
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

std::string listOrNone(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "none" : text;
}

} // namespace


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
  StatusOr<LoadedModule> loaded = detail::loadModule(driver, context, kernel);
  if (!loaded.ok()) {
    // Ahead-of-time kernels were checked without a GPU (Elf.h); what only the driver can tell (a cubin it will not
    // load here, an entry it cannot find) still names the file.
    std::lock_guard<std::mutex> configLock(configMutex);
    for (const AotKernel &aot : aotKernels)
      if (aot.kernel == kernel)
        return loaded.status().withContext(aot.manifestPath);
    return loaded.status();
  }
  modules.emplace(std::pair{context, kernel.get()}, *loaded);
  return loaded;
}

void Runtime::Impl::remember(CUcontext context, const AttentionArgs &args, std::shared_ptr<const CachedKernel> kernel,
                             const LoadedModule &module, uint64_t generation, bool fellBack) {
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
  known.push_back(Dispatch{context, args.dtype, args.headDim, args.headDimV, shapeClass, args.schedule, fellBack,
                           args.positions.has_value(), std::move(kernel), module, args.variantParams});
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
  LoadedModule module;
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
        module = dispatch.module;
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
    remember(context, args, nullptr, module, generation);
  }
  return run(driver, module, args, stream);
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
  impl->kvErrors.release(**driver);
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
  impl->configurationChanged();
}

void Runtime::setVariantCheck(VariantCheckFn check) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->variantCheck = std::move(check);
  impl->clearDispatch();
}

void Runtime::setDispatchRules(std::vector<DispatchRule> rules) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->compilerRules = std::move(rules);
  impl->configurationChanged();
}

void Runtime::setSchedule(std::string schedule) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->schedule = std::move(schedule);
  impl->scheduleSource = "setSchedule";
  impl->configurationChanged();
}

void Runtime::setDecodeSchedule(std::string schedule) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->decodeSchedule = std::move(schedule);
  impl->configurationChanged();
}

void Runtime::setStrictSchedule(bool strict) {
  std::lock_guard<std::mutex> lock(impl->configMutex);
  impl->strict = strict;
  impl->clearDispatch(); // dispatches filed from fallbacks must resolve again (and fail)
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
  for (const AotKernel &aot : added) {
    impl->aotKernelByVariant.emplace(aot.kernel->info.variant, aot.kernel);
    // The dispatch rules the library records, one per (schedule, arch): every kernel of one carries the same.
    DispatchRule rule = aot.kernel->info.dispatchRule();
    bool known = std::any_of(impl->aotRules.begin(), impl->aotRules.end(), [&](const DispatchRule &other) {
      return other.schedule == rule.schedule && other.arch == rule.arch;
    });
    if (!known && (rule.calls != DefaultCalls::None || !rule.preferredOver.empty()))
      impl->aotRules.push_back(std::move(rule));
  }
  impl->aotDirs.push_back(dir);
  impl->configurationChanged(); // ahead-of-time kernels come before the JIT's
  return Status();
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

Status Runtime::checkErrors() {
  return guarded("checkErrors", [&]() -> Status {
    if (impl->kvErrors.empty())
      return Status(); // no KV-cache call ran: nothing to read, and the driver is not needed
    StatusOr<const CudaDriver *> driver = CudaDriver::get();
    if (!driver.ok())
      return driver.status();
    return impl->kvErrors.checkAll(**driver);
  });
}

Status Runtime::Impl::checkKvCacheValues(const CudaDriver &driver, const AttentionArgs &args, CUstream stream) {
  // The values may come from work queued on the stream: it is waited for, which is also the moment to read back
  // what an earlier call's kernels recorded.
  if (Status s = driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize"); !s.ok())
    return s;
  CUcontext context = nullptr;
  if (Status s = driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
    return s;
  if (Status s = kvErrors.readAfterSync(driver, context, stream); !s.ok())
    return s;
  return detail::checkDeviceKvCacheValues(driver, args).withContext("FLASHTILE_CHECK_KVCACHE");
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
  if (args.kvCache.enabled() && detail::checkKvCacheValuesOnDevice())
    if (Status s = impl->checkKvCacheValues(driver, args, stream); !s.ok())
      return s;
  StatusOr<std::string> arch = impl->arch(driver);
  if (!arch.ok())
    return arch.status();
  // The schedules the call may run, tried in order (the one it names or the runtime's, then the dispatch rules').
  StatusOr<Impl::Resolution> resolved = impl->resolve(*this, args, *arch, kForwardKind, &driver, stream);
  if (!resolved.ok())
    return resolved.status();
  const std::shared_ptr<const CachedKernel> &kernel = resolved->kernel;
  const KernelInfo &info = kernel->info;
  if (Status s = validateFor(args, info); !s.ok())
    return s;
  if (args.kvCache.enabled() && !info.readsKvCache())
    return Status::error("kernel " + info.entry + " (schedule " + info.schedule +
                         ") does not read a KV cache; "
                         "cache calls run kernels of a schedule whose kernels read KV caches (the dispatch rules "
                         "choose one for decode-sized calls; an ahead-of-time library needs its cache kernels)");
  if (info.rotary != detail::rotaryPairs(args))
    return Status::error(
        "kernel " + info.entry + " rotates " + (info.rotary.empty() ? "nothing" : info.rotary) +
        " but the call's kvCache.rotaryDim asks for " +
        (args.kvCache.rotaryDim ? detail::rotaryPairs(args) : std::string("no rotation")) +
        "; rotary calls run KV-cache kernels built for their pairs (`flashtile aot --rotary halves,interleaved`)");
  StatusOr<LoadedModule> module = impl->function(driver, kernel);
  if (!module.ok())
    return module.status();
  // Calls whose kernel depends on more than the variant, dtype, head dims and shape class (decode-sized calls run
  // another schedule than longer ones with the same shapes; KV-cache calls kernels with the cache code) resolve
  // their kernel every time; the others are filed for the warm path.
  CUcontext context = nullptr;
  if (!isDecodeCall(args) && !args.kvCache.enabled() && !resolved->provisional &&
      driver.cuCtxGetCurrent(&context) == CUDA_SUCCESS && context)
    impl->remember(context, args, kernel, *module, generation, resolved->choice.fellBack);
  return impl->run(driver, *module, args, stream);
}

Status Runtime::backward(const BackwardArgs &args, CUstream stream) {
  return guarded("backward", [&] { return backwardUnguarded(args, stream); });
}

StatusOr<size_t> Runtime::forwardWorkspaceBytes(const AttentionArgs &args) {
  StatusOr<size_t> bytes = size_t{0};
  Status s = guarded("forwardWorkspaceBytes", [&]() -> Status {
    if (Status v = validate(args); !v.ok())
      return v;
    const int gridRows = args.isVarlen() ? args.maxSeqlenQ : args.seqlenQ;
    if (args.seqlenQ == 0 || gridRows == 0)
      return Status(); // forward() launches nothing
    StatusOr<const CudaDriver *> driver = CudaDriver::get();
    if (!driver.ok())
      return driver.status();
    StatusOr<std::string> arch = impl->arch(**driver);
    if (!arch.ok())
      return arch.status();
    StatusOr<Impl::Resolution> resolved = impl->resolve(*this, args, *arch, kForwardKind);
    if (!resolved.ok())
      return resolved.status();
    const KernelInfo &info = resolved->kernel->info;
    if (Status v = validateFor(args, info); !v.ok())
      return v;
    StatusOr<LoadedModule> module = impl->function(**driver, resolved->kernel);
    if (!module.ok())
      return module.status();
    StatusOr<int> sms = impl->smCount(**driver);
    if (!sms.ok())
      return sms.status();
    bytes = detail::forwardWorkspaceBytes(info, args, *sms, module->blocksPerSm);
    return bytes.ok() ? Status() : bytes.status();
  });
  if (!s.ok())
    return s;
  return bytes;
}

StatusOr<size_t> Runtime::backwardWorkspaceBytes(const BackwardArgs &args) {
  StatusOr<size_t> bytes = size_t{0};
  Status s = guarded("backwardWorkspaceBytes", [&]() -> Status {
    if (Status v = validateBackward(args); !v.ok())
      return v;
    const AttentionArgs &forward = args.forward;
    const bool varlen = forward.isVarlen();
    if ((forward.seqlenQ == 0 || (varlen && forward.maxSeqlenQ == 0)) &&
        (forward.seqlenK == 0 || (varlen && forward.maxSeqlenK == 0)))
      return Status(); // backward() launches nothing
    StatusOr<const CudaDriver *> driver = CudaDriver::get();
    if (!driver.ok())
      return driver.status();
    StatusOr<std::string> arch = impl->arch(**driver);
    if (!arch.ok())
      return arch.status();
    StatusOr<Impl::Resolution> resolved = impl->resolve(*this, forward, *arch, kBackwardKind);
    if (!resolved.ok())
      return resolved.status();
    bytes = detail::backwardWorkspaceBytes(resolved->kernel->info, args);
    return bytes.ok() ? Status() : bytes.status();
  });
  if (!s.ok())
    return s;
  return bytes;
}

Status Runtime::backwardUnguarded(const BackwardArgs &args, CUstream stream) {
  if (Status s = validateBackward(args); !s.ok())
    return s;
  const AttentionArgs &forward = args.forward;
  if (Status s = impl->checkVariantNumbers(forward); !s.ok())
    return s;
  // Nothing to read and nothing to write. A call with queries and no keys still writes dQ = 0, and one with keys
  // and no queries dK = dV = 0: the module's plan does both.
  const bool varlen = forward.isVarlen();
  if ((forward.seqlenQ == 0 || (varlen && forward.maxSeqlenQ == 0)) &&
      (forward.seqlenK == 0 || (varlen && forward.maxSeqlenK == 0)))
    return Status();
  StatusOr<const CudaDriver *> loadedDriver = CudaDriver::get();
  if (!loadedDriver.ok())
    return loadedDriver.status();
  const CudaDriver &driver = **loadedDriver;
  if (varlen && checkVarlenOffsetsOnDevice())
    if (Status s = checkDeviceCuSeqlens(driver, forward, stream); !s.ok())
      return s;
  StatusOr<std::string> arch = impl->arch(driver);
  if (!arch.ok())
    return arch.status();
  StatusOr<Impl::Resolution> resolved = impl->resolve(*this, forward, *arch, kBackwardKind);
  if (!resolved.ok())
    return resolved.status();
  const KernelInfo &info = resolved->kernel->info;
  if (Status s = validateFor(forward, info); !s.ok())
    return s;
  StatusOr<LoadedModule> module = impl->function(driver, resolved->kernel);
  if (!module.ok())
    return module.status();
  return impl->run(driver, *module, forward, stream, &args);
}
