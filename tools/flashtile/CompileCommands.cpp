//===- CompileCommands.cpp - compile, emit, summary (need the compiler) ---===//
#include "Commands.h"
#include "KernelFlags.h"

#include "codegen/common/TargetRegistry.h"
#include "examples/variants/Variants.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/FileIo.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Version.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>

namespace flashtile::cli {
namespace {
/// The JIT of every Runtime the CLI makes; it outlives them.
jit::Jit &cliJit() {
  static jit::Jit jit;
  return jit;
}
} // namespace

std::vector<std::string> variantNames() { return variants::names(); }
std::vector<std::string> dtypeNames() { return {kSupportedDtypes.begin(), kSupportedDtypes.end()}; }
std::vector<std::string> shapeClassNames() { return {kShapeClasses.begin(), kShapeClasses.end()}; }
std::vector<std::string> stageNames() { return {"tile", "scheduled", "cuda", "ptx", "cubin"}; }

void addDebugFlag(CLI::App &command, bool &debug) {
  addSwitch(command, "--debug", debug, "On a compiler error, also print the operation it is about (MLIR's op dump)");
}

void addScheduleFlags(CLI::App &command, ScheduleFlags &flags) {
  jit::registerBuiltins();
  std::vector<std::string> names = schedule::scheduleNames();
  command.add_option("--schedule", flags.schedule, "The schedule: " + joinNames(names))
      ->check(oneOf("schedule", names))
      ->capture_default_str();
  command.add_option("--arch", flags.arch, "GPU target, e.g. sm_80, sm_90a, sm_100a (flashtile info lists them)")
      ->check(archName())
      ->capture_default_str();
  // One flag per knob name, in the order the schedules list them; its help says which schedules take it.
  struct Knob {
    std::string help;
    int64_t min, max;
    std::vector<std::string> values; // a policy knob's words (value i is values[i])
  };
  std::vector<std::pair<std::string, Knob>> knobs;
  for (const std::string &name : names)
    for (const schedule::OptionSpec &spec : schedule::lookupSchedule(name)->options()) {
      auto it = std::find_if(knobs.begin(), knobs.end(), [&](const auto &k) { return k.first == spec.name; });
      if (it == knobs.end()) {
        knobs.push_back({spec.name, Knob{name + ": " + spec.help, spec.min, spec.max, spec.values}});
        continue;
      }
      it->second.help += "; " + name + ": " + spec.help;
      it->second.min = std::min(it->second.min, spec.min);
      it->second.max = std::max(it->second.max, spec.max);
    }
  for (const auto &[name, knob] : knobs) {
    if (!knob.values.empty()) {
      command
          .add_option_function<std::string>(
              "--" + name,
              [&flags, name = name, values = knob.values](const std::string &word) {
                flags.knobs[name] = std::find(values.begin(), values.end(), word) - values.begin();
              },
              knob.help)
          ->check(oneOf(name, knob.values));
      continue;
    }
    command
        .add_option_function<int64_t>(
            "--" + name, [&flags, name = name](int64_t value) { flags.knobs[name] = value; }, knob.help)
        ->check(intRange(knob.min, knob.max));
  }
  addDebugFlag(command, flags.debug);
}

jit::CompileOptions compileOptions(const ScheduleFlags &flags) {
  jit::CompileOptions o;
  o.schedule.schedule = flags.schedule;
  o.schedule.arch = flags.arch;
  // The registry checks the knobs against the schedule's options.
  for (const auto &[knob, value] : flags.knobs)
    o.schedule.knobs[knob] = value;
  o.debug = flags.debug;
  return o;
}

Status checkKernelFlags(const Variant &variant, const jit::CompileOptions &options, const ScheduleFlags &flags) {
  jit::registerBuiltins();
  const schedule::Request &request = options.schedule;
  if (!target::canonicalArch(request.arch))
    return Status::error("--arch: " + target::unknownArchMessage(request.arch));
  const schedule::Schedule *schedule = schedule::lookupSchedule(request.schedule);
  if (!schedule)
    return Status::error("--schedule: " + schedule::unknownScheduleMessage(request.schedule));
  if (std::string error = schedule::checkKnobs(*schedule, request.knobs); !error.empty())
    return Status::error(error);
  std::optional<tile::ShapeClass> shapeClass = tile::symbolizeShapeClass(request.shapeClass);
  if (!shapeClass)
    return Status::error(unknownName("shape class", request.shapeClass, shapeClassNames()));
  // The schedule's own check of its configuration: the one tile-apply-schedule makes, on the same program.
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  context.printOpOnDiagnostic(false);
  std::string first;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    if (first.empty())
      first = d.str();
    return mlir::success();
  });
  if (!schedule->schedulesKind(options.kind))
    return Status(); // compiling names the kinds the schedule has
  // The programs of the module kind asked for (a backward module's three share its configuration).
  auto module = buildProgram(
      context, variant,
      ProgramOptions{options.dtype, options.headDim, options.headDimV, options.rotary, options.kvDtype}, options.kind);
  if (mlir::failed(module))
    return Status(); // not the command line's doing: compiling reports it in full
  for (tile::FuncOp func : module->get().getOps<tile::FuncOp>()) {
    if (mlir::succeeded(schedule->configure(func, request.knobs, *shapeClass)))
      continue;
    // "'tile.func' op fa2: block-m = 17 is not supported; ...": the op is no flag's concern.
    std::string_view message = first;
    if (size_t op = message.find("' op "); message.starts_with("'") && op != std::string_view::npos)
      message.remove_prefix(op + 5);
    return explainDefaults(Status::error(std::string(message.substr(0, message.find('\n')))), flags);
  }
  return Status();
}

