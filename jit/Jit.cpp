//===- Jit.cpp - DSL program → schedule passes → CUDA → NVRTC -------------===//
#include "jit/Jit.h"

#include "codegen/Registry.h"
#include "codegen/common/CudaEmitter.h"
#include "examples/variants/Variants.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/Version.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileDialect.h"
#include "passes/Transforms/Passes.h"
#include "schedules/Registry.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>

namespace flashtile::jit {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string print(mlir::Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

} // namespace

StatusOr<Stage> parseStage(const std::string &name) {
  if (name == "tile")
    return Stage::Tile;
  if (name == "scheduled")
    return Stage::Scheduled;
  if (name == "cuda")
    return Stage::Cuda;
  if (name == "ptx")
    return Stage::Ptx;
  if (name == "cubin")
    return Stage::Cubin;
  return Status::error("--emit: unknown stage '" + name + "'; accepted: tile, scheduled, cuda, ptx, cubin");
}

StatusOr<ElementType> parseElementType(const std::string &name) {
  if (name == "bf16")
    return ElementType::BF16;
  if (name == "f16" || name == "fp16")
    return ElementType::F16;
  if (name == "e4m3" || name == "float8_e4m3fn")
    return ElementType::E4M3;
  if (name == "e5m2" || name == "float8_e5m2")
    return Status::error("dtype: '" + name + "' (float8_e5m2) is not supported: FP8 attention takes e4m3, as flash-attn "
                         "3; accepted: bf16, f16, e4m3");
  return Status::error("dtype: unknown '" + name + "'; accepted: bf16, f16, e4m3");
}

StatusOr<RotaryMode> parseRotaryMode(const std::string &name) {
  if (name.empty() || name == "none")
    return RotaryMode::None;
  if (name == kRotaryHalves)
    return RotaryMode::Halves;
  if (name == kRotaryInterleaved)
    return RotaryMode::Interleaved;
  return Status::error("rotary: unknown '" + name + "'; accepted: none, " + std::string(kRotaryHalves) + ", " +
                       std::string(kRotaryInterleaved));
}

StatusOr<std::optional<ElementType>> parseKvDtype(const std::string &name, ElementType dtype) {
  if (name.empty() || name == elementTypeName(dtype))
    return std::optional<ElementType>();
  if (name == "e4m3" || name == "float8_e4m3fn") {
    if (dtype == ElementType::E4M3)
      return std::optional<ElementType>();
    return std::optional<ElementType>(ElementType::E4M3);
  }
  return Status::error("kv dtype: '" + name + "' is not supported; accepted: " + elementTypeName(dtype) +
                       " (the dtype: K and V of Q's type) or e4m3 (an e4m3 KV cache, with a bf16 or f16 dtype)");
}

void registerBuiltins() {
  schedule::registerBuiltinSchedules();
  codegen::registerBuiltinTargets();
}

namespace {

/// Whether `options` set the schedule's KV-cache option to 1 (a schedule that has one).
bool asksKvCache(const schedule::Schedule &schedule, const CompileOptions &options) {
  auto knob = options.schedule.knobs.find(schedule::kKvCacheKnob);
  return schedule::hasKvCacheKnob(schedule) && knob != options.schedule.knobs.end() && knob->second == 1;
}

/// compile's checks of the options against each other and the schedule, before any IR is built.
Status checkOptions(const schedule::Schedule &schedule, const CompileOptions &options) {
  if (std::string error = schedule::checkKnobs(schedule, options.schedule.knobs); !error.empty())
    return Status::error(error);
  if (options.kvDtype && *options.kvDtype != options.dtype && !asksKvCache(schedule, options))
    return Status::error(std::string("kv dtype ") + elementTypeName(*options.kvDtype) +
                         " is a KV cache's: only KV-cache kernels read it (those of a schedule with the " +
                         std::string(schedule::kKvCacheKnob) + " option set to 1)");
  if (options.rotary != RotaryMode::None && !asksKvCache(schedule, options))
    return Status::error("rotary embedding comes with the keys a KV-cache call appends: only KV-cache kernels "
                         "rotate (those of a schedule with the " +
                         std::string(schedule::kKvCacheKnob) + " option set to 1)");
  std::vector<std::string> kinds = moduleKinds();
  if (std::find(kinds.begin(), kinds.end(), options.kind) == kinds.end())
    return Status::error("kind: unknown '" + options.kind + "'; accepted: " + tile::joinNames(kinds));
  if (options.kind != kForwardKind && options.rotary != RotaryMode::None)
    return Status::error("rotary embedding belongs to forward KV-cache kernels; a " + options.kind +
                         " module has none");
  if (options.positionOffsets && options.dtype == ElementType::E4M3)
    return Status::error("position offsets: e4m3 kernels do not take position offsets (their V transpose prepass "
                         "places no blocks); a block of a split sequence runs a bf16 or f16 module");
  if (options.positionOffsets) {
    auto knob = options.schedule.knobs.find(schedule::kKvCacheKnob);
    if (knob != options.schedule.knobs.end() && knob->second != 0)
      return Status::error("position offsets: KV-cache kernels (" + options.schedule.schedule + " with the " +
                           std::string(schedule::kKvCacheKnob) + " option set to 1) do not take position offsets; "
                           "a block of a split sequence runs a plain forward or backward module");
  }
  return Status();
}

/// The diagnostics of one compile's MLIR context, gathered as text for the error of the step that failed.
class Diagnostics {
public:
  Diagnostics(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &d) {
          llvm::raw_string_ostream os(text);
          os << d.getLocation() << ": " << d << "\n";
          for (const mlir::Diagnostic &note : d.getNotes())
            os << "  note: " << note << "\n";
          return mlir::success();
        }) {}
  Status failed(const std::string &what) const { return Status::error(what + ":\n" + text); }

private:
  std::string text;
  mlir::ScopedDiagnosticHandler handler;
};

/// The schedule's pipeline over `module` (options.printIrAfterAll prints the IR after every pass); the scheduled IR
/// and its shape class into `result`.
Status runSchedule(mlir::MLIRContext &context, mlir::ModuleOp module, const schedule::Schedule &schedule,
                   const CompileOptions &options, const Variant &variant, const Diagnostics &diagnostics,
                   CompileResult &result) {
  if (!schedule.schedulesKind(options.kind))
    return Status::error("schedule '" + options.schedule.schedule + "' does not schedule " + options.kind +
                         " programs (--emit tile prints them)");
  mlir::PassManager pm(&context);
  if (options.printIrAfterAll) {
    context.disableMultithreading();
    pm.enableIRPrinting(/*shouldPrintBeforePass=*/[](mlir::Pass *, mlir::Operation *) { return false; },
                        /*shouldPrintAfterPass=*/[](mlir::Pass *, mlir::Operation *) { return true; },
                        /*printModuleScope=*/false, /*printAfterOnlyOnChange=*/false);
  }
  schedule::Request request = options.schedule;
  request.kind = options.kind;
  schedule.buildPipeline(pm, request);
  if (mlir::failed(pm.run(module)))
    return diagnostics.failed("the " + options.schedule.schedule + " schedule failed on variant '" + variant.name() +
                              "'");
  result.scheduledIr = print(module);
  for (tile::FuncOp func : module.getOps<tile::FuncOp>())
    if (tile::ScheduleAttr attr = func.getScheduleAttr())
      result.shapeClass = tile::stringifyShapeClass(attr.getShapeClass()).str();
  return Status();
}

/// The CUDA of the scheduled `module` and its KernelInfo (the variant's id, its parameter rules, the positions flag)
/// into `result`.
Status emitKernel(mlir::ModuleOp module, const Variant &variant, const std::string &variantId,
                  const CompileOptions &options, const Diagnostics &diagnostics, CompileResult &result) {
  auto funcs = module.getOps<tile::FuncOp>();
  if (options.kind == kForwardKind && std::distance(funcs.begin(), funcs.end()) != 1)
    return Status::error("internal: expected one tile.func after scheduling");
  auto emitted = options.kind == kForwardKind ? codegen::emitCuda(*funcs.begin()) : codegen::emitBackwardCuda(module);
  if (mlir::failed(emitted))
    return diagnostics.failed("emitting CUDA failed");
  result.cuda = std::move(emitted->source);
  result.info = std::move(emitted->info);
  result.info.variant = variantId;
  result.info.positions = options.positionOffsets;
  // The variant's rules travel with the kernel, so that the runtime checks its numbers without this compiler.
  auto rules = variant.paramRules();
  if (!rules.ok())
    return rules.status();
  result.info.paramRules = std::move(*rules);
  return Status();
}

/// NVRTC over result.cuda: PTX (upTo Ptx) or a cubin, into `result`.
Status compileEmitted(CompileResult &result, Stage upTo) {
  auto start = std::chrono::steady_clock::now();
  bool wantPtx = upTo == Stage::Ptx;
  auto binary = compileCuda(result.cuda, result.info.entry + ".cu", result.info.arch,
                            wantPtx ? NvrtcOutput::Ptx : NvrtcOutput::Cubin, {}, &result.nvrtcLog);
  result.nvrtcSeconds = secondsSince(start);
  if (!binary.ok())
    return binary.status().withContext("NVRTC failed on " + result.info.entry);
  (wantPtx ? result.ptx : result.cubin) = std::move(*binary);
  return Status();
}

} // namespace

