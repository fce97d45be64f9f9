// PlanRunner.h — loads a module's kernels and executes its launch plan for one call (LaunchPlan.h).
//
// Nothing here knows a schedule: the plan says which kernels run, on which grids, with which workspaces and
// kernel-parameter fields; this evaluates it over the call's sizes and queues the launches on the stream.
#ifndef FLASHTILE_RUNTIME_LIB_PLANRUNNER_H
#define FLASHTILE_RUNTIME_LIB_PLANRUNNER_H

#include "KvErrors.h"
#include "SplitKvInternal.h"
#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/Runtime.h"

#include <functional>
#include <memory>
#include <vector>

namespace flashtile::detail {

/// A module's cubin loaded into one context, a function for each launch of its plan.
struct LoadedModule {
  std::shared_ptr<const CachedKernel> kernel; // keeps the map key's address from being reused
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  std::vector<CUfunction> functions; // functions[i] runs kernel->info.plan.launches[i]
  int blocksPerSm = 1; // blocks of the split rule's launch an SM holds (split-KV plans), for the split heuristic
};

/// Loads `kernel`'s cubin into the current context `context`, resolves every launch's entry, opts each one in to
/// its shared memory, and for plans with a split rule asks the driver for the occupancy the heuristic counts.
StatusOr<LoadedModule> loadModule(const CudaDriver &driver, CUcontext context,
                                  const std::shared_ptr<const CachedKernel> &kernel);

/// What a plan may need from the runtime beside the call: its own workspaces, the device's SM count and the KV
/// cache's error records (null: kernels run without one).
struct PlanServices {
  SplitKvWorkspaces &workspaces;
  std::function<StatusOr<int>()> smCount;
  KvErrorRecords *kvErrors = nullptr;
};

/// The kernel parameter block of a call (KernelAbi.h): pointers, strides, sizes, scales and the variant's numbers;
/// the fields a plan sets stay zero.
FlashtileFwdParams paramsFor(const AttentionArgs &args);
/// The parameter block of a backward call: paramsFor(args.forward) and the backward section (gradients and their
/// strides, input gradients, determinism); the workspace fields stay for the plan.
FlashtileFwdParams paramsFor(const BackwardArgs &args);

/// The split count `info`'s plan gives `args` (1 for plans without a split rule): args.numSplits when set, else
/// numSplitsHeuristic over the plan's split rule on `sms` SMs that hold `blocksPerSm` blocks of its launch each.
StatusOr<int> planSplits(const KernelInfo &info, const AttentionArgs &args, int sms, int blocksPerSm);
/// The bytes of workspace a forward call of `info`'s plan lays out (0: none), its splits as planSplits gives them on
/// `sms` SMs of `blocksPerSm` blocks.
StatusOr<size_t> forwardWorkspaceBytes(const KernelInfo &info, const AttentionArgs &args, int sms, int blocksPerSm);

/// The bytes of workspace `info`'s plan needs for a backward call `backward` (its split count 1): what a caller's
/// BackwardArgs::workspace must hold (0: none).
StatusOr<size_t> backwardWorkspaceBytes(const KernelInfo &info, const BackwardArgs &backward);

/// Executes `module`'s plan for `args` on `stream`: the split count, the workspaces (the caller's `workspace`,
/// else the runtime's buffer for the stream; an error record is always the runtime's), the parameter fields, then
/// every launch in order. Errors name the kernel and what it needed. Where the runtime's buffer grows (which
/// synchronizes the stream), the error record is read back too, and a value there fails the call before it launches.
/// A backward call (`backward` non-null, its `forward` being `args`) fills the backward section too, takes its own
/// workspace and sets the plan's `deterministic` symbol.
Status runPlan(const CudaDriver &driver, const LoadedModule &module, const AttentionArgs &args, CUstream stream,
               PlanServices &services, const BackwardArgs *backward = nullptr);

} // namespace flashtile::detail

#endif // FLASHTILE_RUNTIME_LIB_PLANRUNNER_H
