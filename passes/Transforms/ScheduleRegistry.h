//===- ScheduleRegistry.h - schedules as plug-ins -------------------------===//
//
// A schedule decides who computes which tile, when and through which buffers; the program (what is computed)
// and the target (which instructions) are the other two axes. Each schedule lives in its own folder,
// `schedules/<name>/`, and registers a Schedule here (schedules/Registry.cpp holds one line per schedule). The
// generic passes (tile-apply-schedule, tile-split-boundary, tile-lower-to-target), the JIT and the tools look
// schedules up by name and never include a schedule's headers.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_SCHEDULEREGISTRY_H
#define FLASHTILE_PASSES_TRANSFORMS_SCHEDULEREGISTRY_H

#include "flashtile/runtime/Dispatch.h"
#include "flashtile/runtime/KernelInfo.h"
#include "passes/IR/TileDialect.h"
#include "passes/Target/TargetFamily.h"

#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile::schedule {

/// A named integer knob of a schedule: a tile size, a stage count, a policy. `name` is the CLI flag without
/// dashes and the item name of tile-apply-schedule's `options` ("block-m").
struct OptionSpec {
  std::string name;
  std::string help;
  int64_t min = 0, max = 0; ///< the accepted range (the schedule may check combinations further)
  /// A knob that names one of a few policies: value i is values[i] (min 0, max values.size() - 1); the CLI and
  /// tile-apply-schedule accept the word as well as the number. Empty for numeric knobs.
  std::vector<std::string> values = {};
};
/// The knob value `text` names for `spec`: one of its words, or an integer; nullopt otherwise (the range is
/// checkKnobs').
std::optional<int64_t> knobValue(const OptionSpec &spec, std::string_view text);

/// The knobs a caller set, by name; the others take the schedule's defaults for the program.
using Knobs = std::map<std::string, int64_t>;

/// The knob of schedules whose kernels can read KV caches (the decode schedule): 1 compiles the cache code in, 0
/// (the default) leaves it out. The JIT sets it from KernelSpec::kvCache; `flashtile aot` builds both kernels
/// unless it is given.
inline constexpr const char *kKvCacheKnob = "kv-cache";

/// What a caller asks for: a schedule by name, the GPU it compiles for, the shape class and the knobs.
struct Request {
  std::string schedule = "fa2";
  std::string arch = "sm_80";
  std::string shapeClass = "default"; ///< one of the runtime's kShapeClasses (KernelInfo.h)
  Knobs knobs;
  /// The module kind being compiled (moduleKinds(): "forward", "backward"); a schedule builds the pipeline of the
  /// kinds it schedules (Schedule::schedulesKind).
  std::string kind = "forward";
};

class Schedule {
public:
  virtual ~Schedule() = default;
  /// The name callers ask for ("fa2"); it is also `#tile.schedule`'s name and part of kernel names.
  virtual std::string_view name() const = 0;
  /// One line for `--help` and error messages.
  virtual std::string_view summary() const = 0;
  /// Every knob the schedule accepts.
  virtual const std::vector<OptionSpec> &options() const = 0;

  /// tile-apply-schedule: the configuration of `func` for `shapeClass` — the schedule's defaults for the
  /// program (head dims, traits), overridden by `knobs`, validated (a diagnostic on `func` naming the knob and
  /// the accepted values otherwise). A class tiled like the default class comes back as the default class.
  virtual mlir::FailureOr<tile::ScheduleAttr> configure(tile::FuncOp func, const Knobs &knobs,
                                                        tile::ShapeClass shapeClass) const = 0;
  /// tile-split-boundary: whether K/V tiles are walked from the last to the first.
  virtual bool walkDescending() const = 0;
  /// tile-lower-to-target: the instruction family (a registered target, passes/Target/TargetFamily.h) that lowers
  /// this schedule on `arch` (a canonical arch name), or empty when it has none there.
  virtual std::string targetFamilyFor(std::string_view arch) const = 0;
  /// The passes that take an unscheduled program to target-lowered IR, ending with tile-lower-to-target, for a
  /// module of `request.kind` (one the schedule schedules).
  virtual void buildPipeline(mlir::OpPassManager &pm, const Request &request) const = 0;
  /// Whether the schedule compiles modules of `kind` (every schedule compiles forward modules).
  virtual bool schedulesKind(std::string_view kind) const { return kind == "forward"; }
  /// Why the schedule builds no kernel for programs of `dtype` ("bf16", "f16", "e4m3"), or nothing when it does. The
  /// default builds the 16-bit types and refuses e4m3 by name: no 8-bit MMA path (refusesWithoutFp8Path).
  virtual std::optional<std::string> refusesDtype(std::string_view dtype) const;
  /// Whether the schedule builds kernels whose K and V are of `kvDtype` while Q is of the program's dtype
  /// (tile.kv_dtype, passes/IR/TileKvDtype.h: "e4m3"). The default: no, K and V are of the program's dtype.
  virtual bool readsKvDtype(std::string_view /*kvDtype*/) const { return false; }
  /// Why the schedule builds no kernel of that kv dtype (naming it and the registered schedules that read it), or
  /// nothing when it does (readsKvDtype).
  std::optional<std::string> refusesKvDtype(std::string_view kvDtype) const;
  /// The dispatch rule of this schedule on `arch` (flashtile/runtime/Dispatch.h): which calls that name no schedule
  /// run its kernels, and whose kernels its own replace where both have one for a call. Only `calls` and
  /// `preferredOver` are read (dispatchRuleOf fills in the names). The default: none, run only when named.
  virtual DispatchRule dispatchRule(std::string_view arch) const {
    (void)arch;
    return {};
  }
  /// Honesty as data: when this schedule's kernels have never run on a GPU of `arch`, the proven schedule the runtime
  /// checks them against before their first use (their manifests' neverRunOnArch and checkAgainst,
  /// runtime/lib/SelfCheck.h); empty when they have (the default). A schedule clears it once its kernels have run
  /// on that hardware and the run is recorded.
  virtual std::string checkAgainstOn(std::string_view arch) const {
    (void)arch;
    return {};
  }
};

