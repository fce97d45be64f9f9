//===- ScheduleRegistry.cpp - schedules by name ---------------------------===//
#include "passes/Transforms/ScheduleRegistry.h"
#include "passes/IR/TileCtaPair.h"
#include "passes/IR/TileExp2Poly.h"
#include "passes/IR/TileKvDtype.h"
#include "passes/Transforms/Passes.h"

#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <mutex>

namespace flashtile::schedule {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<Schedule>, std::less<>> schedules;
};

Registry &registry() {
  static Registry instance;
  return instance;
}

std::string joined(const std::vector<std::string> &items, const char *separator = ", ") {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : separator) + item;
  return text.empty() ? "none" : text;
}

/// The closest of `candidates` to `word` when it is a likely typo (edit distance at most a third of its length).
std::string nearest(std::string_view word, const std::vector<std::string> &candidates) {
  std::string best;
  unsigned bestDistance = std::max<unsigned>(1, word.size() / 3) + 1;
  for (const std::string &candidate : candidates) {
    unsigned d = llvm::StringRef(word).edit_distance(candidate, /*AllowReplacements=*/true, bestDistance);
    if (d < bestDistance) {
      bestDistance = d;
      best = candidate;
    }
  }
  return best;
}

} // namespace

void registerSchedule(std::unique_ptr<Schedule> schedule) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::string name(schedule->name());
  [[maybe_unused]] bool added = r.schedules.emplace(name, std::move(schedule)).second;
  assert(added && "two schedules registered under one name");
}

std::unique_ptr<Schedule> unregisterSchedule(std::string_view name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.schedules.find(name);
  if (it == r.schedules.end())
    return nullptr;
  std::unique_ptr<Schedule> schedule = std::move(it->second);
  r.schedules.erase(it);
  return schedule;
}

const Schedule *lookupSchedule(std::string_view name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.schedules.find(name);
  return it == r.schedules.end() ? nullptr : it->second.get();
}

std::vector<std::string> scheduleNames() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &[name, schedule] : r.schedules)
    names.push_back(name);
  return names;
}

std::string unknownScheduleMessage(std::string_view name) {
  std::vector<std::string> names = scheduleNames();
  std::string message = "unknown schedule '" + std::string(name) + "'";
  if (std::string guess = nearest(name, names); !guess.empty())
    message += " (did you mean '" + guess + "'?)";
  return message + "; available: " + joined(names);
}

DispatchRule dispatchRuleOf(const Schedule &schedule, std::string_view arch) {
  if (schedule.targetFamilyFor(arch).empty())
    return DispatchRule{std::string(schedule.name()), std::string(arch)};
  DispatchRule rule = schedule.dispatchRule(arch);
  rule.schedule = std::string(schedule.name());
  rule.arch = std::string(arch);
  return rule;
}

std::vector<DispatchRule> dispatchRules() {
  std::vector<DispatchRule> rules;
  for (const std::string &name : scheduleNames())
    if (const Schedule *schedule = lookupSchedule(name))
      for (std::string_view arch : kSupportedArchs)
        if (DispatchRule rule = dispatchRuleOf(*schedule, arch);
            rule.calls != DefaultCalls::None || !rule.preferredOver.empty())
          rules.push_back(std::move(rule));
  return rules;
}

void recordDispatchRule(KernelInfo &info) {
  if (const Schedule *schedule = lookupSchedule(info.schedule))
    recordDispatchRule(info, *schedule);
}

void recordDispatchRule(KernelInfo &info, const Schedule &schedule) {
  DispatchRule rule = dispatchRuleOf(schedule, info.arch);
  info.defaultFor = rule.calls;
  info.preferredOver = std::move(rule.preferredOver);
  // KV-cache kernels are not marked: the self-check runs dense calls (the schedules that read caches are proven).
  info.checkAgainst = info.kvCache ? std::string() : schedule.checkAgainstOn(info.arch);
  info.neverRunOnArch = !info.checkAgainst.empty();
}

bool hasKvCacheKnob(const Schedule &schedule) {
  return llvm::any_of(schedule.options(), [](const OptionSpec &o) { return o.name == kKvCacheKnob; });
}

