// RuntimeDispatch.cpp — which schedule and kernel serve a call, and why: the spec of a call (specFor), the dispatch
// rules' order and each candidate's verdict (Impl::plan, Impl::resolve), explain() and the shape class. Runtime::Impl
// is RuntimeImpl.h; loading and launching are Runtime.cpp.
#include "RuntimeImpl.h"

using namespace flashtile;
using namespace flashtile::detail;

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
  // An e4m3 cache runs kernels that read 8-bit K/V (and take its descales).
  spec.kvDtype = args.kvCache.e4m3() ? dtypeName(DType::E4M3) : "";
  // Blocks of a larger problem run modules compiled with position offsets, plain calls modules without.
  spec.positions = args.positions.has_value();
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

/// "schedule: why; schedule: why" of the schedules of `order` that had no kernel (failures[f] is order[f]'s).
std::string failuresText(const std::vector<std::string> &order, const std::vector<Status> &failures) {
  std::string text;
  for (size_t f = 0; f < failures.size(); ++f)
    text += (f ? "; " : "") + order[f] + ": " + oneLine(failures[f].message());
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

ScheduleChoice Runtime::Impl::describeChoice(const Plan &p, const std::string &arch, size_t i, const CachedKernel &kernel,
                                             const std::string &failures, const std::string &firstLabel) {
  ScheduleChoice choice;
  choice.spec = kernel.info.spec();
  choice.entry = kernel.info.entry;
  choice.order = p.order;
  choice.forcedBy = p.order.front() == p.forced ? p.forcedBy : "";
  choice.fellBack = i > 0;
  if (i == 0)
    choice.reason = p.order.front() == p.forced
                        ? "named by " + p.forcedBy
                        : "preferred on " + arch + (p.decodeSized ? " for decode-sized calls" : "") +
                              " (order: " + joinedOrder(p.order) + ")";
  else
    choice.reason = "fell back: " + firstLabel + " has no kernel for this call (" + failures + ")";
  if (kernel.info.neverRunOnArch)
    choice.reason += "; its schedule never ran on " + arch + ": the kernel runs only after agreeing with schedule '" +
                     kernel.info.checkAgainst + "' in a first-use self-check";
  return choice;
}

Status Runtime::Impl::noKernel(const Plan &p, const std::vector<Status> &failures) {
  bool same = std::all_of(failures.begin(), failures.end(),
                          [&](const Status &f) { return f.message() == failures.front().message(); });
  if (same)
    return failures.front();
  return Status::error("no schedule has a kernel for this call (tried " + joinedOrder(p.order) +
                       "): " + failuresText(p.order, failures));
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
    const std::string tried = failuresText(p.order, failures);
    ScheduleChoice choice = describeChoice(p, arch, i, **kernel, tried, firstLabel());
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
      logWarning(firstLabel() + " has no kernel for " + first.key() + " (" + tried + "); running '" +
                 p.order[i] + "' instead (" + strictNote + " makes this an error)");
    }
    return Resolution{std::move(*kernel), std::move(choice), provisional};
  }
  return noKernel(p, failures);
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
