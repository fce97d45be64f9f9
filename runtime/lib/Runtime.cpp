// Runtime.cpp — kernel selection (ahead-of-time directories, then the JIT cache), module loading and launch.
#include "flashtile/runtime/Runtime.h"
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
using flashtile::detail::LoadedModule;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kManifestExtension = ".manifest";
constexpr std::string_view kCubinExtension = ".cubin";

struct AotKernel {
  std::shared_ptr<const CachedKernel> kernel;
  std::string manifestPath;
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
  for (const PlanLaunch &launch : info->plan.launches)
    if (Status s = checkCubin(*cubin, info->arch, launch.entry); !s.ok())
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

std::string listOrNone(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "none" : text;
}

} // namespace

struct Runtime::Impl {
  explicit Impl(KernelCache::Options cacheOptions) : cache(std::move(cacheOptions)) {
    if (const char *forced = std::getenv("FLASHTILE_SCHEDULE"); forced && *forced) {
      schedule = forced;
      scheduleSource = "FLASHTILE_SCHEDULE";
    }
    const char *strictSetting = std::getenv("FLASHTILE_STRICT_SCHEDULE");
    strict = strictSetting && *strictSetting && std::string_view(strictSetting) != "0";
  }

  KernelCache cache;

  std::mutex configMutex; // guards the fields below up to gpuMutex
  std::vector<AotKernel> aotKernels;
  std::map<std::string, std::shared_ptr<const CachedKernel>> aotKernelByVariant; // one kernel of each variant
  std::vector<std::string> aotDirs;
  CompileFn compile;
  ShapeClassFn shapeClassOf;
  std::map<std::string, std::string> ownShapeClass; // spec key -> shapeClassOf's answer
  VariantCheckFn variantCheck;
  std::vector<DispatchRule> compilerRules; // setDispatchRules
  std::vector<DispatchRule> aotRules;      // recorded by loaded ahead-of-time kernels, one per (schedule, arch)
  std::string schedule;                    // forced on calls that name none; empty: the dispatch rules
  std::string scheduleSource = "setSchedule";
  std::optional<std::string> decodeSchedule; // setDecodeSchedule; unset: the rules
  std::atomic<bool> strict{false};

  /// The schedules a call tries on an arch, in order, and what named a schedule for it (plan()).
  struct Plan {
    std::vector<std::string> order;
    std::string forced;   // the named schedule, empty when none
    std::string forcedBy; // who named it
    bool decodeSized = false;
  };
  StatusOr<Plan> plan(const AttentionArgs &args, std::string_view arch) const; // configMutex held
  /// defaultSchedules of the compiler's rules and the libraries', kept per (arch, decode-sized) until the
  /// configuration changes: calls that resolve every time (decode-sized ones) do not order the rules again.
  const std::vector<std::string> &rulesOrder(std::string_view arch, bool decodeSized) const { // configMutex held
    auto key = std::pair{std::string(arch), decodeSized};
    if (auto it = orderByArch.find(key); it != orderByArch.end())
      return it->second;
    std::vector<DispatchRule> rules = compilerRules;
    rules.insert(rules.end(), aotRules.begin(), aotRules.end());
    return orderByArch.emplace(std::move(key), defaultSchedules(rules, arch, decodeSized)).first->second;
  }
  mutable std::map<std::pair<std::string, bool>, std::vector<std::string>> orderByArch;

  /// What resolve() found for a call, by what decides it (the spec without its schedule and the plan's order), so
  /// that later calls neither try again the schedules that failed nor log the fallback again.
  struct Resolved {
    ScheduleChoice choice;
    std::string firstFailure; // why order[0] has no kernel, when the choice fell back
  };
  std::map<std::string, Resolved> resolvedByKey;

  /// The kernel of a call and why (Runtime::explain): the plan's schedules tried in order through findKernel.
  struct Resolution {
    std::shared_ptr<const CachedKernel> kernel;
    ScheduleChoice choice;
    bool provisional = false; // a fallback from a kernel whose self-check could not run: not filed for later calls
  };
  /// A backward (kind kBackwardKind) tries the same order, skipping schedules without a kernel of that kind
  /// quietly unless the call named one: a schedule may have a forward and no backward. With `driver` (forward(),
  /// backward()), a kernel never run on its arch is self-checked before it is chosen (SelfCheck.h).
  StatusOr<Resolution> resolve(Runtime &runtime, const AttentionArgs &args, const std::string &arch,
                               std::string_view kind = kForwardKind, const CudaDriver *driver = nullptr,
                               CUstream stream = nullptr);
  detail::SelfChecks selfChecks;
  /// Forgets the resolutions (the configuration they depend on changed); configMutex held.
  void configurationChanged() {
    resolvedByKey.clear();
    orderByArch.clear();
    clearDispatch();
  }