std::optional<int64_t> knobValue(const OptionSpec &spec, std::string_view text) {
  for (size_t i = 0; i < spec.values.size(); ++i)
    if (spec.values[i] == text)
      return static_cast<int64_t>(i);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

std::string checkKnobs(const Schedule &schedule, const Knobs &knobs) {
  for (const auto &[name, value] : knobs) {
    auto spec = std::find_if(schedule.options().begin(), schedule.options().end(),
                             [&](const OptionSpec &o) { return o.name == name; });
    if (spec == schedule.options().end()) {
      std::vector<std::string> names;
      for (const OptionSpec &o : schedule.options())
        names.push_back(o.name);
      std::string message = std::string(schedule.name()) + ": unknown option '" + name + "'";
      if (std::string guess = nearest(name, names); !guess.empty())
        message += " (did you mean '" + guess + "'?)";
      return message + "; accepted: " + joined(names);
    }
    if (!spec->values.empty() && (value < spec->min || value > spec->max))
      return std::string(schedule.name()) + ": " + name + " = " + std::to_string(value) +
             " is not accepted; accepted: " + joined(spec->values) + " (" + spec->help + ")";
    if (value < spec->min || value > spec->max)
      return std::string(schedule.name()) + ": " + name + " = " + std::to_string(value) +
             " is out of range; accepted: " + std::to_string(spec->min) + " to " + std::to_string(spec->max) + " (" +
             spec->help + ")";
  }
  return "";
}

mlir::FailureOr<Knobs> parseKnobs(const Schedule &schedule, const std::vector<std::string> &items, std::string &error) {
  Knobs knobs;
  for (const std::string &item : items) {
    auto [name, text] = llvm::StringRef(item).split('=');
    name = name.trim();
    text = text.trim();
    auto spec = std::find_if(schedule.options().begin(), schedule.options().end(),
                             [&](const OptionSpec &o) { return o.name == name; });
    std::optional<int64_t> parsed;
    if (spec != schedule.options().end())
      parsed = knobValue(*spec, text);
    else if (int64_t v = 0; !text.empty())
      if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          ec == std::errc() && end == text.data() + text.size())
        parsed = v;
    if (name.empty() || text.empty() || !parsed) {
      error = std::string(schedule.name()) + ": option '" + item + "' is not of the form name=" +
              (spec != schedule.options().end() && !spec->values.empty() ? joined(spec->values, "|")
                                                                         : std::string("integer"));
      return mlir::failure();
    }
    int64_t value = *parsed;
    if (!knobs.emplace(name.str(), value).second) {
      error = std::string(schedule.name()) + ": option '" + name.str() + "' is given twice";
      return mlir::failure();
    }
  }
  error = checkKnobs(schedule, knobs);
  if (!error.empty())
    return mlir::failure();
  return knobs;
}

std::string printKnobs(const Knobs &knobs) {
  std::string text;
  for (const auto &[name, value] : knobs)
    text += (text.empty() ? "" : ",") + name + "=" + std::to_string(value);
  return text;
}

mlir::LogicalResult buildPipeline(mlir::OpPassManager &pm, const Request &request, std::string &error) {
  const Schedule *schedule = lookupSchedule(request.schedule);
  if (!schedule) {
    error = unknownScheduleMessage(request.schedule);
    return mlir::failure();
  }
  error = checkKnobs(*schedule, request.knobs);
  if (!error.empty())
    return mlir::failure();
  schedule->buildPipeline(pm, request);
  return mlir::success();
}

std::optional<std::string> Schedule::refusesDtype(std::string_view dtype) const {
  return refusesWithoutFp8Path(*this, dtype);
}

std::optional<std::string> Schedule::refusesKvDtype(std::string_view kvDtype) const {
  if (readsKvDtype(kvDtype))
    return std::nullopt;
  // The schedules that read it, from the registry (this layer names none).
  std::string readers;
  for (const std::string &other : scheduleNames())
    if (const Schedule *schedule = lookupSchedule(other); schedule && schedule->readsKvDtype(kvDtype))
      readers += (readers.empty() ? "'" : ", '") + other + "'";
  return "schedule '" + std::string(name()) + "' reads K and V in the program's dtype: kv_dtype " +
         std::string(kvDtype) + " (an e4m3 KV cache) is read by the KV-cache kernels of schedule " +
         (readers.empty() ? std::string("(none registered)") : readers);
}

std::optional<std::string> refusesWithoutFp8Path(const Schedule &schedule, std::string_view dtype) {
  if (dtype == "bf16" || dtype == "f16")
    return std::nullopt;
  return "schedule '" + std::string(schedule.name()) + "' has no " +
         (dtype == "e4m3" ? "8-bit MMA path: dtype e4m3 is not accepted" : "path for dtype " + std::string(dtype)) +
         "; its dtypes: bf16, f16";
}

