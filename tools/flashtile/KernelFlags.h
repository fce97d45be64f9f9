//===- KernelFlags.h - flags that choose a kernel (compile, emit, aot) ----===//
#ifndef FLASHTILE_TOOLS_KERNELFLAGS_H
#define FLASHTILE_TOOLS_KERNELFLAGS_H

#include "Cli.h"

#include "jit/Jit.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flashtile::cli {

/// The schedule and the knobs given on the command line (by name; the others take the schedule's defaults).
struct ScheduleFlags {
  std::string schedule = "fa2";
  std::string arch = "sm_90a";
  std::map<std::string, int64_t> knobs;
  bool debug = false;
};

/// --schedule, --arch and one flag per knob of the registered schedules (their names and ranges from the schedule
/// registry; a knob several schedules take accepts the union of their ranges, and the chosen schedule checks its
/// own: a knob it does not take is an error naming the ones it does).
void addScheduleFlags(CLI::App &command, ScheduleFlags &flags);
/// --debug: MLIR's op dump on errors.
void addDebugFlag(CLI::App &command, bool &debug);

/// A compile error, with a hint where it is about a default the user did not choose (--warps 3 with the default
/// --block-m 128).
Status explainDefaults(const Status &error, const ScheduleFlags &flags);

/// Compile options from the schedule flags (dtype, head dims and shape class are the caller's).
jit::CompileOptions compileOptions(const ScheduleFlags &flags);

/// The kernel a command line asks for, checked before anything is compiled: --arch names a target, the knobs are
/// the schedule's and in range, and together with the schedule's defaults they configure `variant`'s program
/// (--block-m a multiple of --warps, ...). The error is one line naming the flag or knob and what it accepts, for
/// failUsage: a command line the compiler would refuse is a command line not understood.
Status checkKernelFlags(const Variant &variant, const jit::CompileOptions &options, const ScheduleFlags &flags);

/// Names of the built-in variants, the element types and the schedules, as the flags accept them.
std::vector<std::string> variantNames();
std::vector<std::string> dtypeNames();
std::vector<std::string> shapeClassNames();
std::vector<std::string> stageNames();

/// A supported (head_dim, head_dim_v), or an error with the runtime's list (kSupportedHeadDims and pairs).
Status checkHeadDims(int headDim, int headDimV, const std::string &flag);
/// One `--head-dims` item: "D" or "D:DV".
StatusOr<std::pair<int, int>> parseHeadDimItem(const std::string &item);

} // namespace flashtile::cli

#endif // FLASHTILE_TOOLS_KERNELFLAGS_H