  std::mutex gpuMutex; // guards the two maps below
  std::map<std::pair<CUcontext, const CachedKernel *>, LoadedModule> modules;
  std::map<CUdevice, std::string> archByDevice;
  std::map<CUdevice, int> smCountByDevice;
  detail::SplitKvWorkspaces workspaces;
  detail::KvErrorRecords kvErrors; // the KV cache's device error records, one per context
  /// FLASHTILE_CHECK_KVCACHE=1: waits for `stream`, reports what an earlier call's kernels recorded, then copies
  /// args' device cache values to the host and checks them as host copies are checked.
  Status checkKvCacheValues(const CudaDriver &driver, const AttentionArgs &args, CUstream stream);

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
    std::string schedule;        // the schedule the call named (AttentionArgs::schedule), empty when none
    bool fellBack = false;       // the kernel is a fallback's: a strict call resolves again (and fails)
    std::shared_ptr<const CachedKernel> kernel;
    LoadedModule module;
    std::vector<float> acceptedParams;

    bool serves(CUcontext ctx, const AttentionArgs &args, std::string_view cls) const {
      return context == ctx && dtype == args.dtype && headDim == args.headDim && headDimV == args.headDimV &&
             shapeClass.data() == cls.data() && schedule == args.schedule && !(fellBack && args.strictSchedule);
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
                const LoadedModule &module, uint64_t generation, bool fellBack = false);
  /// Executes `module`'s launch plan for `args` (PlanRunner.h) with this runtime's workspaces and SM counts.
  Status run(const CudaDriver &driver, const LoadedModule &module, const AttentionArgs &args, CUstream stream,
             const BackwardArgs *backward = nullptr) {
    detail::PlanServices services{workspaces, [&] { return smCount(driver); }, &kvErrors};
    return detail::runPlan(driver, module, args, stream, services, backward);
  }
  /// The variant-number checks of forward(): the compiler's variant check, then the rules of an ahead-of-time
  /// kernel of the variant.
  Status checkVariantNumbers(const AttentionArgs &args);
  /// forward() for a call whose kernel a previous call resolved on this thread's context; nothing when there is no
  /// such dispatch (or no current context), and the slow path must run.
  std::optional<Status> forwardWarm(const AttentionArgs &args, CUstream stream);

  StatusOr<std::string> arch(const CudaDriver &driver);
  /// The arch of this thread's GPU (the driver loaded first).
  StatusOr<std::string> currentArch() {
    StatusOr<const CudaDriver *> driver = CudaDriver::get();
    if (!driver.ok())
      return driver.status();
    return arch(**driver);
  }
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
                           std::move(kernel), module, args.variantParams});
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

StatusOr<KernelSpec> Runtime::specFor(const AttentionArgs &args, const std::string &arch) const {
  return guarded("specFor", [&] { return specForUnguarded(args, arch); });
}

namespace {

/// The spec of `args` on `arch` without its schedule, for a module of `kind`.
KernelSpec specWithoutSchedule(const AttentionArgs &args, const std::string &arch,
                               std::string_view kind = kForwardKind) {
  KernelSpec spec;
  spec.kind = std::string(kind);
  spec.arch = arch;
  spec.dtype = dtypeName(args.dtype);
  spec.headDim = args.headDim;
  spec.headDimV = args.headDimV;
  spec.variant = args.variant;
  spec.shapeClass = Runtime::shapeClassFor(args);
  // Cache calls run kernels compiled with the cache code, plain calls kernels without it.
  spec.kvCache = args.kvCache.enabled();
  spec.rotary = detail::rotaryPairs(args);
  return spec;
}

/// `text` on one line (a compiler's diagnostics span several): its non-empty lines, trimmed, joined by a space.
std::string oneLine(std::string_view text) {
  std::string line;
  while (!text.empty()) {
    size_t newline = text.find('\n');
    std::string_view part = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    while (!part.empty() && (part.front() == ' ' || part.front() == '\t'))
      part.remove_prefix(1);
    while (!part.empty() && (part.back() == ' ' || part.back() == '\t' || part.back() == '\r'))
      part.remove_suffix(1);
    if (!part.empty())
      line += (line.empty() ? "" : " ") + std::string(part);
  }
  return line;
}

std::string joinedOrder(const std::vector<std::string> &order) {
  std::string text;
  for (const std::string &name : order)
    text += (text.empty() ? "" : ", ") + name;
  return text;
}

} // namespace

