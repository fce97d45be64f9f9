// PlanRunner.cpp — loading a module's kernels and executing its launch plan.
#include "PlanRunner.h"
#include "KvCacheInternal.h"
#include "PositionsInternal.h"
#include "flashtile/runtime/Fp8Abi.h"
#include "flashtile/runtime/SplitKv.h"
#include "flashtile/runtime/TensorMap.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <mutex>
#include <optional>

using namespace flashtile;
using namespace flashtile::detail;

namespace {

/// exp(x) == exp2(x * log2(e)): kernels fold this factor into the scale and use exp2.
constexpr float kLog2e = 1.44269504088896340736f;
/// Above this much dynamic shared memory a kernel must opt in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
constexpr int kDefaultDynamicSmemLimit = 48 * 1024;
/// Workspaces of one call lie one after the other at this alignment (the first at the start of the buffer).
constexpr long long kWorkspaceAlignment = 256;
/// What the kernels' pointer fields need of a caller's workspace.
constexpr uintptr_t kWorkspacePointerAlignment = 4;
/// Grid limits of the driver: x up to 2^31 - 1, y and z up to 65535.
constexpr long long kMaxGridX = INT_MAX, kMaxGridYZ = 65535;

/// The sizes a plan's rules read, for `args`.
PlanSymbols symbolsFor(const AttentionArgs &args) {
  PlanSymbols s;
  s.batch = args.batch;
  s.headsQ = args.headsQ;
  s.headsKv = args.headsKv;
  s.rows = args.isVarlen() ? args.maxSeqlenQ : args.seqlenQ;
  s.keys = args.isVarlen() ? args.maxSeqlenK : args.seqlenK;
  s.newRows = args.kvCache.enabled() ? args.kvCache.seqlenNew : 0;
  s.headDim = args.headDim;
  s.headDimV = args.headDimV;
  s.lseRows = lseRows(args);
  s.keyRows = args.isVarlen() ? args.seqlenK : static_cast<long long>(args.batch) * args.seqlenK;
  return s;
}

/// The int fields of the parameter block a plan sets (LaunchPlan.h: kPlanIntFields).
void setIntField(FlashtileFwdParams &params, const std::string &field, long long value) {
  if (field == "qTiles")
    params.qTiles = static_cast<int>(value);
  else if (field == "numSplits")
    params.numSplits = static_cast<int>(value);
  else if (field == "kvStep")
    params.kvStep = static_cast<int>(value);
  else if (field == "accumSplitStride")
    params.accumSplitStride = value;
  else if (field == "kvTiles")
    params.kvTiles = static_cast<int>(value);
}

/// The pointer fields a workspace binds (LaunchPlan.h: kPlanPointerFields), of the parameter block or, for e4m3
/// modules, of their FP8 parameters (Fp8Abi.h).
void setPointerField(FlashtileFwdParams &params, FlashtileFp8Params &fp8, const std::string &field,
                     CUdeviceptr address) {
  float *asFloat = reinterpret_cast<float *>(address);
  if (field == "vTransposed")
    fp8.vTransposed = reinterpret_cast<void *>(address);
  else if (field == "oAccum")
    params.oAccum = asFloat;
  else if (field == "lseAccum")
    params.lseAccum = asFloat;
  else if (field == "stateAcc")
    params.stateAcc = asFloat;
  else if (field == "stateMax")
    params.stateMax = asFloat;
  else if (field == "stateSum")
    params.stateSum = asFloat;
  else if (field == "tileCounter")
    params.tileCounter = reinterpret_cast<int *>(address);
  else if (field == "delta")
    params.delta = asFloat;
  else if (field == "dqAccum")
    params.dqAccum = asFloat;
  else if (field == "dkAccum")
    params.dkAccum = asFloat;
  else if (field == "dvAccum")
    params.dvAccum = asFloat;
  else if (field == "semaphores")
    params.semaphores = reinterpret_cast<int *>(address);
  else if (field == "inputGradPartials")
    params.inputGradPartials = asFloat;
  else if (field == "kvErrors")
    params.kvErrors = reinterpret_cast<FlashtileKvError *>(address);
}

/// The TMA descriptors of `args` for boxes of `qRows` and `kvRows` rows swizzled over `swizzle`. Encoding three descriptors costs a few
/// microseconds of driver calls; a thread's last call usually repeats (the same tensors, or the same shapes with
/// new pointers), so each thread keeps its last set and re-points it when only the pointers changed.
StatusOr<AttentionTensorMaps> tensorMapsFor(const AttentionArgs &args, int qRows, int kvRows, TmaSwizzle swizzle) {
  struct Key {
    const void *q, *k, *v;
    int dtype, batch, seqlenQ, seqlenK, headsQ, headsKv, headDim, headDimV, qRows, kvRows, swizzle;
    bool varlen;
    std::array<long long, 4> qStride, kStride, vStride;
    bool sameShape(const Key &o) const {
      return dtype == o.dtype && batch == o.batch && seqlenQ == o.seqlenQ && seqlenK == o.seqlenK &&
             headsQ == o.headsQ && headsKv == o.headsKv && headDim == o.headDim && headDimV == o.headDimV &&
             qRows == o.qRows && kvRows == o.kvRows && swizzle == o.swizzle && varlen == o.varlen &&
             qStride == o.qStride &&
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
                args.seqlenK,    args.headsQ,  args.headsKv, args.headDim, args.headDimV, qRows, kvRows,
                static_cast<int>(swizzle), args.isVarlen(), args.qStride, args.kStride, args.vStride};
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
  StatusOr<AttentionTensorMaps> maps = attentionTensorMaps(args, qRows, kvRows, swizzle);
  if (!maps.ok())
    return maps.status();
  last = Last{true, key, *maps};
  return *maps;
}

/// A launch of the plan, evaluated for one call.
struct ResolvedLaunch {
  size_t index = 0;
  std::array<unsigned, 3> grid{};
  long long repeat = 1;
};

/// A workspace of the plan, evaluated for one call.
struct ResolvedWorkspace {
  size_t index = 0;
  long long bytes = 0;
  long long offset = 0; // from the start of the call's workspace memory
};

StatusOr<long long> evalRule(const PlanExpr &rule, const PlanSymbols &symbols, const std::string &entry) {
  StatusOr<long long> value = rule.eval(symbols);
  if (!value.ok())
    return value.status().withContext("kernel " + entry);
  return value;
}

StatusOr<bool> holds(const std::optional<PlanExpr> &when, const PlanSymbols &symbols, const std::string &entry) {
  if (!when)
    return true;
  StatusOr<long long> value = evalRule(*when, symbols, entry);
  if (!value.ok())
    return value.status();
  return *value != 0;
}

/// The workspaces the plan needs at `symbols`, laid out one after the other; `total` their extent.
StatusOr<std::vector<ResolvedWorkspace>> layOutWorkspaces(const KernelInfo &info, const PlanSymbols &symbols,
                                                          long long &total) {
  std::vector<ResolvedWorkspace> needed;
  total = 0;
  for (size_t i = 0; i < info.plan.workspaces.size(); ++i) {
    const PlanWorkspace &w = info.plan.workspaces[i];
    if (w.errorRecord)
      continue; // the runtime's own, kept across calls: bound below, after the launches are resolved
    StatusOr<bool> wanted = holds(w.when, symbols, info.entry);
    if (!wanted.ok())
      return wanted.status();
    if (!*wanted)
      continue;
    StatusOr<long long> bytes = evalRule(w.bytes, symbols, info.entry);
    if (!bytes.ok())
      return bytes.status();
    if (*bytes <= 0)
      continue;
    total = (total + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
    needed.push_back({i, *bytes, total});
    total += *bytes;
  }
  return needed;
}

std::string describeWorkspaces(const KernelInfo &info, const std::vector<ResolvedWorkspace> &needed) {
  std::string text;
  for (const ResolvedWorkspace &w : needed)
    text += (text.empty() ? "" : ", ") + info.plan.workspaces[w.index].name + " " + std::to_string(w.bytes);
  return text;
}

} // namespace

FlashtileFwdParams flashtile::detail::paramsFor(const AttentionArgs &args) {
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
  fillKvCacheParams(args, params);
  return params;
}

FlashtileFwdParams flashtile::detail::paramsFor(const BackwardArgs &args) {
  FlashtileFwdParams params = paramsFor(args.forward);
  const bool varlen = args.forward.isVarlen();
  params.dO = args.dO;
  params.dQ = args.dQ;
  params.dK = args.dK;
  params.dV = args.dV;
  // Varlen: batch strides are 0, as the forward's (KernelAbi.h).
  params.dOBatchStride = varlen ? 0 : args.dOStride[0];
  params.dORowStride = args.dOStride[1];
  params.dOHeadStride = args.dOStride[2];
  params.dQBatchStride = varlen ? 0 : args.dQStride[0];
  params.dQRowStride = args.dQStride[1];
  params.dQHeadStride = args.dQStride[2];
  params.dKBatchStride = varlen ? 0 : args.dKStride[0];
  params.dKRowStride = args.dKStride[1];
  params.dKHeadStride = args.dKStride[2];
  params.dVBatchStride = varlen ? 0 : args.dVStride[0];
  params.dVRowStride = args.dVStride[1];
  params.dVHeadStride = args.dVStride[2];
  std::copy(args.inputGrads.begin(), args.inputGrads.end(), params.inputGrads);
  params.deterministic = args.deterministic ? 1 : 0;
  return params;
}

StatusOr<LoadedModule> flashtile::detail::loadModule(const CudaDriver &driver, CUcontext context,
                                                     const std::shared_ptr<const CachedKernel> &kernel) {
  const KernelInfo &info = kernel->info;
  LoadedModule loaded;
  loaded.kernel = kernel;
  loaded.context = context;
  if (Status s = driver.check(driver.cuModuleLoadData(&loaded.module, kernel->cubin.data()),
                              "cuModuleLoadData(" + info.entry + ")");
      !s.ok())
    return s;
  auto fail = [&](Status status) {
    driver.cuModuleUnload(loaded.module);
    return status;
  };
  int optInLimit = -1; // read once, when a launch needs more than the default
  for (const PlanLaunch &launch : info.plan.launches) {
    CUfunction function = nullptr;
    if (Status s = driver.check(driver.cuModuleGetFunction(&function, loaded.module, launch.entry.c_str()),
                                "cuModuleGetFunction(" + launch.entry + ")");
        !s.ok())
      return fail(s);
    loaded.functions.push_back(function);
    if (launch.smemBytes <= kDefaultDynamicSmemLimit)
      continue;
    if (optInLimit < 0) {
      CUdevice device = 0;
      if (Status s = driver.check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice"); !s.ok())
        return fail(s);
      if (Status s = driver.check(
              driver.cuDeviceGetAttribute(&optInLimit, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
              "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
          !s.ok())
        return fail(s);
    }
    if (launch.smemBytes > optInLimit)
      return fail(Status::error("kernel " + launch.entry + " needs " + std::to_string(launch.smemBytes) +
                                " bytes of dynamic shared memory; this GPU allows " + std::to_string(optInLimit)));
    if (Status s = driver.check(
            driver.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.smemBytes),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, " + launch.entry + ")");
        !s.ok())
      return fail(s);
  }
  if (info.plan.splits) {
    // The split heuristic counts waves of the split launch's blocks: its registers and shared memory decide how
    // many an SM holds (2 for 64-row blocks at head dim 128, 3 for 32-row ones).
    const size_t index = static_cast<size_t>(info.plan.splits->occupancyOf);
    const PlanLaunch &launch = info.plan.launches[index];
    int blocks = 0;
    if (Status s = driver.check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, loaded.functions[index],
                                                                                 launch.threads, launch.smemBytes),
                                "cuOccupancyMaxActiveBlocksPerMultiprocessor(" + launch.entry + ")");
        !s.ok())
      return fail(s);
    if (blocks < 1)
      return fail(Status::error("kernel " + launch.entry + " fits no thread block on an SM of this GPU (" +
                                std::to_string(launch.threads) + " threads, " + std::to_string(launch.smemBytes) +
                                " bytes of shared memory)"));
    loaded.blocksPerSm = blocks;
  }
  return loaded;
}

StatusOr<int> flashtile::detail::planSplits(const KernelInfo &info, const AttentionArgs &args, int sms,
                                            int blocksPerSm) {
  if (!info.plan.splits)
    return 1;
  if (args.numSplits > 0)
    return args.numSplits;
  PlanSymbols symbols = symbolsFor(args);
  symbols.sms = sms;
  StatusOr<long long> blocks = evalRule(info.plan.splits->blocks, symbols, info.entry);
  if (!blocks.ok())
    return blocks.status();
  StatusOr<long long> kvTiles = evalRule(info.plan.splits->kvTiles, symbols, info.entry);
  if (!kvTiles.ok())
    return kvTiles.status();
  return numSplitsHeuristic(*blocks, sms * std::max(blocksPerSm, 1),
                            static_cast<int>(std::min<long long>(*kvTiles, INT_MAX)));
}

namespace {
/// A forward call's workspaces: `symbols` (with sms set) gets the splits planSplits gives, then the plan's workspaces
/// are laid out (`total` their extent).
StatusOr<std::vector<ResolvedWorkspace>> splitAndLayOut(const KernelInfo &info, const AttentionArgs &args,
                                                        PlanSymbols &symbols, int blocksPerSm, long long &total) {
  StatusOr<int> splits = planSplits(info, args, static_cast<int>(symbols.sms), blocksPerSm);
  if (!splits.ok())
    return splits.status();
  symbols.splits = *splits;
  return layOutWorkspaces(info, symbols, total);
}
} // namespace

StatusOr<size_t> flashtile::detail::forwardWorkspaceBytes(const KernelInfo &info, const AttentionArgs &args, int sms,
                                                          int blocksPerSm) {
  PlanSymbols symbols = symbolsFor(args);
  symbols.sms = sms;
  long long total = 0;
  StatusOr<std::vector<ResolvedWorkspace>> workspaces = splitAndLayOut(info, args, symbols, blocksPerSm, total);
  if (!workspaces.ok())
    return workspaces.status();
  return static_cast<size_t>(total);
}

StatusOr<size_t> flashtile::detail::backwardWorkspaceBytes(const KernelInfo &info, const BackwardArgs &backward) {
  PlanSymbols symbols = symbolsFor(backward.forward);
  symbols.deterministic = backward.deterministic ? 1 : 0;
  long long total = 0;
  StatusOr<std::vector<ResolvedWorkspace>> workspaces = layOutWorkspaces(info, symbols, total);
  if (!workspaces.ok())
    return workspaces.status();
  return static_cast<size_t>(total);
}

namespace {

/// The plan's launches that run for this call (their `when` holds), with their grids and repeat counts: every rule is
/// evaluated before anything is queued, so that a call either launches whole or not at all. A launch of an empty grid
/// is left out.
StatusOr<std::vector<ResolvedLaunch>> resolveLaunches(const LaunchPlan &plan, const PlanSymbols &symbols) {
  std::vector<ResolvedLaunch> launches;
  for (size_t i = 0; i < plan.launches.size(); ++i) {
    const PlanLaunch &launch = plan.launches[i];
    StatusOr<bool> runs = holds(launch.when, symbols, launch.entry);
    if (!runs.ok())
      return runs.status();
    if (!*runs)
      continue;
    ResolvedLaunch resolved{i};
    std::array<long long, 3> grid{};
    for (size_t d = 0; d < 3; ++d) {
      StatusOr<long long> blocks = evalRule(launch.grid[d], symbols, launch.entry);
      if (!blocks.ok())
        return blocks.status();
      grid[d] = *blocks;
    }
    if (grid[0] > kMaxGridX || grid[1] > kMaxGridYZ || grid[2] > kMaxGridYZ || grid[0] < 0 || grid[1] < 0 ||
        grid[2] < 0)
      return Status::error("the launch grid of " + launch.entry + " would be " + std::to_string(grid[0]) + " x " +
                           std::to_string(grid[1]) + " x " + std::to_string(grid[2]) + " thread blocks; at most " +
                           std::to_string(kMaxGridX) + " x 65535 x 65535 are supported: use fewer splits "
                           "(numSplits), or split the batch or the heads into several calls");
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
      continue;
    for (size_t d = 0; d < 3; ++d)
      resolved.grid[d] = static_cast<unsigned>(grid[d]);
    if (launch.repeat) {
      StatusOr<long long> times = evalRule(*launch.repeat, symbols, launch.entry);
      if (!times.ok())
        return times.status();
      if (*times > INT_MAX)
        return Status::error("kernel " + launch.entry + " would be launched " + std::to_string(*times) + " times");
      resolved.repeat = *times;
    }
    launches.push_back(resolved);
  }
  return launches;
}

/// Checks the workspace the call needs against what it has: under CUDA graph capture without a caller's workspace the
/// runtime's own cannot grow, so a split plan runs unsplit (re-laid out into `workspaces` and `total`) and any other
/// plan that needs one is an error; a caller's workspace must be large enough and 4-byte aligned.
Status checkWorkspace(const CudaDriver &driver, CUstream stream, const KernelInfo &info, PlanSymbols &symbols,
                      StatusOr<std::vector<ResolvedWorkspace>> &workspaces, long long &total, void *callerWorkspace,
                      size_t callerWorkspaceBytes) {
  const LaunchPlan &plan = info.plan;
  const bool ownWorkspace = !workspaces->empty() && !callerWorkspace;
  if (ownWorkspace) {
    // Under CUDA graph capture the runtime's own workspace cannot grow (no allocation, no synchronization), and a
    // graph would keep a pointer to a buffer that a later growth frees: without a caller's workspace, a split
    // plan runs unsplit, and any other plan that needs one is an error.
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (Status s = driver.check(driver.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing"); !s.ok())
      return s;
    if (capture != CU_STREAM_CAPTURE_STATUS_NONE) {
      if (plan.splits && symbols.splits > 1) {
        symbols.splits = 1;
        workspaces = layOutWorkspaces(info, symbols, total);
        if (!workspaces.ok())
          return workspaces.status();
      }
      if (!workspaces->empty())
        return Status::error("kernel " + info.entry + " (schedule " + info.schedule + ") needs a workspace (" +
                             describeWorkspaces(info, *workspaces) +
                             " bytes); under CUDA graph capture pass one (workspace, workspaceBytes >= " +
                             std::to_string(total) + ")");
    }
  }
  if (callerWorkspace && !workspaces->empty()) {
    if (callerWorkspaceBytes < static_cast<size_t>(total))
      return Status::error("workspaceBytes is " + std::to_string(callerWorkspaceBytes) + "; kernel " + info.entry +
                           " (schedule " + info.schedule + ") needs " + std::to_string(total) + " for this call (" +
                           describeWorkspaces(info, *workspaces) + " bytes)");
    if (reinterpret_cast<uintptr_t>(callerWorkspace) % kWorkspacePointerAlignment != 0)
      return Status::error("workspace is not 4-byte aligned; kernel " + info.entry + " keeps ints and floats there");
  }
  return Status();
}

/// Binds the plan's workspaces into `params` (the caller's memory, or the runtime's own buffer, grown if needed and
/// held by `workspaceLock` until the launches are queued) and zeroes those the plan asks zeroed, on `stream`.
Status bindWorkspaces(const CudaDriver &driver, CUstream stream, PlanServices &services, const KernelInfo &info,
                      const PlanSymbols &symbols, const std::vector<ResolvedWorkspace> &resolved, long long total,
                      void *callerWorkspace, FlashtileFwdParams &params, FlashtileFp8Params &fp8,
                      std::unique_lock<std::mutex> &workspaceLock) {
  const LaunchPlan &plan = info.plan;
  const std::vector<ResolvedWorkspace> *workspaces = &resolved;
  if (!workspaces->empty()) {
    CUdeviceptr base = reinterpret_cast<CUdeviceptr>(callerWorkspace);
    if (!callerWorkspace) {
      CUcontext context = nullptr;
      if (Status s = driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
        return s;
      // Held until every launch is queued: no other call on the stream grows (frees) this buffer meanwhile.
      workspaceLock = std::unique_lock<std::mutex>(services.workspaces.mutex());
      bool synchronized = false;
      StatusOr<CUdeviceptr> owned =
          services.workspaces.buffer(driver, context, stream, static_cast<size_t>(total), &synchronized);
      if (!owned.ok())
        return owned.status();
      base = *owned;
      // The stream's earlier work is done: a bad device value an earlier call met is reported now.
      if (synchronized && services.kvErrors)
        if (Status s = services.kvErrors->readAfterSync(driver, context, stream); !s.ok())
          return s;
    }
    for (const ResolvedWorkspace &w : *workspaces) {
      const PlanWorkspace &rule = plan.workspaces[w.index];
      const CUdeviceptr start = base + static_cast<CUdeviceptr>(w.offset);
      for (const auto &[field, offsetRule] : rule.bind) {
        StatusOr<long long> offset = evalRule(offsetRule, symbols, info.entry);
        if (!offset.ok())
          return offset.status();
        setPointerField(params, fp8, field, start + static_cast<CUdeviceptr>(*offset));
      }
      // Zeroed on the stream, after its earlier work and before this call's launches.
      if (rule.zeroed)
        if (Status s = driver.check(driver.cuMemsetD32Async(start, 0, static_cast<size_t>(w.bytes + 3) / 4, stream),
                                    "cuMemsetD32Async (workspace " + rule.name + " of " + info.entry + ")");
            !s.ok())
          return s;
    }
  }
  return Status();
}

/// The KV-cache error record a plan's workspace asks for (errorRecord), bound into `params` for this call.
Status bindKvErrors(const CudaDriver &driver, CUstream stream, PlanServices &services, const LoadedModule &module,
                    const AttentionArgs &args, FlashtileFwdParams &params) {
  const KernelInfo &info = module.kernel->info;
  const LaunchPlan &plan = info.plan;
  for (const PlanWorkspace &w : plan.workspaces) {
    if (!w.errorRecord || !services.kvErrors)
      continue;
    CUcontext context = nullptr;
    if (Status s = driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent"); !s.ok())
      return s;
    StatusOr<std::pair<FlashtileKvError *, int>> record =
        services.kvErrors->bind(driver, context, stream, KvCallInfo::of(args, module.kernel, stream));
    if (!record.ok())
      return record.status().withContext("kernel " + info.entry);
    params.kvErrors = record->first;
    params.kvCall = record->second;
  }
  return Status();
}

/// Queues `launches` on `stream`: each launch's TMA descriptors (a forward's q, k, v or a backward's q, k, v, do),
/// its cluster and programmatic-dependent-launch attributes, once per repeat with its index in the parameter block.
/// Every kernel of a module compiled with position offsets takes the call's FlashtilePositions as its second
/// parameter (PositionsAbi.h), ahead of the tensor maps; other modules' kernels take none. The kernels of an e4m3
/// module take `fp8` last (Fp8Abi.h): after the descriptors where they take them.
Status launchAll(const CudaDriver &driver, CUstream stream, const LoadedModule &module, const AttentionArgs &args,
                 const BackwardArgs *backward, const std::vector<ResolvedLaunch> &launches, FlashtileFwdParams &params,
                 FlashtileFp8Params &fp8) {
  const bool takesFp8 = module.kernel->info.dtype == dtypeName(DType::E4M3) ||
                        module.kernel->info.kvDtype == dtypeName(DType::E4M3); // an e4m3 KV cache's descales
  const LaunchPlan &plan = module.kernel->info.plan;
  const bool takesPositions = module.kernel->info.positions;
  FlashtilePositions positions = positionsFor(args);
  AttentionTensorMaps maps{};
  BackwardTensorMaps backwardMaps{};
  for (const ResolvedLaunch &resolved : launches) {
    const PlanLaunch &launch = plan.launches[resolved.index];
    // A backward kernel's maps (q, k, v, do; LaunchPlan::verify) or a forward kernel's (q, k, v).
    const bool backwardLaunch = launch.tensorMaps.size() == 4;
    if (!launch.tensorMaps.empty()) {
      // The plan's maps share one span (LaunchPlan::verify).
      StatusOr<TmaSwizzle> swizzle = tmaSwizzleOfBytes(launch.tensorMaps[0].swizzleBytes);
      Status encodedStatus = swizzle.status();
      if (swizzle.ok() && backwardLaunch) {
        if (!backward)
          return Status::error("TMA descriptors of " + launch.entry + ": the kernel takes dO's (a backward kernel) "
                               "but the call is not a backward call");
        StatusOr<BackwardTensorMaps> encoded =
            backwardTensorMaps(*backward, launch.tensorMaps[0].boxRows, launch.tensorMaps[1].boxRows, *swizzle);
        encodedStatus = encoded.status();
        if (encoded.ok())
          backwardMaps = *encoded;
      } else if (swizzle.ok()) {
        StatusOr<AttentionTensorMaps> encoded =
            tensorMapsFor(args, launch.tensorMaps[0].boxRows, launch.tensorMaps[1].boxRows, *swizzle);
        encodedStatus = encoded.status();
        if (encoded.ok())
          maps = *encoded;
      }
      if (!encodedStatus.ok())
        return Status::error("TMA descriptors of " + launch.entry + ": " + encodedStatus.message());
    }
    // The parameters in order: params, the positions (position offsets), the descriptors (every launch of a
    // 16-bit module: a kernel that takes none ignores them; an e4m3 module's launches that take them), fp8 (e4m3).
    void *const mapsParam = backwardLaunch ? static_cast<void *>(&backwardMaps) : static_cast<void *>(&maps);
    std::array<void *, 4> kernelParamList{};
    size_t paramCount = 0;
    kernelParamList[paramCount++] = &params;
    if (takesPositions)
      kernelParamList[paramCount++] = &positions;
    if (!takesFp8 || !launch.tensorMaps.empty())
      kernelParamList[paramCount++] = mapsParam;
    if (takesFp8)
      kernelParamList[paramCount++] = &fp8;
    void **kernelParams = kernelParamList.data();
    const bool plain = launch.cluster == std::array<int, 3>{1, 1, 1} && !launch.dependent;
    CUlaunchConfig config{};
    std::array<CUlaunchAttribute, 2> attributes{};
    if (!plain) {
      config.gridDimX = resolved.grid[0];
      config.gridDimY = resolved.grid[1];
      config.gridDimZ = resolved.grid[2];
      config.blockDimX = static_cast<unsigned>(launch.threads);
      config.blockDimY = config.blockDimZ = 1;
      config.sharedMemBytes = static_cast<unsigned>(launch.smemBytes);
      config.hStream = stream;
      config.attrs = attributes.data();
      if (launch.dependent) {
        // May launch while the previous grid's last blocks finish; the kernel waits for that grid
        // (griddepcontrol.wait) where it reads its results.
        attributes[config.numAttrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attributes[config.numAttrs++].value.programmaticStreamSerializationAllowed = 1;
      }
      if (launch.cluster != std::array<int, 3>{1, 1, 1}) {
        attributes[config.numAttrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attributes[config.numAttrs].value.clusterDim.x = static_cast<unsigned>(launch.cluster[0]);
        attributes[config.numAttrs].value.clusterDim.y = static_cast<unsigned>(launch.cluster[1]);
        attributes[config.numAttrs++].value.clusterDim.z = static_cast<unsigned>(launch.cluster[2]);
      }
    }
    // cuLaunchKernel copies the parameter block, so each repeated launch keeps its own index.
    for (long long r = 0; r < resolved.repeat; ++r) {
      if (launch.repeat)
        setIntField(params, launch.repeatField, r);
      CUfunction function = module.functions[resolved.index];
      CUresult launched =
          plain ? driver.cuLaunchKernel(function, resolved.grid[0], resolved.grid[1], resolved.grid[2],
                                        static_cast<unsigned>(launch.threads), 1, 1,
                                        static_cast<unsigned>(launch.smemBytes), stream, kernelParams, nullptr)
                : driver.cuLaunchKernelEx(&config, function, kernelParams, nullptr);
      if (launched != CUDA_SUCCESS)
        return driver.check(launched, std::string(plain ? "cuLaunchKernel(" : "cuLaunchKernelEx(") + launch.entry +
                                          (launch.repeat ? ", " + launch.repeatField + " " + std::to_string(r) : "") +
                                          ")");
    }
  }
  return Status();
}

} // namespace

Status flashtile::detail::runPlan(const CudaDriver &driver, const LoadedModule &module, const AttentionArgs &args,
                                  CUstream stream, PlanServices &services, const BackwardArgs *backward) {
  const KernelInfo &info = module.kernel->info;
  const LaunchPlan &plan = info.plan;
  PlanSymbols symbols = symbolsFor(args);
  symbols.deterministic = backward && backward->deterministic ? 1 : 0;
  // The caller's workspace: the backward call's own, else the forward arguments'.
  void *const callerWorkspace = backward ? backward->workspace : args.workspace;
  const size_t callerWorkspaceBytes = backward ? backward->workspaceBytes : args.workspaceBytes;
  if (plan.reads("sms")) {
    StatusOr<int> sms = services.smCount();
    if (!sms.ok())
      return sms.status();
    symbols.sms = *sms;
  }
  if (plan.splits && args.numSplits == 0 && !plan.reads("sms")) {
    StatusOr<int> sms = services.smCount();
    if (!sms.ok())
      return sms.status();
    symbols.sms = *sms;
  }
  long long total = 0;
  StatusOr<std::vector<ResolvedWorkspace>> workspaces =
      splitAndLayOut(info, args, symbols, module.blocksPerSm, total);
  if (!workspaces.ok())
    return workspaces.status();
  if (Status s = checkWorkspace(driver, stream, info, symbols, workspaces, total, callerWorkspace, callerWorkspaceBytes);
      !s.ok())
    return s;
  StatusOr<std::vector<ResolvedLaunch>> launches = resolveLaunches(plan, symbols);
  if (!launches.ok())
    return launches.status();

  FlashtileFwdParams params = backward ? paramsFor(*backward) : paramsFor(args);
  for (const auto &[field, rule] : plan.set) {
    StatusOr<long long> value = evalRule(rule, symbols, info.entry);
    if (!value.ok())
      return value.status();
    setIntField(params, field, *value);
  }
  FlashtileFp8Params fp8{args.qDescale, args.kDescale, args.vDescale, nullptr};
  std::unique_lock<std::mutex> workspaceLock; // held until every launch is queued (bindWorkspaces)
  if (Status s = bindWorkspaces(driver, stream, services, info, symbols, *workspaces, total, callerWorkspace, params,
                                fp8, workspaceLock);
      !s.ok())
    return s;
  if (Status s = bindKvErrors(driver, stream, services, module, args, params); !s.ok())
    return s;
  return launchAll(driver, stream, module, args, backward, *launches, params, fp8);
}