Status explainDefaults(const Status &error, const ScheduleFlags &flags) {
  if (error.ok() || flags.knobs.count("block-m") || error.message().find("block-m = ") == std::string::npos)
    return error;
  std::string message = error.message();
  while (!message.empty() && message.back() == '\n')
    message.pop_back();
  return Status::error(message + " (--block-m was not given: that is the schedule's default for this kernel; "
                                 "give --block-m with --warps)");
}

Status checkHeadDims(int headDim, int headDimV, const std::string &flag) {
  if (supportsHeadDims(headDim, headDimV))
    return Status();
  std::string asked = headDim == headDimV ? std::to_string(headDim) : fmt::format("{}:{}", headDim, headDimV);
  std::vector<std::string> accepted;
  for (int d : kSupportedHeadDims)
    accepted.push_back(std::to_string(d));
  for (auto [d, dv] : kSupportedHeadDimPairs)
    accepted.push_back(fmt::format("{}:{}", d, dv));
  return Status::error(fmt::format("{}: head dims {} have no kernels in the runtime; accepted: {} (D:DV is head_dim:"
                                   "head_dim_v)",
                                   flag, asked, joinNames(accepted)));
}

StatusOr<std::pair<int, int>> parseHeadDimItem(const std::string &item) {
  size_t colon = item.find(':');
  StatusOr<int64_t> headDim = parseInteger(item.substr(0, colon), 1, 1024);
  StatusOr<int64_t> headDimV = colon == std::string::npos ? headDim : parseInteger(item.substr(colon + 1), 1, 1024);
  if (!headDim.ok() || !headDimV.ok())
    return Status::error("--head-dims: '" + excerpt(item) + "' is not D or D:DV (head_dim:head_dim_v), e.g. 128 or 192:128");
  if (Status s = checkHeadDims(int(*headDim), int(*headDimV), "--head-dims"); !s.ok())
    return s;
  return std::pair{int(*headDim), int(*headDimV)};
}