StatusOr<Runtime::Impl::Plan> Runtime::Impl::plan(const AttentionArgs &args, std::string_view arch) const {
  Plan plan;
  plan.decodeSized = isDecodeCall(args);
  bool forcedOnRuntime = false; // setSchedule's: decode-sized calls keep the schedules made for them first
  if (!args.schedule.empty()) {
    plan.forced = args.schedule;
    plan.forcedBy = "the call";
  } else if (plan.decodeSized && decodeSchedule) {
    if (!decodeSchedule->empty()) {
      plan.forced = *decodeSchedule;
      plan.forcedBy = "setDecodeSchedule";
    } else {
      plan.decodeSized = false;
      plan.forced = schedule;
      plan.forcedBy = schedule.empty() ? "" : scheduleSource;
    }
  } else if (!schedule.empty()) {
    plan.forced = schedule;
    plan.forcedBy = scheduleSource;
    forcedOnRuntime = true;
  }
  if (!plan.forced.empty() && !isValidId(plan.forced))
    return Status::error("schedule '" + plan.forced + "' (named by " + plan.forcedBy +
                         ") is not a schedule id of characters [A-Za-z0-9_.:#-]");
  const std::vector<std::string> &byRules = rulesOrder(arch, plan.decodeSized);
  auto add = [&](const std::string &name) {
    if (!name.empty() && std::find(plan.order.begin(), plan.order.end(), name) == plan.order.end())
      plan.order.push_back(name);
  };
  if (plan.decodeSized && forcedOnRuntime) {
    const std::vector<std::string> &forAll = rulesOrder(arch, false);
    for (const std::string &name : byRules)
      if (std::find(forAll.begin(), forAll.end(), name) == forAll.end())
        add(name);
  }
  add(plan.forced);
  for (const std::string &name : byRules)
    add(name);
  if (plan.order.empty())
    return Status::error(
        "no schedule for this call on " + std::string(arch) +
        ": none is named (AttentionArgs::schedule, setSchedule, FLASHTILE_SCHEDULE) and no dispatch rule says "
        "which runs by default (" +
        (compile || !aotKernels.empty() ? std::string("the compiler installed no rules: jit::Jit::install does")
                                        : std::string("no ahead-of-time directory loaded and no JIT compiler "
                                                      "installed")) +
        ")");
  return plan;
}

