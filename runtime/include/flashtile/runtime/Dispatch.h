// Dispatch.h — which schedule a call that names none runs: the rules the schedules record, as data.
//
// Each schedule says, per arch, which calls run its kernels by default and whose kernels its own replace
// (Schedule::dispatchRule in passes/Transforms/ScheduleRegistry.h). The compiler writes that rule into every
// kernel's manifest (KernelInfo::defaultFor, preferredOver) and the JIT hands the rules of every registered schedule
// to the runtime (jit::Jit::install); the runtime orders them here and never names a schedule itself.
#ifndef FLASHTILE_RUNTIME_DISPATCH_H
#define FLASHTILE_RUNTIME_DISPATCH_H

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

/// The calls naming no schedule that run a schedule's kernels by default.
enum class DefaultCalls {
  None,   ///< only calls that name the schedule (a teaching schedule, one not proven on the arch)
  All,    ///< every call
  Decode, ///< decode-sized calls (Runtime::isDecodeCall): what the schedule was made for, so it comes first there
};

/// The spelling in manifests (KernelInfo::defaultFor): "" (None), "all", "decode-sized".
std::string_view defaultCallsName(DefaultCalls calls);
/// The inverse of defaultCallsName; nullopt for other text.
std::optional<DefaultCalls> parseDefaultCalls(std::string_view name);

/// One schedule's dispatch rule on one arch.
struct DispatchRule {
  std::string schedule;
  std::string arch; // one of kSupportedArchs
  DefaultCalls calls = DefaultCalls::None;
  /// The schedules whose kernels this one's replace where both have one for a call (measured faster).
  std::vector<std::string> preferredOver;
};

/// The schedules a call that names none tries on `arch`, best first: the schedules whose rule for `arch` serves the
/// call (every rule for all calls; rules for decode-sized calls only when `decodeSized`), those for decode-sized
/// calls first, then each schedule before every one it is preferred over (directly or through others), then by
/// name. Rules of one (schedule, arch) seen twice count once (the first).
std::vector<std::string> defaultSchedules(const std::vector<DispatchRule> &rules, std::string_view arch,
                                          bool decodeSized);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_DISPATCH_H