StatusOr<CompileResult> compile(const Variant &variant, const CompileOptions &options, Stage upTo) {
  registerBuiltins();
  const schedule::Schedule *schedule = schedule::lookupSchedule(options.schedule.schedule);
  if (!schedule)
    return Status::error("schedule: " + schedule::unknownScheduleMessage(options.schedule.schedule));
  if (Status checked = checkOptions(*schedule, options); !checked.ok())
    return checked;
  auto id = variantId(variant);
  if (mlir::failed(id))
    return Status::error("variant '" + variant.name() + "' does not build a valid program");

  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(options.debug || options.printIrAfterAll);
  Diagnostics diagnostics(context);
  auto start = std::chrono::steady_clock::now();
  CompileResult result;
  auto module = buildProgram(
      context, variant,
      ProgramOptions{options.dtype, options.headDim, options.headDimV, options.rotary, options.kvDtype}, options.kind);
  if (mlir::failed(module))
    return diagnostics.failed("building the " + options.kind + " tile program for variant '" + variant.name() +
                              "' failed");
  if (options.positionOffsets) {
    mlir::PassManager offsets(&context);
    offsets.addNestedPass<tile::FuncOp>(tile::createTileOffsetPositions());
    if (mlir::failed(offsets.run(module->get())))
      return diagnostics.failed("placing variant '" + variant.name() + "' at position offsets failed");
  }
  result.tileIr = print(module->get());
  if (upTo == Stage::Tile)
    return result;
  if (Status scheduled = runSchedule(context, module->get(), *schedule, options, variant, diagnostics, result);
      !scheduled.ok())
    return scheduled;
  if (upTo == Stage::Scheduled) {
    result.mlirSeconds = secondsSince(start);
    return result;
  }
  if (Status emitted = emitKernel(module->get(), variant, *id, options, diagnostics, result); !emitted.ok())
    return emitted;
  result.mlirSeconds = secondsSince(start);
  if (upTo == Stage::Cuda)
    return result;
  if (Status compiled = compileEmitted(result, upTo); !compiled.ok())
    return compiled;
  return result;
}