StatusOr<Runtime::Impl::Resolution> Runtime::Impl::resolve(Runtime &runtime, const AttentionArgs &args,
                                                           const std::string &arch, std::string_view kind,
                                                           const CudaDriver *driver, CUstream stream) {
  KernelSpec spec = specWithoutSchedule(args, arch, kind);
  // A kernel never run on its arch that disagreed with its proven schedule's counts as no kernel for the call.
  std::optional<detail::PlanServices> services;
  std::optional<detail::SelfChecks::Gpu> gpu;
  if (driver) {
    services.emplace(detail::PlanServices{workspaces, [this, driver] { return smCount(*driver); }});
    gpu.emplace(detail::SelfChecks::Gpu{
        *driver, stream, *services, [&runtime](const KernelSpec &s) { return runtime.findKernel(s); },
        [this, driver](const std::shared_ptr<const CachedKernel> &k) { return function(*driver, k); }});
  }
  bool provisional = false; // a kernel's check could not run now (CUDA graph capture): the choice is not kept
  bool refused = false;     // a kernel was found but its self-check refused it
  auto findVetted = [&](const KernelSpec &asked) -> StatusOr<std::shared_ptr<const CachedKernel>> {
    StatusOr<std::shared_ptr<const CachedKernel>> kernel = runtime.findKernel(asked);
    if (kernel.ok())
      if (Status vetted = selfChecks.vet(*kernel, args, gpu ? &*gpu : nullptr); !vetted.ok()) {
        provisional |= !selfChecks.judged(**kernel);
        refused = true;
        return vetted;
      }
    return kernel;
  };
  StatusOr<Plan> planned = [&] {
    std::lock_guard<std::mutex> lock(configMutex);
    return plan(args, arch);
  }();
  if (!planned.ok())
    return planned.status();
  const Plan &p = *planned;
  // Another kind than the forward: a schedule the rules prefer may have no program of that kind, which is not a
  // fallback worth a log line or a strict-mode error; a schedule the caller named is held to both.
  const bool quietFallback = kind != kForwardKind && p.order.front() != p.forced;
  const bool strictCall = (args.strictSchedule || strict) && !quietFallback;
  const std::string key = spec.key() + ";order=" + joinedOrder(p.order) + ";forcedBy=" + p.forcedBy;
  const std::string strictNote = "strict schedule mode (setStrictSchedule, FLASHTILE_STRICT_SCHEDULE=1)";
  auto firstLabel = [&] {
    return "schedule '" + p.order.front() + "' (" +
           (p.order.front() == p.forced ? "named by " + p.forcedBy
                                        : "preferred on " + arch + (p.decodeSized ? " for decode-sized calls" : "")) +
           ")";
  };
  auto strictError = [&](const std::string &failure) {
    KernelSpec first = spec;
    first.schedule = p.order.front();
    return Status::error(firstLabel() + " has no kernel for " + first.key() + ": " + failure + "; " + strictNote +
                         " does not fall back" + (p.order.size() > 1 ? " to '" + p.order[1] + "'" : ""));
  };
  std::optional<Resolved> known;
  {
    std::lock_guard<std::mutex> lock(configMutex);
    if (auto it = resolvedByKey.find(key); it != resolvedByKey.end())
      known = it->second;
  }
  if (known) {
    if (strictCall && known->choice.fellBack)
      return strictError(known->firstFailure);
    KernelSpec resolved = spec;
    resolved.schedule = known->choice.spec.schedule;
    if (StatusOr<std::shared_ptr<const CachedKernel>> kernel = findVetted(resolved); kernel.ok())
      return Resolution{std::move(*kernel), std::move(known->choice)};
    if (refused) { // resolved (by explain()) before its kernel's self-check failed: resolved again, with its log line
      std::lock_guard<std::mutex> lock(configMutex);
      resolvedByKey.erase(key);
    }
  }

  std::vector<Status> failures;
  for (size_t i = 0; i < p.order.size(); ++i) {
    spec.schedule = p.order[i];
    StatusOr<std::shared_ptr<const CachedKernel>> kernel = findVetted(spec);
    if (!kernel.ok()) {
      if (strictCall && i == 0)
        return strictError(oneLine(kernel.status().message()));
      failures.push_back(kernel.status());
      continue;
    }
    ScheduleChoice choice;
    choice.spec = (*kernel)->info.spec();
    choice.entry = (*kernel)->info.entry;
    choice.order = p.order;
    choice.forcedBy = p.order.front() == p.forced ? p.forcedBy : "";
    choice.fellBack = i > 0;
    std::string failuresText;
    for (size_t f = 0; f < failures.size(); ++f)
      failuresText += (f ? "; " : "") + p.order[f] + ": " + oneLine(failures[f].message());
    if (i == 0)
      choice.reason = p.order.front() == p.forced
                          ? "named by " + p.forcedBy
                          : "preferred on " + arch + (p.decodeSized ? " for decode-sized calls" : "") +
                                " (order: " + joinedOrder(p.order) + ")";
    else
      choice.reason = "fell back: " + firstLabel() + " has no kernel for this call (" + failuresText + ")";
    if ((*kernel)->info.neverRunOnArch)
      choice.reason += "; its schedule never ran on " + arch + ": the kernel runs only after agreeing with schedule '" +
                       (*kernel)->info.checkAgainst + "' in a first-use self-check";
    bool logFallback = false;
    {
      std::lock_guard<std::mutex> lock(configMutex);
      choice.aheadOfTime = std::any_of(aotKernels.begin(), aotKernels.end(),
                                       [&](const AotKernel &aot) { return aot.kernel == *kernel; });
      const bool filed =
          !provisional &&
          resolvedByKey.emplace(key, Resolved{choice, failures.empty() ? "" : oneLine(failures[0].message())}).second;
      logFallback = (filed || provisional) && choice.fellBack && !quietFallback;
    }
    if (logFallback) {
      KernelSpec first = spec;
      first.schedule = p.order.front();
      logWarning(firstLabel() + " has no kernel for " + first.key() + " (" + failuresText + "); running '" +
                 p.order[i] + "' instead (" + strictNote + " makes this an error)");
    }
    return Resolution{std::move(*kernel), std::move(choice), provisional};
  }
  // Nothing has a kernel: one schedule's error as it is, or each schedule's when they differ.
  bool same = std::all_of(failures.begin(), failures.end(),
                          [&](const Status &f) { return f.message() == failures.front().message(); });
  if (same)
    return failures.front();
  std::string text;
  for (size_t f = 0; f < failures.size(); ++f)
    text += (f ? "; " : "") + p.order[f] + ": " + oneLine(failures[f].message());
  return Status::error("no schedule has a kernel for this call (tried " + joinedOrder(p.order) + "): " + text);
}

