// RuntimeImpl.h — private to runtime/lib: Runtime::Impl (the runtime's state: the kernel cache, the ahead-of-time
// kernels, loaded modules, the dispatch rules) and what Runtime.cpp and RuntimeDispatch.cpp share.
#ifndef FLASHTILE_RUNTIME_LIB_RUNTIMEIMPL_H
#define FLASHTILE_RUNTIME_LIB_RUNTIMEIMPL_H

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

namespace flashtile::detail {

struct AotKernel {
  std::shared_ptr<const CachedKernel> kernel;
  std::string manifestPath;
};

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

} // namespace flashtile::detail

namespace flashtile {
using detail::AotKernel;
using detail::LoadedModule;
namespace fs = std::filesystem;

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
  /// The choice of `kernel`, schedule order[i] of plan `p` (the ones before it failed as `failures` says), and why.
  static ScheduleChoice describeChoice(const Plan &p, const std::string &arch, size_t i, const CachedKernel &kernel,
                                       const std::string &failures, const std::string &firstLabel);
  /// Nothing of plan `p` has a kernel: one schedule's error as it is, or each schedule's when they differ.
  static Status noKernel(const Plan &p, const std::vector<Status> &failures);
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
    bool positions = false;      // the call was a block of a larger problem (a module with position offsets)
    std::shared_ptr<const CachedKernel> kernel;
    LoadedModule module;
    std::vector<float> acceptedParams;

    bool serves(CUcontext ctx, const AttentionArgs &args, std::string_view cls) const {
      return context == ctx && dtype == args.dtype && headDim == args.headDim && headDimV == args.headDimV &&
             shapeClass.data() == cls.data() && schedule == args.schedule && !(fellBack && args.strictSchedule) &&
             positions == args.positions.has_value();
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

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_LIB_RUNTIMEIMPL_H