Jit::Jit() {
  registerBuiltins();
  for (const std::string &name : variants::names())
    variants.emplace(name, *variants::byName(name));
}

StatusOr<std::string> Jit::add(const Variant &variant) {
  if (std::string error = variant.checkParams(variant.paramValues()); !error.empty())
    return Status::error(error);
  auto id = variantId(variant);
  if (mlir::failed(id))
    return Status::error("variant '" + variant.name() + "' does not build a valid program");
  std::lock_guard<std::mutex> lock(mutex);
  variants.insert_or_assign(*id, variant);
  return *id;
}

void Jit::install(Runtime &runtime) {
  runtime.setCompiler(compileFn(), shapeClassFn());
  runtime.setVariantCheck(checkFn());
  runtime.setDispatchRules(dispatchRules());
}

std::vector<DispatchRule> Jit::dispatchRules() const { return schedule::dispatchRules(); }

CompileFn Jit::compileFn() {
  return [this](const KernelSpec &spec) { return compileSpec(spec); };
}

VariantCheckFn Jit::checkFn() {
  return [this](const AttentionArgs &args) { return check(args); };
}

Status Jit::check(const AttentionArgs &args) {
  std::optional<Variant> variant;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = variants.find(args.variant);
    if (it == variants.end())
      return Status(); // not ours to judge: an ahead-of-time kernel, or an error findKernel reports
    variant = it->second;
  }
  if (std::string error = variant->checkParams(args.variantParams); !error.empty())
    return Status::error("variantParams: " + error);
  const auto &inputs = variant->inputs();
  if (args.inputs.size() != inputs.size())
    return Status::error("inputs has " + std::to_string(args.inputs.size()) + " pointers but variant '" + args.variant +
                         "' takes " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!args.inputs[i])
      return Status::error("inputs[" + std::to_string(i) + "] ('" + inputs[i].first + "') is null; variant '" +
                           args.variant + "' reads it");
  return Status();
}