StatusOr<KernelSpec> Runtime::specForUnguarded(const AttentionArgs &args, const std::string &arch) const {
  if (Status s = validate(args); !s.ok())
    return s;
  if (std::find(kSupportedArchs.begin(), kSupportedArchs.end(), arch) == kSupportedArchs.end())
    return Status::error("arch '" + arch + "' is not supported; supported: " + supportedArchsText());
  KernelSpec spec = specWithoutSchedule(args, arch);
  std::lock_guard<std::mutex> lock(impl->configMutex);
  StatusOr<Impl::Plan> plan = impl->plan(args, arch);
  if (!plan.ok())
    return plan.status();
  spec.schedule = plan->order.front();
  return spec;
}

StatusOr<ScheduleChoice> Runtime::explain(const AttentionArgs &args, const std::string &arch) {
  return explain(args, arch, kForwardKind);
}

StatusOr<ScheduleChoice> Runtime::explain(const AttentionArgs &args, const std::string &arch, std::string_view kind) {
  return guarded("explain", [&]() -> StatusOr<ScheduleChoice> {
    if (Status s = validate(args); !s.ok())
      return s;
    if (std::find(kSupportedArchs.begin(), kSupportedArchs.end(), arch) == kSupportedArchs.end())
      return Status::error("arch '" + arch + "' is not supported; supported: " + supportedArchsText());
    if (std::find(kProgramKinds.begin(), kProgramKinds.end(), kind) == kProgramKinds.end()) {
      std::string known;
      for (std::string_view name : kProgramKinds)
        known += (known.empty() ? "" : ", ") + std::string(name);
      return Status::error("module kind '" + std::string(kind) + "' is not known; known: " + known);
    }
    if (kind == kBackwardKind && args.kvCache.enabled())
      return Status::error("kvCache is set; the KV-cache mode (flash_attn_with_kvcache) has no backward");
    if (Status s = impl->checkVariantNumbers(args); !s.ok())
      return s;
    StatusOr<Impl::Resolution> resolved = impl->resolve(*this, args, arch, kind);
    if (!resolved.ok())
      return resolved.status();
    return std::move(resolved->choice);
  });
}

StatusOr<ScheduleChoice> Runtime::explain(const AttentionArgs &args) {
  return guarded("explain", [&]() -> StatusOr<ScheduleChoice> {
    if (Status s = validate(args); !s.ok())
      return s;
    StatusOr<std::string> arch = impl->currentArch();
    if (!arch.ok())
      return arch.status();
    return explain(args, *arch);
  });
}

std::string ScheduleChoice::text() const {
  std::string orderText;
  for (const std::string &name : order)
    orderText += (orderText.empty() ? "" : ",") + name;
  return "schedule=" + spec.schedule + "\nentry=" + entry + "\nsource=" + (aheadOfTime ? "aot" : "jit") +
         "\norder=" + orderText + "\nforced_by=" + forcedBy + "\nfell_back=" + (fellBack ? "1" : "0") +
         "\nreason=" + reason + "\n";
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
    StatusOr<std::string> arch = impl->currentArch();
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