namespace {

struct CompileFlags {
  ScheduleFlags schedule;
  std::string variant = "none", dtype = "bf16", shapeClass = std::string(kDefaultShapeClass), emit, output;
  std::string rotary = "none"; // rotary embedding of Q and the appended keys (KV-cache kernels)
  std::string kvDtype;         // the KV cache's element type (KV-cache kernels): empty = --dtype's
  std::string kind = std::string(kForwardKind); // the module kind: forward or backward
  int headDim = 128, headDimV = 0;
  bool printIrAfterAll = false;
  bool positionOffsets = false;
};

/// Writes `text` to stdout, reporting a failed write (a closed pipe, a full disk).
Status writeStdout(const std::string &text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    return Status::error("cannot write to standard output");
  return Status();
}

int runCompile(const CompileFlags &flags, bool emitDefaultsToCuda) {
  int headDimV = flags.headDimV ? flags.headDimV : flags.headDim;
  if (Status s = checkHeadDims(flags.headDim, headDimV, "--head-dim/--head-dim-v"); !s.ok())
    return fail(s);
  // Without -o the kernel is printed: CUDA unless a stage is asked for; with -o FILE, a cubin.
  const bool toStdout = flags.output.empty() || flags.output == "-";
  std::string emit = flags.emit.empty() ? (emitDefaultsToCuda || toStdout ? "cuda" : "cubin") : flags.emit;
  if (emit == "cubin" && flags.output.empty())
    return fail("--emit cubin writes a binary file: give -o FILE (or -o - for standard output)");
  StatusOr<jit::Stage> stage = jit::parseStage(emit);
  if (!stage.ok())
    return fail(stage.status());
  std::optional<Variant> variant = variants::byName(flags.variant);
  if (!variant)
    return fail(unknownName("variant", flags.variant, variantNames()));
  StatusOr<ElementType> dtype = jit::parseElementType(flags.dtype);
  if (!dtype.ok())
    return fail(dtype.status());

  jit::CompileOptions options = compileOptions(flags.schedule);
  options.dtype = *dtype;
  options.headDim = flags.headDim;
  options.headDimV = headDimV;
  options.schedule.shapeClass = flags.shapeClass;
  options.printIrAfterAll = flags.printIrAfterAll;
  options.positionOffsets = flags.positionOffsets;
  options.kind = flags.kind;
  StatusOr<RotaryMode> rotary = jit::parseRotaryMode(flags.rotary);
  if (!rotary.ok())
    return fail(rotary.status());
  options.rotary = *rotary;
  StatusOr<std::optional<ElementType>> kvDtype = jit::parseKvDtype(flags.kvDtype, *dtype);
  if (!kvDtype.ok())
    return failUsage(kvDtype.status().withContext("--kv-dtype"));
  options.kvDtype = *kvDtype;
  // Shape classes tile the forward's Q walk; a backward module is one kernel for every class (the runtime asks for
  // the default's), so a class named here would print that kernel unchanged.
  if (flags.kind != kForwardKind && flags.shapeClass != kDefaultShapeClass)
    return failUsage(Status::error(fmt::format("--shape-class {}: a {} module has one kernel for every shape class; "
                                               "accepted: {} (or --kind {})",
                                               flags.shapeClass, flags.kind, kDefaultShapeClass, kForwardKind)));
  if (Status s = checkKernelFlags(*variant, options, flags.schedule); !s.ok())
    return failUsage(s);
  StatusOr<jit::CompileResult> result = jit::compile(*variant, options, *stage);
  if (!result.ok())
    return fail(explainDefaults(result.status(), flags.schedule));
  const std::string *text = nullptr;
  switch (*stage) {
  case jit::Stage::Tile:
    text = &result->tileIr;
    break;
  case jit::Stage::Scheduled:
    text = &result->scheduledIr;
    break;
  case jit::Stage::Cuda:
    text = &result->cuda;
    break;
  case jit::Stage::Ptx:
    text = &result->ptx;
    break;
  case jit::Stage::Cubin:
    text = &result->cubin;
    break;
  }
  Status written = toStdout ? writeStdout(*text) : writeOutputFile(flags.output, *text);
  return written.ok() ? 0 : fail(written);
}

void registerCompile(CLI::App &app, Registry &registry, const std::string &name, bool emitDefaultsToCuda) {
  auto flags = std::make_shared<CompileFlags>();
  CLI::App *command = addCommand(app, name,
                                 emitDefaultsToCuda ? "Print a kernel's generated CUDA (compile --emit cuda)"
                                                    : "Compile one kernel to IR, CUDA, PTX or a cubin (no GPU needed)");
  command->add_option("--variant", flags->variant, "Built-in variant: " + joinNames(variantNames()))
      ->check(oneOf("variant", variantNames()))
      ->capture_default_str();
  command->add_option("--dtype", flags->dtype, "Element type of Q, K and V (O is bf16 for e4m3)")
      ->check(oneOf("dtype", dtypeNames()))
      ->capture_default_str();
  command->add_option("--head-dim", flags->headDim, "Head dim of Q and K: 32, 64, 96, 128, 192, 256")
      ->check(intRange(1, 1024))
      ->capture_default_str();
  command->add_option("--head-dim-v", flags->headDimV, "Head dim of V and O (default: --head-dim; 128 with 192)")
      ->check(intRange(1, 1024));
  command->add_option("--shape-class", flags->shapeClass, "Tile for this shape class (short: <= 1024 rows)")
      ->check(oneOf("shape class", shapeClassNames()))
      ->capture_default_str();
  command
      ->add_option("--emit", flags->emit,
                   emitDefaultsToCuda ? "Stage to print (default cuda)"
                                      : "Stage to write (default: cubin with -o FILE, else cuda)")
      ->check(oneOf("stage", stageNames()));
  command->add_option("-o,--output", flags->output, "Output file (written through links and devices; - = stdout)")
      ->check(nonEmpty());
  command
      ->add_option("--rotary", flags->rotary,
                   "Rotary embedding of Q and the appended keys (KV-cache kernels: --schedule decode --kv-cache 1): "
                   "none, halves (pairs i, i + rotary_dim / 2) or interleaved (pairs 2i, 2i + 1)")
      ->check(oneOf("rotary", {"none", std::string(kRotaryHalves), std::string(kRotaryInterleaved)}))
      ->capture_default_str();
  command
      ->add_option("--kv-dtype", flags->kvDtype,
                   "Element type of the KV cache (KV-cache kernels: --schedule decode --kv-cache 1): e4m3 with "
                   "--dtype bf16 or f16 (an e4m3 cache, descaled by k_descale and v_descale; default: --dtype)")
      ->check(oneOf("kv dtype", {"bf16", "f16", "e4m3"}));
  command
      ->add_option("--kind", flags->kind,
                   "Module to build: forward, or backward (its preprocess, main and postprocess programs, from the "
                   "same variant hooks)")
      ->check(oneOf("kind", moduleKinds()))
      ->capture_default_str();
  addSwitch(*command, "--print-ir-after-all", flags->printIrAfterAll, "Print the IR after every pass on stderr");
  addSwitch(*command, "--position-offsets", flags->positionOffsets,
            "Compile a block of a larger problem: the kernels take FlashtilePositions (query/key/head offsets and "
            "global sizes) and the variant's hooks see global positions");
  addScheduleFlags(*command, flags->schedule);
  registry.add(command, [flags, emitDefaultsToCuda] { return runCompile(*flags, emitDefaultsToCuda); });
}

struct SummaryFlags {
  std::string archs = "sm_80,sm_90a,sm_100a";
  std::string kinds = "forward,backward";
  std::string variants; // with --head-dims: every listed call instead of the representative set
  std::string headDims = "128";
};

/// One row of the summary: a call the runtime is asked about, on one arch, for one module kind.
struct SummaryCall {
  std::string kind, variant, arch;
  ElementType dtype = ElementType::BF16;
  int headDim = 128, headDimV = 128;
  int seqlenQ = 4096; // query rows a sequence; at most kDecodeMaxSeqlenQ: a decode-sized call
};

/// A representative set rather than the full cross product (which NVRTC takes minutes over). Forward: every variant
/// at bf16/hd 128 on sm_90a and the plain kernels at every head dim and dtype there, the plain kernels at hd 64 and
/// 128 on the other archs, and a decode-sized call on each. Backward: the plain kernels at hd 128 on each arch, and
/// on sm_90a causal at 64 and 96 too (fa3's backward serves 64 and 128 only, so 96 shows the fallback).
std::vector<SummaryCall> representativeCalls(const std::vector<std::string> &archs,
                                             const std::vector<std::string> &kinds) {
  auto has = [](const std::vector<std::string> &list, std::string_view name) {
    return std::find(list.begin(), list.end(), name) != list.end();
  };
  const std::string forward(kForwardKind), backward(kBackwardKind);
  std::vector<SummaryCall> calls;
  for (const std::string &arch : archs) {
    const bool sm90a = arch == "sm_90a";
    if (has(kinds, forward)) {
      if (sm90a) {
        for (const std::string &name : variants::names())
          calls.push_back({forward, name, arch});
        for (const char *name : {"none", "causal"})
          for (ElementType dtype : {ElementType::BF16, ElementType::F16}) {
            std::vector<std::pair<int, int>> dims;
            for (int hd : kSupportedHeadDims)
              dims.emplace_back(hd, hd);
            dims.insert(dims.end(), kSupportedHeadDimPairs.begin(), kSupportedHeadDimPairs.end());
            for (auto [hd, hdv] : dims)
              if (!(dtype == ElementType::BF16 && hd == 128 && hdv == 128))
                calls.push_back({forward, name, arch, dtype, hd, hdv});
          }
      } else {
        for (const char *name : {"none", "causal"})
          for (int hd : {64, 128})
            calls.push_back({forward, name, arch, ElementType::BF16, hd, hd});
      }
      calls.push_back({forward, "causal", arch, ElementType::BF16, 128, 128, /*seqlenQ=*/1});
    }
    if (has(kinds, backward)) {
      for (const char *name : {"none", "causal"})
        calls.push_back({backward, name, arch});
      if (sm90a)
        for (int hd : {64, 96})
          calls.push_back({backward, "causal", arch, ElementType::BF16, hd, hd});
    }
  }
  return calls;
}

/// Every listed variant at every listed head dim (bf16), on each arch, for each kind.
StatusOr<std::vector<SummaryCall>> listedCalls(const SummaryFlags &flags, const std::vector<std::string> &archs,
                                               const std::vector<std::string> &kinds) {
  StatusOr<std::vector<std::string>> names = splitList("--variants", flags.variants);
  if (!names.ok())
    return names.status();
  StatusOr<std::vector<std::string>> items = splitList("--head-dims", flags.headDims);
  if (!items.ok())
    return items.status();
  std::vector<SummaryCall> calls;
  for (const std::string &arch : archs)
    for (const std::string &kind : kinds)
      for (const std::string &name : *names)
        for (const std::string &item : *items) {
          StatusOr<std::pair<int, int>> dims = parseHeadDimItem(item);
          if (!dims.ok())
            return dims.status();
          calls.push_back({kind, name, arch, ElementType::BF16, dims->first, dims->second});
        }
  return calls;
}

/// `call` as forward() takes it: made-up device addresses (nothing runs), the variant's declared numbers and a
/// made-up address for each of its inputs.
AttentionArgs summaryArgs(const SummaryCall &call) {
  auto address = [](int slot) { return reinterpret_cast<void *>(uintptr_t(slot + 1) << 32); };
  AttentionArgs args = AttentionArgs::contiguous(
      call.dtype == ElementType::F16 ? DType::F16 : DType::BF16, address(0), address(1), address(2), address(3),
      static_cast<float *>(address(4)), /*batch=*/2, call.seqlenQ, /*seqlenK=*/4096, /*headsQ=*/16, /*headsKv=*/16,
      call.headDim, call.headDimV);
  args.variant = call.variant;
  const std::optional<Variant> variant = variants::byName(call.variant);
  for (const auto &[name, value] : variant->params())
    args.variantParams.push_back(value);
  for (size_t i = 0; i < variant->inputs().size(); ++i)
    args.inputs.push_back(address(5 + int(i)));
  return args;
}

/// What the JIT built for each spec the runtime asked it for (by the kernel's spec key), and how long it took.
struct Built {
  KernelInfo info;
  double seconds = 0;
  bool shown = false; // in a row already: later rows that run it say so instead of a time
};

/// Asks the runtime which kernel `call` runs on its arch and prints the row: what it runs and why. False when there
/// is no kernel for it.
bool printSummaryRow(Runtime &runtime, const SummaryCall &call, std::map<std::string, Built> &built) {
  const std::string hd =
      call.headDim == call.headDimV ? std::to_string(call.headDim) : fmt::format("{}:{}", call.headDim, call.headDimV);
  const std::string row = fmt::format("{:<8} {:<22} {:<5} {:>7} {:>4} {:<8}", call.kind, call.variant,
                                      elementTypeName(call.dtype), hd, call.seqlenQ, call.arch);
  StatusOr<ScheduleChoice> choice = runtime.explain(summaryArgs(call), call.arch, call.kind);
  auto compiled = choice.ok() ? built.find(choice->spec.key()) : built.end();
  if (compiled == built.end()) {
    // The first line of the error: the table stays a table.
    const std::string message = choice.ok() ? "no kernel was compiled for it" : choice.status().message();
    fmt::print("{} FAILED: {}\n", row, message.substr(0, message.find('\n')));
    std::fflush(stdout);
    return false;
  }
  const KernelInfo &i = compiled->second.info;
  const PlanLaunch &main = *i.plan.launchOf(i.entry); // the planner launches the module's entry
  fmt::print("{} {:<18} {:>7} {:>8} {}\n", row,
             fmt::format("{} ({},{},{})", i.schedule, i.blockM, i.blockN, main.threads / 32), main.smemBytes,
             compiled->second.shown ? std::string("(above)") : fmt::format("{:.0f}", compiled->second.seconds * 1e3),
             choice->reason);
  compiled->second.shown = true;
  std::fflush(stdout);
  return true;
}

/// Without a GPU: compiles what the runtime would run for each call on each arch (its dispatch rules, as a call
/// naming no schedule gets them), forward and backward, and prints which schedule and why.
int runSummary(const SummaryFlags &flags) {
  StatusOr<std::vector<std::string>> archs = splitList("--arch", flags.archs);
  if (!archs.ok())
    return fail(archs.status());
  StatusOr<std::vector<std::string>> kinds = splitList("--kinds", flags.kinds);
  if (!kinds.ok())
    return fail(kinds.status());
  StatusOr<std::vector<SummaryCall>> calls =
      flags.variants.empty() ? representativeCalls(*archs, *kinds) : listedCalls(flags, *archs, *kinds);
  if (!calls.ok())
    return fail(calls.status());

  // A memory-only cache: every kernel of the table is compiled here, now, by the JIT the runtime asks.
  Runtime runtime(KernelCache::Options{"", false});
  jit::Jit &jit = cliJit();
  jit.install(runtime);
  std::map<std::string, Built> built;
  runtime.setCompiler(
      [compile = jit.compileFn(), &built](const KernelSpec &spec) -> StatusOr<CachedKernel> {
        const auto start = std::chrono::steady_clock::now();
        StatusOr<CachedKernel> kernel = compile(spec);
        if (kernel.ok())
          built[kernel->info.spec().key()] = {kernel->info,
                                              std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                                                  .count()};
        return kernel;
      },
      jit.shapeClassFn());

  StatusOr<std::string> nvrtc = nvrtcVersion();
  fmt::print("flashtile {}, NVRTC {} — no GPU here: compiling what the runtime would run on each arch (its dispatch "
             "rules; a call naming no schedule), forward and backward, instead of running it\n\n",
             compilerVersion(), nvrtc.ok() ? *nvrtc : nvrtc.status().message());
  fmt::print("{:<8} {:<22} {:<5} {:>7} {:>4} {:<8} {:<18} {:>7} {:>8} {}\n", "kind", "variant", "dtype", "hd", "rows",
             "arch", "schedule (M,N,wp)", "smem B", "ms", "why");
  int failures = 0;
  for (const SummaryCall &call : *calls)
    failures += printSummaryRow(runtime, call, built) ? 0 : 1;
  fmt::print("\n{}\n", failures ? fmt::format("{} of {} calls have no kernel", failures, calls->size())
                                : fmt::format("{} modules compiled by NVRTC for {} calls (cubins, not run: no GPU here)",
                                              built.size(), calls->size()));
  if (std::find(archs->begin(), archs->end(), "sm_100a") != archs->end())
    fmt::print("sm_100a's kernels are compiled by NVRTC and checked by the interpreter only: no SM100 GPU has run "
               "them\n");
  return failures ? kExitFailure : 0;
}

} // namespace

