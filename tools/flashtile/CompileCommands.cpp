//===- CompileCommands.cpp - compile, emit, aot, summary (need the compiler) ===//
#include "Args.h"
#include "Commands.h"

#include "examples/variants/Variants.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/Version.h"
#include "jit/Jit.h"

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <tuple>

namespace flashtile::cli {

namespace {

const std::set<std::string> kKernelFlags = {
    "variant",          "schedule",   "arch",  "head-dim", "head-dim-v",        "dtype",
    "block-m",          "block-n",    "warps", "stages",   "rescale-threshold", "min-blocks-per-sm",
    "lpt-group-blocks", "shape-class"};

/// A shape class name from a flag, checked against the runtime's classes.
StatusOr<std::string> shapeClassFlag(const std::string &flag, const std::string &value) {
  for (std::string_view known : kShapeClasses)
    if (value == known)
      return value;
  std::string accepted;
  for (std::string_view known : kShapeClasses)
    accepted += (accepted.empty() ? "" : ", ") + std::string(known);
  return Status::error("--" + flag + ": unknown shape class '" + value + "'; accepted: " + accepted);
}

int fail(const Status &status) {
  std::cerr << "flashtile: error: " << status.message() << "\n";
  return 1;
}

StatusOr<Variant> variantFromName(const std::string &name) {
  if (auto v = variants::byName(name))
    return *v;
  std::string list;
  for (const auto &n : variants::names())
    list += (list.empty() ? "" : ", ") + n;
  return Status::error("--variant: unknown '" + name + "'; accepted: " + list);
}

/// Schedule knobs and the target from flags shared by compile and aot.
StatusOr<jit::CompileOptions> kernelOptions(const Args &args) {
  jit::CompileOptions o;
  auto dtype = jit::parseElementType(args.get("dtype", "bf16"));
  if (!dtype.ok())
    return dtype.status().withContext("--dtype");
  o.dtype = *dtype;
  auto hd = args.getInt("head-dim", 128);
  if (!hd.ok())
    return hd.status();
  auto hdv = args.getInt("head-dim-v", *hd);
  if (!hdv.ok())
    return hdv.status();
  o.headDim = *hd;
  o.headDimV = *hdv;
  o.schedule.schedule = args.get("schedule", "fa2");
  o.schedule.arch = args.get("arch", "sm_90a");
  if (args.has("shape-class")) {
    auto shapeClass = shapeClassFlag("shape-class", args.get("shape-class"));
    if (!shapeClass.ok())
      return shapeClass.status();
    o.schedule.shapeClass = *shapeClass;
  }
  // The schedule's knobs are flags of their own (--block-m 64): whatever the schedule lists.
  jit::registerBuiltins();
  const schedule::Schedule *schedule = schedule::lookupSchedule(o.schedule.schedule);
  if (!schedule)
    return Status::error("--schedule: " + schedule::unknownScheduleMessage(o.schedule.schedule));
  for (const schedule::OptionSpec &option : schedule->options()) {
    if (!args.has(option.name))
      continue;
    auto v = args.getInt(option.name, 0);
    if (!v.ok())
      return v.status();
    o.schedule.knobs[option.name] = *v;
  }
  if (std::string error = schedule::checkKnobs(*schedule, o.schedule.knobs); !error.empty())
    return Status::error(error);
  return o;
}

/// One item of `aot --head-dims`: "D" (head_dim = head_dim_v = D) or "D:DV" (head_dim D, head_dim_v DV).
StatusOr<std::pair<int, int>> parseHeadDims(const std::string &text) {
  auto number = [](std::string_view digits) -> std::optional<int> {
    int value = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      return std::nullopt;
    return value;
  };
  std::string_view item = text;
  size_t colon = item.find(':');
  std::optional<int> headDim = number(item.substr(0, colon));
  std::optional<int> headDimV = colon == std::string_view::npos ? headDim : number(item.substr(colon + 1));
  if (!headDim || !headDimV)
    return Status::error("--head-dims: '" + text + "' is not D or D:DV (head_dim:head_dim_v), e.g. 128 or 192:128");
  return std::pair{*headDim, *headDimV};
}

Status writeFileAtomically(const std::filesystem::path &path, const std::string &bytes) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      return Status::error("cannot write " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return Status::error("cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message());
  return Status();
}

} // namespace

bool hasCompiler() { return true; }

bool installCompiler(Runtime &runtime) {
  static jit::Jit jit; // outlives every Runtime the CLI makes
  runtime.setCompiler(jit.compileFn(), jit.shapeClassFn());
  return true;
}

int compileCommand(const std::vector<std::string> &argv, bool emitDefaultsToCuda) {
  std::set<std::string> flags = kKernelFlags;
  flags.insert({"emit", "output"});
  auto args = Args::parse(argv, flags, {"print-ir-after-all"});
  if (!args.ok())
    return fail(args.status());
  auto variant = variantFromName(args->get("variant", "none"));
  if (!variant.ok())
    return fail(variant.status());
  auto options = kernelOptions(*args);
  if (!options.ok())
    return fail(options.status());
  options->printIrAfterAll = args->has("print-ir-after-all");
  auto stage = jit::parseStage(args->get("emit", emitDefaultsToCuda ? "cuda" : "cubin"));
  if (!stage.ok())
    return fail(stage.status());
  std::string output = args->get("output", "-");
  if (*stage == jit::Stage::Cubin && output == "-")
    return fail(Status::error("--emit cubin writes a binary file: give -o FILE"));

  auto result = jit::compile(*variant, *options, *stage);
  if (!result.ok())
    return fail(result.status());
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
  if (output == "-") {
    std::cout << *text;
    return 0;
  }
  Status written = writeFileAtomically(output, *text);
  return written.ok() ? 0 : fail(written);
}

int aotCommand(const std::vector<std::string> &argv) {
  std::set<std::string> flags = {"out",
                                 "variants",
                                 "dtypes",
                                 "head-dims",
                                 "arch",
                                 "schedule",
                                 "block-m",
                                 "block-n",
                                 "warps",
                                 "stages",
                                 "rescale-threshold",
                                 "min-blocks-per-sm",
                                 "lpt-group-blocks",
                                 "shape-classes"};
  auto args = Args::parse(argv, flags, {});
  if (!args.ok())
    return fail(args.status());
  if (!args->has("out"))
    return fail(Status::error("aot: --out DIR is required"));
  std::filesystem::path out = args->get("out");
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec)
    return fail(Status::error("aot: cannot create " + out.string() + ": " + ec.message()));
  auto base = kernelOptions(*args);
  if (!base.ok())
    return fail(base.status());
  std::vector<std::string> shapeClasses;
  for (const std::string &name : args->getList("shape-classes", "default,short")) {
    auto shapeClass = shapeClassFlag("shape-classes", name);
    if (!shapeClass.ok())
      return fail(shapeClass.status());
    shapeClasses.push_back(*shapeClass);
  }
  int count = 0;
  for (const std::string &variantName : args->getList("variants", "none,causal"))
    for (const std::string &dtypeName : args->getList("dtypes", "bf16,f16"))
      for (const std::string &hdText : args->getList("head-dims", "64,128"))
        for (const std::string &shapeClass : shapeClasses) {
          auto variant = variantFromName(variantName);
          auto dtype = jit::parseElementType(dtypeName);
          if (!variant.ok())
            return fail(variant.status());
          if (!dtype.ok())
            return fail(dtype.status().withContext("--dtypes"));
          jit::CompileOptions o = *base;
          o.dtype = *dtype;
          auto headDims = parseHeadDims(hdText);
          if (!headDims.ok())
            return fail(headDims.status());
          std::tie(o.headDim, o.headDimV) = *headDims;
          o.schedule.shapeClass = shapeClass;
          // A class scheduled like the default class has no kernel of its own (the runtime falls back to the
          // default's): the schedule says so before NVRTC runs.
          auto scheduled = jit::compile(*variant, o, jit::Stage::Scheduled);
          if (!scheduled.ok())
            return fail(scheduled.status());
          if (scheduled->shapeClass != shapeClass)
            continue;
          auto result = jit::compile(*variant, o, jit::Stage::Cubin);
          if (!result.ok())
            return fail(result.status());
          KernelInfo info = result->info;
          info.variant = variantName; // built-in variants are asked for by name
          std::filesystem::path stem = out / info.entry;
          Status s = writeFileAtomically(stem.string() + ".cubin", result->cubin);
          if (s.ok()) // the source too: readable, and `flashtile nvrtc` can time its compile where MLIR is absent
            s = writeFileAtomically(stem.string() + ".cu", result->cuda);
          if (s.ok())
            s = writeFileAtomically(stem.string() + ".manifest", info.serialize());
          if (!s.ok())
            return fail(s);
          std::printf("%-44s %-7s threads %3d smem %6d B  mlir %6.1f ms  nvrtc %7.1f ms\n", info.entry.c_str(),
                      info.arch.c_str(), info.threads, info.smemBytes, result->mlirSeconds * 1e3,
                      result->nvrtcSeconds * 1e3);
          ++count;
        }
  std::printf("%d kernels written to %s\n", count, out.string().c_str());
  return 0;
}

int summaryCommand(const std::vector<std::string> &argv) {
  auto args = Args::parse(argv, {"arch"}, {});
  if (!args.ok())
    return fail(args.status());
  auto nvrtc = nvrtcVersion();
  std::printf("flashtile %s, NVRTC %s — no GPU here: compiling the built-in kernels instead of running them\n\n",
              std::string(compilerVersion()).c_str(), nvrtc.ok() ? nvrtc->c_str() : nvrtc.status().message().c_str());
  std::printf("%-22s %-5s %7s %-8s %-26s %8s %9s %9s %10s\n", "variant", "dtype", "hd", "arch", "schedule (M,N,warps)",
              "smem B", "cuda loc", "mlir ms", "nvrtc ms");
  // A representative set rather than the full cross product (which NVRTC takes minutes over): every variant at
  // bf16/hd 128 on sm_90a, the plain kernels at every head dim and dtype on sm_90a, and on the other archs.
  struct Config {
    std::string variant, arch;
    ElementType dtype;
    int headDim, headDimV;
  };
  std::vector<std::string> archs = args->getList("arch", "sm_80,sm_90a,sm_100a");
  auto wanted = [&](const std::string &arch) { return std::find(archs.begin(), archs.end(), arch) != archs.end(); };
  std::vector<Config> configs;
  if (wanted("sm_90a")) {
    for (const std::string &name : variants::names())
      configs.push_back({name, "sm_90a", ElementType::BF16, 128, 128});
    for (const char *name : {"none", "causal"})
      for (ElementType dtype : {ElementType::BF16, ElementType::F16})
        for (auto [hd, hdv] : {std::pair{32, 32}, {64, 64}, {96, 96}, {128, 128}, {192, 192}, {256, 256}, {192, 128}})
          if (!(dtype == ElementType::BF16 && hd == 128 && hdv == 128))
            configs.push_back({name, "sm_90a", dtype, hd, hdv});
  }
  for (const std::string &arch : archs)
    if (arch != "sm_90a")
      for (const char *name : {"none", "causal"})
        for (int hd : {64, 128})
          configs.push_back({name, arch, ElementType::BF16, hd, hd});

  int failures = 0;
  for (const Config &c : configs) {
    jit::CompileOptions o;
    o.dtype = c.dtype;
    o.headDim = c.headDim;
    o.headDimV = c.headDimV;
    o.schedule.arch = c.arch;
    auto variant = variants::byName(c.variant);
    if (!variant) {
      std::printf("%-22s FAILED: unknown variant\n", c.variant.c_str());
      ++failures;
      continue;
    }
    auto result = jit::compile(*variant, o, jit::Stage::Cubin);
    if (!result.ok()) {
      std::printf("%-22s FAILED: %s\n", c.variant.c_str(), result.status().message().c_str());
      ++failures;
      continue;
    }
    const KernelInfo &i = result->info;
    char sched[64], hd[16];
    std::snprintf(sched, sizeof sched, "%s (%d,%d,%d)", i.schedule.c_str(), i.blockM, i.blockN, i.threads / 32);
    std::snprintf(hd, sizeof hd, c.headDim == c.headDimV ? "%d" : "%d:%d", c.headDim, c.headDimV);
    long lines = std::count(result->cuda.begin(), result->cuda.end(), '\n');
    std::printf("%-22s %-5s %7s %-8s %-26s %8d %9ld %9.1f %10.1f\n", c.variant.c_str(), i.dtype.c_str(), hd,
                c.arch.c_str(), sched, i.smemBytes, lines, result->mlirSeconds * 1e3, result->nvrtcSeconds * 1e3);
  }
  std::printf("\n%s\n", failures ? "some kernels failed to compile" : "all kernels compiled (cubins, not run: no GPU)");
  return failures ? 1 : 0;
}

} // namespace flashtile::cli