Status Jit::setScheduleKnobs(const std::string &name, schedule::Knobs knobs) {
  const schedule::Schedule *schedule = schedule::lookupSchedule(name);
  if (!schedule)
    return Status::error("schedule: " + schedule::unknownScheduleMessage(name));
  if (std::string error = schedule::checkKnobs(*schedule, knobs); !error.empty())
    return Status::error(error);
  std::lock_guard<std::mutex> lock(mutex);
  knobsBySchedule[name] = std::move(knobs);
  return Status();
}

StatusOr<std::pair<Variant, CompileOptions>> Jit::optionsFor(const KernelSpec &spec) {
  // The DSL builds the programs of every module kind (buildProgram); a schedule compiles the kinds it schedules.
  if (const schedule::Schedule *named = schedule::lookupSchedule(spec.schedule);
      named && !named->schedulesKind(spec.kind))
    return Status::error("schedule '" + spec.schedule + "' has no " + spec.kind + " kernels");
  std::optional<Variant> variant;
  schedule::Knobs knobs;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = variants.find(spec.variant);
    if (it == variants.end()) {
      std::string known;
      for (const auto &[id, v] : variants)
        known += (known.empty() ? "" : ", ") + id;
      return Status::error("variant '" + spec.variant + "' is not registered with the JIT; known: " + known);
    }
    variant = it->second;
    if (auto set = knobsBySchedule.find(spec.schedule); set != knobsBySchedule.end())
      knobs = set->second;
  }
  // The spec decides whether the kernel carries the cache code (over a kKvCacheKnob set with setScheduleKnobs):
  // cache calls need it, and plain calls must not pay for it.
  const schedule::Schedule *schedule = schedule::lookupSchedule(spec.schedule);
  if (schedule && schedule::hasKvCacheKnob(*schedule))
    knobs[schedule::kKvCacheKnob] = spec.kvCache ? 1 : 0;
  else if (spec.kvCache)
    return Status::error("schedule '" + spec.schedule +
                         "' has no kernels that read a KV cache; cache calls run those of a schedule with the " +
                         std::string(schedule::kKvCacheKnob) + " option");
  auto dtype = parseElementType(spec.dtype);
  if (!dtype.ok())
    return dtype.status();
  auto rotary = parseRotaryMode(spec.rotary);
  if (!rotary.ok())
    return rotary.status();
  if (*rotary != RotaryMode::None && !spec.kvCache)
    return Status::error("rotary embedding (rotary=" + spec.rotary + ") comes with KV-cache kernels only");
  auto kvDtype = parseKvDtype(spec.kvDtype, *dtype);
  if (!kvDtype.ok())
    return kvDtype.status();
  if (*kvDtype && !spec.kvCache)
    return Status::error("kv dtype " + spec.kvDtype + " comes with KV-cache kernels only");
  CompileOptions options;
  options.kvDtype = *kvDtype;
  options.kind = spec.kind;
  options.positionOffsets = spec.positions;
  options.rotary = *rotary;
  options.dtype = *dtype;
  options.headDim = spec.headDim;
  options.headDimV = spec.headDimV;
  options.schedule = schedule::Request{spec.schedule, spec.arch, spec.shapeClass, std::move(knobs)};
  return std::pair{*variant, options};
}

ShapeClassFn Jit::shapeClassFn() {
  return [this](const KernelSpec &spec) -> StatusOr<std::string> {
    auto what = optionsFor(spec);
    if (!what.ok())
      return what.status();
    // The schedule's passes decide the class (MLIR only, no CUDA printed): #tile.schedule's shapeClass.
    auto result = compile(what->first, what->second, Stage::Scheduled);
    if (!result.ok())
      return result.status();
    return result->shapeClass;
  };
}

StatusOr<CachedKernel> Jit::compileSpec(const KernelSpec &spec) {
  auto what = optionsFor(spec);
  if (!what.ok())
    return what.status();
  auto result = compile(what->first, what->second, Stage::Cubin);
  if (!result.ok())
    return result.status();
  CachedKernel kernel;
  kernel.info = result->info;
  kernel.info.variant = spec.variant; // the runtime matches on the id it asked for
  // A class scheduled like the default class builds the default's kernel; the runtime asks shapeClassFn first
  // and then asks for the default class, so this relabeling happens only for runtimes without that hook.
  kernel.info.shapeClass = spec.shapeClass;
  kernel.cubin = std::move(result->cubin);
  return kernel;
}

} // namespace flashtile::jit