void registerAotCommand(CLI::App &app, Registry &registry);

bool hasCompiler() { return true; }

bool installCompiler(Runtime &runtime) {
  cliJit().install(runtime);
  return true;
}

std::vector<std::string> knownScheduleNames() { return schedule::scheduleNames(); }

void registerCompilerCommands(CLI::App &app, Registry &registry) {
  registerCompile(app, registry, "compile", /*emitDefaultsToCuda=*/false);
  registerCompile(app, registry, "emit", /*emitDefaultsToCuda=*/true);
  registerAotCommand(app, registry);

  auto summary = std::make_shared<SummaryFlags>();
  CLI::App *command = addCommand(app, "summary",
                                 "Compile what the runtime would run for a representative set of calls (every variant, "
                                 "head dim, dtype and arch once; forward and backward) and print a table: the schedule "
                                 "of each and why; no GPU needed");
  command->add_option("--arch", summary->archs, "Comma list of targets")->check(archList())->capture_default_str();
  command->add_option("--kinds", summary->kinds, "Comma list of module kinds")
      ->check(listOf("kind", moduleKinds()))
      ->capture_default_str();
  command->add_option("--variants", summary->variants, "Comma list of built-in variants: these calls (bf16) instead "
                                                       "of the representative set")
      ->check(listOf("variant", variantNames()));
  command->add_option("--head-dims", summary->headDims, "With --variants: comma list of D or D:DV")
      ->capture_default_str();
  registry.add(command, [summary] { return runSummary(*summary); });
}

} // namespace flashtile::cli
