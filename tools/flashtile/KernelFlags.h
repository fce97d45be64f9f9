//===- KernelFlags.h - flags that choose a kernel (compile, emit, aot) ----===//
#ifndef FLASHTILE_TOOLS_KERNELFLAGS_H
#define FLASHTILE_TOOLS_KERNELFLAGS_H

#include "Cli.h"

#include "jit/Jit.h"

#include <string>
#include <vector>

namespace flashtile::cli {

/// The schedule's knobs as typed; 0 (tiles) or -1 (the others) means "the schedule's default".
struct ScheduleFlags {
  std::string schedule = "fa2";
  std::string arch = "sm_90a";
  int blockM = 0, blockN = 0, warps = 0, stages = 0;
  int rescaleThreshold = -1, minBlocksPerSm = -1, lptGroupBlocks = -1;
  bool debug = false;
};

/// --schedule, --arch and the FA2 knobs, with the CLI's range checks (the schedule refines them, e.g. block-m a
/// multiple of 16 x warps).
void addScheduleFlags(CLI::App &command, ScheduleFlags &flags);
/// --debug: MLIR's op dump on errors.
void addDebugFlag(CLI::App &command, bool &debug);

/// A compile error, with a hint where it is about a default the user did not choose (--warps 3 with the default
/// --block-m 128).
Status explainDefaults(const Status &error, const ScheduleFlags &flags);

/// Compile options from the schedule flags (dtype, head dims and shape class are the caller's).
jit::CompileOptions compileOptions(const ScheduleFlags &flags);

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