target::KernelShape kernelShapeOf(tile::FuncOp func) {
  tile::ScheduleAttr schedule = func.getScheduleAttr();
  assert(schedule && "kernelShapeOf needs a scheduled program");
  target::KernelShape shape{tile::dtypeName(func.getDtype()), static_cast<int>(func.getHeadDim()),
                            static_cast<int>(func.getHeadDimV()),      static_cast<int>(schedule.getBlockM()),
                            static_cast<int>(schedule.getBlockN()),    static_cast<int>(schedule.getWarps()),
                            static_cast<int>(schedule.getStages()),    static_cast<int>(schedule.getMinBlocksPerSm())};
  switch (schedule.getWarpLayout()) {
  case tile::WarpLayout::SplitQ:
    shape.warpLayout = target::WarpLayout::SplitQ;
    break;
  case tile::WarpLayout::SplitKeys:
    shape.warpLayout = target::WarpLayout::SplitKeys;
    break;
  }
  shape.warpRows = static_cast<int>(schedule.getWarpRows());
  if (tile::hasKvDtype(func))
    shape.kvDtype = tile::dtypeName(tile::kvDtypeOf(func));
  shape.kvConvertRegisters = func->hasAttr(tile::kKvConvertRegistersAttr);
  shape.kvF16Mma = func->hasAttr(tile::kKvF16MmaAttr);
  if (auto share = func->getAttrOfType<mlir::IntegerAttr>(tile::kExp2PolyShareAttr))
    shape.exp2PolyShare = static_cast<int>(share.getInt());
  if (auto keyWarps = func->getAttrOfType<mlir::IntegerAttr>(tile::kKeyWarpsAttr))
    shape.keyWarps = static_cast<int>(keyWarps.getInt());
  shape.ctaPair = func->hasAttr(tile::kCtaPairAttr);
  shape.gemmOverlap = func->hasAttr(tile::kGemmOverlapAttr);
  shape.dqWriter = func->hasAttr(tile::kDqWriterAttr);
  shape.dqSwizzle = func->hasAttr(tile::kDqSwizzleAttr);
  shape.descAdvance = func->hasAttr(tile::kDescAdvanceAttr);
  if (auto chains = func->getAttrOfType<mlir::IntegerAttr>(tile::kMaxChainsAttr))
    shape.maxChains = static_cast<int>(chains.getInt());
  shape.laneVote = func->hasAttr(tile::kLaneVoteAttr);
  shape.latePvWait = func->hasAttr(tile::kLatePvWaitAttr);
  shape.dqFragments = func->hasAttr(tile::kDqFragmentsAttr);
  shape.stagedKv = func->hasAttr(tile::kDkvStagedAttr);
  shape.dqReadsOnly = func->hasAttr(tile::kDqReadsOnlyAttr);
  shape.dqAddV4 = func->hasAttr(tile::kDqAddV4Attr);
  shape.lateV = func->hasAttr(tile::kLateVAttr);
  shape.dqSliced = func->hasAttr(tile::kDqSlicedAttr);
  if (auto warps = func->getAttrOfType<mlir::IntegerAttr>(tile::kDqWriterWarpsAttr))
    shape.dqWriterWarps = static_cast<int>(warps.getInt());
  shape.loadWarp = func->hasAttr(tile::kLoadWarpAttr);
  shape.swapScores = func->hasAttr(tile::kSwapScoresAttr);
  shape.swapKv = func->hasAttr(tile::kSwapKvAttr);
  shape.singleDo = func->hasAttr(tile::kSingleDoAttr);
  shape.ringRows = func->hasAttr(tile::kRingRowsAttr);
  shape.stagingRing = func->hasAttr(tile::kStagingRingAttr);
  if (auto regs = func->getAttrOfType<mlir::DenseI32ArrayAttr>(tile::kRoleRegistersAttr); regs && regs.size() == 2) {
    shape.producerRegs = regs[0];
    shape.consumerRegs = regs[1];
  }
  return shape;
}

void addApplySchedule(mlir::OpPassManager &funcPm, std::string_view name, const Request &request) {
  funcPm.addPass(tile::createTileVerifyProgram());
  funcPm.addPass(mlir::createCanonicalizerPass());
  tile::TileApplyScheduleOptions apply;
  apply.scheduleName = std::string(name);
  for (const auto &[knob, value] : request.knobs)
    apply.knobs.push_back(knob + "=" + std::to_string(value));
  apply.shapeClass = request.shapeClass;
  funcPm.addPass(tile::createTileApplySchedule(apply));
}

} // namespace flashtile::schedule