/// The default refusal of Schedule::refusesDtype: the 16-bit types are built, any other dtype (e4m3) is refused
/// naming the schedule, the dtype and the accepted ones.
std::optional<std::string> refusesWithoutFp8Path(const Schedule &schedule, std::string_view dtype);

/// Registers `schedule` under its name; a second schedule with the same name replaces nothing and is an
/// internal error (asserted).
void registerSchedule(std::unique_ptr<Schedule> schedule);
/// Takes the schedule named `name` out of the registry (null when none is registered), so that a test can check
/// that the others stand without it, and give it back with registerSchedule. No compile may be running, and no
/// caller may keep a pointer lookupSchedule returned for it.
std::unique_ptr<Schedule> unregisterSchedule(std::string_view name);
/// The schedule named `name`, or null.
const Schedule *lookupSchedule(std::string_view name);
/// Registered names, sorted.
std::vector<std::string> scheduleNames();
/// "unknown schedule 'x'; available: decode, fa1, fa2, fa3" (with the nearest name when one is close).
std::string unknownScheduleMessage(std::string_view name);

/// `schedule`'s dispatch rule on `arch` with its names filled in; none where the schedule has no lowering for
/// `arch` (targetFamilyFor is empty).
DispatchRule dispatchRuleOf(const Schedule &schedule, std::string_view arch);
/// The dispatch rules of every registered schedule on every supported arch (kSupportedArchs): what the JIT hands to
/// the runtime (jit::Jit::install), so that calls naming no schedule run the fastest one with a kernel.
std::vector<DispatchRule> dispatchRules();
/// Writes the dispatch rule of `info`'s schedule on `info`'s arch into its manifest fields (defaultFor,
/// preferredOver), and whether the schedule never ran there (neverRunOnArch, checkAgainst: Schedule::checkAgainstOn),
/// for runtimes that load the kernel without the compiler. A schedule not registered: none.
void recordDispatchRule(KernelInfo &info);
/// The same for `schedule`, registered or not.
void recordDispatchRule(KernelInfo &info, const Schedule &schedule);

/// Parses `name=value` items (the pass option, the CLI) into knobs of `schedule`, checking names and ranges;
/// the error names the item and the accepted names or values.
mlir::FailureOr<Knobs> parseKnobs(const Schedule &schedule, const std::vector<std::string> &items, std::string &error);
/// Checks knob names and ranges against `schedule`'s options.
std::string checkKnobs(const Schedule &schedule, const Knobs &knobs);
/// Whether `schedule` has the kKvCacheKnob option (its kernels can read KV caches).
bool hasKvCacheKnob(const Schedule &schedule);
/// Overrides `field` (a config's default) with the knob `name` when `knobs` sets it; the registry checked the
/// option's bounds (an int fits).
inline void applyKnob(const Knobs &knobs, const char *name, int &field) {
  if (auto it = knobs.find(name); it != knobs.end())
    field = static_cast<int>(it->second);
}
/// `items` form of `knobs` for tile-apply-schedule's `options`, e.g. "block-m=64,warps=4".
std::string printKnobs(const Knobs &knobs);

/// Adds `request`'s schedule's pipeline to `pm`; an unknown schedule or bad knobs come back in `error`.
mlir::LogicalResult buildPipeline(mlir::OpPassManager &pm, const Request &request, std::string &error);

/// The tile shape of a scheduled program (its `#tile.schedule` and head dims), as targets see it. The attribute's
/// verifier bounds every number, so the narrowing to int is exact.
target::KernelShape kernelShapeOf(tile::FuncOp func);

/// The passes every schedule's pipeline starts with, on a tile.func pass manager: verify the program, canonicalize,
/// and apply the schedule named `name` with the request's knobs and shape class (tile-apply-schedule).
void addApplySchedule(mlir::OpPassManager &funcPm, std::string_view name, const Request &request);

} // namespace flashtile::schedule

#endif // FLASHTILE_PASSES_TRANSFORMS_SCHEDULEREGISTRY_H
