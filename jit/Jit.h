//===- Jit.h - the compiler as a library: variant + schedule -> kernel ----===//
//
// The one place that strings the layers together: DSL program → a schedule's passes (looked up by name in the
// schedule registry) → CUDA printer (the target registry's family) → NVRTC.
// The runtime calls it only on a cache miss, through the CompileFn that `Jit::compileFn()` returns.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_JIT_JIT_H
#define FLASHTILE_JIT_JIT_H

#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/Runtime.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace flashtile::jit {

/// How far to take a compilation.
enum class Stage { Tile, Scheduled, Cuda, Ptx, Cubin };
StatusOr<Stage> parseStage(const std::string &name); // tile|scheduled|cuda|ptx|cubin

struct CompileOptions {
  ElementType dtype = ElementType::BF16;
  int headDim = 128;
  int headDimV = 128;
  RotaryMode rotary = RotaryMode::None; ///< rotary embedding of Q and the appended keys (KV-cache kernels only)
  /// K and V's element type where it is not dtype: E4M3, an e4m3 KV cache (KV-cache kernels of a bf16 or f16 dtype
  /// only; ProgramOptions::kvDtype). Unset: K and V of dtype.
  std::optional<ElementType> kvDtype;
  schedule::Request schedule;   ///< the schedule by name, the arch, the shape class and the knobs set
  /// The module kind to build (moduleKinds(): forward, backward; KernelSpec::kind): the backward is the three
  /// programs of buildProgram, every one from the variant's hooks.
  std::string kind = "forward";
  /// The module computes a block of a larger problem (KernelSpec::positions): its kernels take FlashtilePositions
  /// (runtime/PositionsAbi.h) and the variant's hooks see global positions (tile-offset-positions). Off: the CUDA
  /// of every kernel is what it was without the option.
  bool positionOffsets = false;
  bool printIrAfterAll = false; ///< print the IR after every pass to stderr
  bool debug = false;           ///< errors carry the operation they are about (MLIR's op dump); also printIrAfterAll
};

struct CompileResult {
  std::string tileIr;      ///< the program as built from the DSL
  std::string scheduledIr; ///< after the schedule's passes
  std::string shapeClass;  ///< the class the schedule tiled the program for (a class tiled like "default" is that)
  std::string cuda;        ///< generated CUDA C++
  std::string ptx, cubin;  ///< NVRTC output (whichever was asked for)
  std::string nvrtcLog;    ///< NVRTC's log of the compile (ptxas's advisories; see reportsSerializedWgmma)
  KernelInfo info;         ///< launch metadata; info.variant is the variant id
  double mlirSeconds = 0, nvrtcSeconds = 0;
};

/// Registers the built-in schedules and targets (once); compile() and Jit do it themselves.
void registerBuiltins();

/// Compiles `variant` up to `upTo`. Diagnostics from MLIR and NVRTC's log come back in the Status.
StatusOr<CompileResult> compile(const Variant &variant, const CompileOptions &options, Stage upTo);

StatusOr<ElementType> parseElementType(const std::string &name); // f16|bf16|e4m3 (e5m2: refused by name)
/// "" or "none", "halves", "interleaved" (KernelSpec::rotary).
StatusOr<RotaryMode> parseRotaryMode(const std::string &name);
/// A KV cache's element type (KernelSpec::kvDtype, the CLI's --kv-dtype): "" (or the dtype itself, `dtype`) is none
/// (K and V of dtype), "e4m3" (or "float8_e4m3fn") an e4m3 cache; others are refused naming the accepted ones.
StatusOr<std::optional<ElementType>> parseKvDtype(const std::string &name, ElementType dtype);

/// JIT-compiles registered variants for a Runtime. Built-in names ("none", "causal") resolve without
/// registration; a registered variant is asked for by the id `add` returns (name#hash of its IR).
class Jit {
public:
  Jit();
  /// Registers a variant; returns the id to put in AttentionArgs::variant.
  StatusOr<std::string> add(const Variant &variant);
  /// Makes this Jit `runtime`'s compiler: compileFn and shapeClassFn (setCompiler), checkFn (setVariantCheck) and
  /// the schedules' dispatch rules (setDispatchRules), so that calls naming no schedule run the fastest one with a
  /// kernel. This Jit must outlive the runtime.
  void install(Runtime &runtime);
  /// The dispatch rules of every registered schedule on every arch (schedule::dispatchRules()), as data.
  std::vector<DispatchRule> dispatchRules() const;
  /// The hook to pass to Runtime::setCompiler; this Jit must outlive the runtime that holds it.
  CompileFn compileFn();
  /// The shape-class hook to pass with it: whether a spec's shape class is scheduled differently from the
  /// default class (MLIR only, no NVRTC: about a millisecond; the runtime asks once per spec).
  ShapeClassFn shapeClassFn();
  /// The hook to pass to Runtime::setVariantCheck: for a variant this Jit knows, the call's variantParams (count
  /// and the variant's validate hooks, e.g. window sizes >= -1) and inputs (count, non-null). Needs no GPU.
  VariantCheckFn checkFn();
  /// What checkFn's hook does.
  Status check(const AttentionArgs &args);
  /// Knobs (tile sizes, stages, ...) of schedule `name` for every kernel this Jit compiles with it; checked
  /// against the schedule's options.
  Status setScheduleKnobs(const std::string &name, schedule::Knobs knobs);

private:
  StatusOr<CachedKernel> compileSpec(const KernelSpec &spec);
  /// The variant and compile options for `spec`, or why there are none.
  StatusOr<std::pair<Variant, CompileOptions>> optionsFor(const KernelSpec &spec);
  std::mutex mutex;
  std::map<std::string, Variant> variants;
  std::map<std::string, schedule::Knobs> knobsBySchedule;
};

} // namespace flashtile::jit

#endif // FLASHTILE_JIT_JIT_H
