//===- AotCommand.cpp - `flashtile aot`: kernel libraries, built in parallel ===//
//
// A kernel library is a directory of <kernel>.cubin + <kernel>.manifest (what Runtime::loadAotDirectory loads),
// <kernel>.cu (the source, for reading and for `flashtile nvrtc`) and index.txt (every kernel and the dispatch key
// the runtime files it under). Kernels are built in two parallel phases: the MLIR half of every request (one
// MLIRContext per compile), which also says which shape classes share the default class's tiling and so have no
// kernel of their own, then NVRTC for the kernels that remain, one progress line per kernel as it finishes.
//
// The files aot names itself are replaced atomically as regular files, as the disk cache's entries are: whatever
// stands at such a name in DIR (a FIFO, which would block the write; a symbolic link, which would send it outside
// DIR) is replaced, never opened. Writing through links and into devices is for a path the user names (-o).
//===----------------------------------------------------------------------===//
#include "Commands.h"
#include "KernelFlags.h"

#include "examples/variants/Variants.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/FileIo.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Version.h"

#include <fmt/format.h>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace fs = std::filesystem;

namespace flashtile::cli {

namespace {

constexpr const char *kIndexFile = "index.txt";
constexpr std::string_view kManifestExtension = ".manifest";
/// Manifests and index files are a few hundred bytes; anything far larger is not one.
constexpr uint64_t kMaxTextFileBytes = 1 << 20;
constexpr int kMaxJobs = 256;

struct AotFlags {
  ScheduleFlags schedule;
  std::string out, check;
  int jobs = 0; // 0: every core this process may run on
  std::string variants = "none,causal", dtypes = "bf16,f16", headDims = "64,128", shapeClasses = "default,short";
  std::string rotary = "none"; // KV-cache kernels: also those that rotate Q and the appended keys (tile.rotary)
  std::string kvDtypes;        // KV-cache kernels: also those that read an e4m3 cache ("e4m3"); empty: none
  std::string kinds = "forward"; // module kinds (moduleKinds()): forward, backward
  bool archGiven = false;
};

int availableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

/// Runs work(i) for i in [0, count) on `jobs` threads; stops handing out work once `stop` is set.
void parallelFor(size_t count, int jobs, std::atomic<bool> &stop, const std::function<void(size_t)> &work) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; !stop && (i = next++) < count;)
      work(i);
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min<int>(jobs, int(count)); ++t)
    threads.emplace_back(worker);
  worker();
  for (std::thread &thread : threads)
    thread.join();
}

struct Request {
  std::string variantName;
  Variant variant;
  jit::CompileOptions options;
};

struct Built {
  jit::CompileResult result; // up to CUDA
  double nvrtcSeconds = 0;
};

std::string headDimsText(int d, int dv) { return d == dv ? std::to_string(d) : fmt::format("{}:{}", d, dv); }

/// Every manifest in `dir`, parsed, sorted by file name.
StatusOr<std::vector<std::pair<std::string, KernelInfo>>> readManifests(const fs::path &dir) {
  std::error_code ec;
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == kManifestExtension)
      paths.push_back(it->path());
  if (ec)
    return Status::error(fmt::format("cannot list '{}': {}", dir.string(), ec.message()));
  std::sort(paths.begin(), paths.end());
  std::vector<std::pair<std::string, KernelInfo>> manifests;
  for (const fs::path &path : paths) {
    StatusOr<std::string> text = readInputFile(path.string(), kMaxTextFileBytes);
    if (!text.ok())
      return text.status();
    StatusOr<KernelInfo> info = KernelInfo::parse(*text);
    if (!info.ok())
      return info.status().withContext(path.string());
    manifests.emplace_back(path.stem().string(), std::move(*info));
  }
  return manifests;
}

std::string indexText(const std::vector<std::pair<std::string, KernelInfo>> &manifests) {
  std::string text = fmt::format("# flashtile kernel library ({} kernels, written by flashtile {}): one line per "
                                 "<kernel>.manifest,\n# the kernel's name and the dispatch key the runtime files it "
                                 "under, tab-separated. `flashtile aot --check DIR` checks it.\n",
                                 manifests.size(), compilerVersion());
  for (const auto &[name, info] : manifests)
    text += fmt::format("{}\t{}\n", name, info.spec().key());
  return text;
}

/// name -> key from index.txt.
StatusOr<std::map<std::string, std::string>> readIndex(const fs::path &path) {
  StatusOr<std::string> text = readInputFile(path.string(), kMaxTextFileBytes);
  if (!text.ok())
    return text.status();
  std::map<std::string, std::string> index;
  size_t lineNumber = 0;
  for (size_t start = 0; start < text->size();) {
    size_t end = text->find('\n', start);
    std::string line = text->substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? text->size() : end + 1;
    ++lineNumber;
    if (line.empty() || line[0] == '#')
      continue;
    size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == line.size() ||
        !index.emplace(line.substr(0, tab), line.substr(tab + 1)).second)
      return Status::error(
          fmt::format("{}:{}: not '<kernel>\\t<key>' or a kernel listed twice", path.string(), lineNumber));
  }
  return index;
}

int runCheck(const AotFlags &flags) {
  const fs::path dir = flags.check;
  // The runtime's own loader decides what it accepts: regular files, manifest fields, this compiler's version, the
  // cubin an ELF image for the manifest's SM with its entry symbol, no two kernels for one key.
  KernelCache::Options noCache;
  noCache.diskEnabled = false;
  Runtime runtime(noCache);
  if (Status s = runtime.loadAotDirectory(dir.string()); !s.ok())
    return fail(s.withContext("aot --check"));
  StatusOr<std::vector<std::pair<std::string, KernelInfo>>> manifests = readManifests(dir);
  if (!manifests.ok())
    return fail(manifests.status().withContext("aot --check"));

  std::vector<std::string> problems;
  std::map<std::string, int> perArch;
  for (const auto &[name, info] : *manifests) {
    ++perArch[info.arch];
    if (flags.archGiven && info.arch != flags.schedule.arch)
      problems.push_back(fmt::format("{}.manifest is for {}, not {}", name, info.arch, flags.schedule.arch));
  }
  StatusOr<std::map<std::string, std::string>> index = readIndex(dir / kIndexFile);
  if (!index.ok()) {
    problems.push_back(index.status().message() + " (`flashtile aot` writes it)");
  } else {
    std::map<std::string, std::string> found;
    for (const auto &[name, info] : *manifests)
      found.emplace(name, info.spec().key());
    for (const auto &[name, key] : *index) {
      auto it = found.find(name);
      if (it == found.end())
        problems.push_back(fmt::format("{} lists {}, which has no manifest", kIndexFile, name));
      else if (it->second != key)
        problems.push_back(
            fmt::format("{} files {} under {}, its manifest under {}", kIndexFile, name, key, it->second));
    }
    for (const auto &[name, key] : found)
      if (!index->count(name))
        problems.push_back(fmt::format("{}.manifest is not in {}", name, kIndexFile));
  }
  if (!problems.empty()) {
    for (const std::string &problem : problems)
      fmt::print(stderr, "flashtile: error: aot --check {}: {}\n", dir.string(), problem);
    return kExitFailure;
  }
  std::vector<std::string> archs;
  for (const auto &[arch, count] : perArch)
    archs.push_back(fmt::format("{} {}", count, arch));
  fmt::print("{}: {} kernels load ({}), {} matches\n", dir.string(), manifests->size(), joinNames(archs), kIndexFile);
  return 0;
}

/// The requests of an `aot --out` call: every kind x variant x dtype x head dim x shape class, with each KV-cache and
/// rotary form the schedule's kernels take. False when a list or a combination is refused (printed; `exitCode` set).
bool aotRequests(const AotFlags &flags, std::vector<Request> &requests, int &exitCode) {
  StatusOr<std::vector<std::string>> variantList = splitList("--variants", flags.variants);
  StatusOr<std::vector<std::string>> dtypeList = splitList("--dtypes", flags.dtypes);
  StatusOr<std::vector<std::string>> headDimList = splitList("--head-dims", flags.headDims);
  StatusOr<std::vector<std::string>> classList = splitList("--shape-classes", flags.shapeClasses);
  StatusOr<std::vector<std::string>> rotaryList = splitList("--rotary", flags.rotary);
  StatusOr<std::vector<std::string>> kindList = splitList("--kinds", flags.kinds);
  for (const auto *list : {&variantList, &dtypeList, &headDimList, &classList, &rotaryList, &kindList})
    if (!list->ok())
      return exitCode = fail(list->status()), false;
  // --kv-dtypes: the caches' element types each KV-cache request is built for ("" = the dtype's own cache).
  std::vector<std::string> kvDtypeNames = {""};
  if (!flags.kvDtypes.empty()) {
    StatusOr<std::vector<std::string>> kvList = splitList("--kv-dtypes", flags.kvDtypes);
    if (!kvList.ok())
      return exitCode = fail(kvList.status()), false;
    kvDtypeNames.clear();
    for (const std::string &name : *kvList)
      kvDtypeNames.push_back(name == "same" ? "" : name);
  }
  std::vector<RotaryMode> rotaryModes;
  for (const std::string &name : *rotaryList) {
    StatusOr<RotaryMode> mode = jit::parseRotaryMode(name);
    if (!mode.ok())
      return exitCode = fail(mode.status().withContext("--rotary")), false;
    rotaryModes.push_back(*mode);
  }

  // A schedule whose kernels can read KV caches: a plain and a KV-cache kernel of each request (the runtime runs
  // plain calls on the first, cache calls on the second), unless --kv-cache picks one.
  std::vector<std::optional<int64_t>> kvCacheKnobs = {std::nullopt};
  if (const schedule::Schedule *s = schedule::lookupSchedule(flags.schedule.schedule);
      s && schedule::hasKvCacheKnob(*s) && !flags.schedule.knobs.count(schedule::kKvCacheKnob))
    kvCacheKnobs = {0, 1};
  for (const std::string &kind : *kindList)
    for (const std::string &variantName : *variantList)
      for (const std::string &dtypeName : *dtypeList)
        for (const std::string &item : *headDimList)
          for (const std::string &shapeClass : *classList) {
            std::optional<Variant> variant = variants::byName(variantName);
            if (!variant)
              return exitCode = fail(unknownName("variant", variantName, variantNames())), false;
            StatusOr<ElementType> dtype = jit::parseElementType(dtypeName);
            if (!dtype.ok())
              return exitCode = fail(dtype.status().withContext("--dtypes")), false;
            StatusOr<std::pair<int, int>> headDims = parseHeadDimItem(item);
            if (!headDims.ok())
              return exitCode = fail(headDims.status()), false;
            jit::CompileOptions options = compileOptions(flags.schedule);
            options.kind = kind;
            options.dtype = *dtype;
            std::tie(options.headDim, options.headDimV) = *headDims;
            options.schedule.shapeClass = shapeClass;
            // The KV cache and rotary embedding belong to forward modules: a backward module is one kernel set.
            const bool forward = kind == kForwardKind;
            for (std::optional<int64_t> kvCache : kvCacheKnobs) {
              if (!forward && kvCache.value_or(0) != 0)
                continue;
              if (kvCache)
                options.schedule.knobs[schedule::kKvCacheKnob] = *kvCache;
              // Rotary kernels are KV-cache kernels: each --rotary mode once per KV-cache request.
              auto knob = options.schedule.knobs.find(schedule::kKvCacheKnob);
              const bool readsCache = knob != options.schedule.knobs.end() && knob->second == 1;
              for (RotaryMode mode : rotaryModes) {
                if (!forward && mode != RotaryMode::None)
                  continue;
                if (mode != RotaryMode::None && !readsCache) {
                  if (kvCacheKnobs.size() == 1)
                    return exitCode = fail("--rotary " + flags.rotary +
                                           ": rotary kernels are KV-cache kernels (--schedule "
                                           "decode, --kv-cache 1 or unset)"),
                           false;
                  continue;
                }
                options.rotary = mode;
                // e4m3 caches are KV-cache kernels of a bf16 or f16 dtype: each --kv-dtypes entry per such request.
                // Kernels without a cache are built once.
                static const std::vector<std::string> kSameOnly = {""};
                const bool cacheKernel = readsCache && forward;
                if (!cacheKernel && kvCacheKnobs.size() == 1 && kvDtypeNames != kSameOnly)
                  return exitCode = fail("--kv-dtypes " + flags.kvDtypes +
                                         ": KV cache element types are those of KV-cache kernels (--schedule decode, "
                                         "--kv-cache 1 or unset)"),
                         false;
                for (const std::string &kvName : cacheKernel ? kvDtypeNames : kSameOnly) {
                  StatusOr<std::optional<ElementType>> kvDtype = jit::parseKvDtype(kvName, *dtype);
                  if (!kvDtype.ok())
                    return exitCode = fail(kvDtype.status().withContext("--kv-dtypes")), false;
                  if (!kvName.empty() && !*kvDtype &&
                      std::find(kvDtypeNames.begin(), kvDtypeNames.end(), "") != kvDtypeNames.end())
                    continue; // an e4m3 dtype's cache is e4m3 already: the "same" request builds it
                  options.kvDtype = *kvDtype;
                  // Before anything is built, and the first one only: a command line not understood is one line.
                  if (Status s = checkKernelFlags(*variant, options, flags.schedule); !s.ok())
                    return exitCode = failUsage(
                               s.withContext(fmt::format("aot: {} {} hd {} {}", variantName, options.schedule.arch,
                                                         headDimsText(options.headDim, options.headDimV), shapeClass))),
                           false;
                  requests.push_back({variantName, *variant, options});
                }
              }
            }
          }
  return true;
}

/// What the parallel phases share: the first error stops them.
struct AotRun {
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::vector<std::string> errors;
};

/// Phase 1: the MLIR half of every request, `jobs` at a time; built[i] is request i's module, or empty where its
/// shape class is tiled as the default class (no kernel of its own: the runtime runs the default's).
std::vector<std::optional<Built>> buildModules(const std::vector<Request> &requests, const AotFlags &flags, int jobs,
                                               AotRun &run) {
  std::vector<std::optional<Built>> built(requests.size());
  parallelFor(requests.size(), jobs, run.stop, [&](size_t i) {
    StatusOr<jit::CompileResult> result = jit::compile(requests[i].variant, requests[i].options, jit::Stage::Cuda);
    std::lock_guard<std::mutex> lock(run.mutex);
    if (!result.ok()) {
      const jit::CompileOptions &o = requests[i].options;
      run.errors.push_back(explainDefaults(result.status(), flags.schedule)
                               .withContext(fmt::format("{} {} hd {} {}", requests[i].variantName, o.schedule.arch,
                                                        headDimsText(o.headDim, o.headDimV), o.schedule.shapeClass))
                               .message());
      run.stop = true;
      return;
    }
    if (result->shapeClass == requests[i].options.schedule.shapeClass)
      built[i] = Built{std::move(*result)};
  });
  return built;
}

/// Phase 2's totals: kernels written, MLIR and NVRTC seconds summed over them.
struct Written {
  size_t kernels = 0;
  double mlirSeconds = 0, nvrtcSeconds = 0;
};

/// Phase 2: NVRTC and the files of each built module (`kernels`: their indices in `built`), `jobs` at a time, a
/// flushed progress line per kernel. Each kernel's cubin and source land before its manifest: the loader only looks
/// for kernels through manifests.
Written writeKernels(const fs::path &out, const std::vector<Request> &requests, std::vector<std::optional<Built>> &built,
                     const std::vector<size_t> &kernels, int jobs, AotRun &run) {
  Written written;
  const int width = int(std::to_string(kernels.size()).size());
  parallelFor(run.errors.empty() ? kernels.size() : 0, jobs, run.stop, [&](size_t k) {
    Built &b = *built[kernels[k]];
    KernelInfo info = b.result.info;
    info.variant = requests[kernels[k]].variantName; // built-in variants are asked for by name
    const auto nvrtcStart = std::chrono::steady_clock::now();
    StatusOr<std::string> cubin = compileCuda(b.result.cuda, info.entry + ".cu", info.arch, NvrtcOutput::Cubin);
    const double nvrtc = std::chrono::duration<double>(std::chrono::steady_clock::now() - nvrtcStart).count();
    Status s = cubin.ok() ? Status() : cubin.status().withContext("NVRTC failed on " + info.entry);
    const fs::path stem = out / info.entry;
    if (s.ok())
      s = replaceFileAtomically(stem.string() + ".cubin", *cubin);
    if (s.ok())
      s = replaceFileAtomically(stem.string() + ".cu", b.result.cuda);
    if (s.ok())
      s = replaceFileAtomically(stem.string() + std::string(kManifestExtension), info.serialize());
    std::lock_guard<std::mutex> lock(run.mutex);
    if (!s.ok()) {
      run.errors.push_back(s.message());
      run.stop = true;
      return;
    }
    ++written.kernels;
    written.mlirSeconds += b.result.mlirSeconds;
    written.nvrtcSeconds += nvrtc;
    fmt::print("[{:>{}}/{}] {:<46} {:<7} mlir {:6.1f} ms  nvrtc {:7.1f} ms\n", written.kernels, width, kernels.size(),
               info.entry, info.arch, b.result.mlirSeconds * 1e3, nvrtc * 1e3);
    std::fflush(stdout);
  });
  return written;
}

/// `aot --out DIR`: the requests, their modules (phase 1), the directory once there is something to write, the
/// kernels (phase 2), then the index of what the directory holds.
int runAot(const AotFlags &flags) {
  if (!flags.check.empty())
    return runCheck(flags);
  if (flags.out.empty())
    return fail("aot: give --out DIR (to build a kernel library) or --check DIR (to check one)");
  std::vector<Request> requests;
  if (int exitCode = 0; !aotRequests(flags, requests, exitCode))
    return exitCode;

  const fs::path out = flags.out;
  const int jobs = flags.jobs > 0 ? flags.jobs : availableCores();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  AotRun run;
  std::vector<std::optional<Built>> built = buildModules(requests, flags, jobs, run);
  std::vector<size_t> kernels;
  for (size_t i = 0; i < built.size(); ++i)
    if (built[i])
      kernels.push_back(i);
  // The directory once there is something to write: a compile phase that fails leaves nothing behind.
  if (run.errors.empty()) {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out))
      return fail(fmt::format("aot: cannot create the directory '{}': {}", out.string(),
                              ec ? ec.message() : "a file of that name exists"));
    fmt::print("{} kernels to build with {} job{} ({} of {} requests are shape classes tiled as the default class: "
               "no kernel of their own)\n",
               kernels.size(), jobs, jobs == 1 ? "" : "s", requests.size() - kernels.size(), requests.size());
    std::fflush(stdout);
  }
  const Written written = writeKernels(out, requests, built, kernels, jobs, run);
  if (!run.errors.empty()) {
    for (const std::string &error : run.errors)
      fail("aot: " + error);
    return kExitFailure;
  }

  StatusOr<std::vector<std::pair<std::string, KernelInfo>>> manifests = readManifests(out);
  if (!manifests.ok())
    return fail(manifests.status().withContext("aot: writing the index"));
  if (Status s = replaceFileAtomically((out / kIndexFile).string(), indexText(*manifests)); !s.ok())
    return fail(s.withContext("aot"));
  fmt::print("{} kernels written to {} in {:.1f} s with {} job{} (summed over kernels: mlir {:.1f} s, nvrtc {:.1f} s); "
             "{} lists the {} kernels there\n",
             written.kernels, out.string(), elapsed(), jobs, jobs == 1 ? "" : "s", written.mlirSeconds,
             written.nvrtcSeconds, (out / kIndexFile).string(), manifests->size());
  return 0;
}

} // namespace

void registerAotCommand(CLI::App &app, Registry &registry) {
  auto flags = std::make_shared<AotFlags>();
  CLI::App *command = addCommand(app, "aot",
                                 "Build a kernel library for Runtime::loadAotDirectory (<kernel>.cubin, .manifest, "
                                 ".cu and index.txt), or check one with --check");
  CLI::Option *out =
      command->add_option("--out", flags->out, "Directory to write (created if missing)")->check(nonEmpty());
  command
      ->add_option("--check", flags->check,
                   "Check a library instead: it loads (the runtime's checks), index.txt matches, every kernel is for "
                   "--arch (when given)")
      ->check(nonEmpty())
      ->excludes(out);
  command->add_option("-j,--jobs", flags->jobs, "Kernels compiled at once (default: every core)")
      ->check(intRange(1, kMaxJobs));
  command->add_option("--variants", flags->variants, "Comma list of built-in variants")
      ->check(listOf("variant", variantNames()))
      ->capture_default_str();
  command->add_option("--dtypes", flags->dtypes, "Comma list of element types")
      ->check(listOf("dtype", dtypeNames()))
      ->capture_default_str();
  command
      ->add_option("--head-dims", flags->headDims,
                   "Comma list of D (head_dim = head_dim_v) or D:DV; the runtime runs 32,64,96,128,192,256,192:128")
      ->check(CLI::Validator(
          [](std::string &value) -> std::string {
            StatusOr<std::vector<std::string>> items = splitList("", value);
            if (!items.ok())
              return items.status().message();
            // Repeats are found on the parsed pairs: 64 and 64:64 are one kernel.
            std::map<std::pair<int, int>, std::string> seen;
            for (const std::string &item : *items) {
              StatusOr<std::pair<int, int>> dims = parseHeadDimItem(item);
              if (!dims.ok())
                return dims.status().message().substr(std::string("--head-dims: ").size());
              if (auto [at, fresh] = seen.emplace(*dims, item); !fresh)
                return fmt::format("'{}' is listed twice ('{}' is {}:{} too)", item, at->second, dims->first,
                                   dims->second);
            }
            return "";
          },
          "LIST"))
      ->capture_default_str();
  command
      ->add_option("--shape-classes", flags->shapeClasses,
                   "Comma list; a class gets a kernel only where its tiling differs from the default class's")
      ->check(listOf("shape class", shapeClassNames()))
      ->capture_default_str();
  command
      ->add_option("--kinds", flags->kinds,
                   "Comma list of module kinds: forward, backward (the backward's three kernels, one manifest, for "
                   "the schedules that schedule it)")
      ->check(listOf("kind", moduleKinds()))
      ->capture_default_str();
  command
      ->add_option("--rotary", flags->rotary,
                   "Comma list of none, halves, interleaved: KV-cache kernels (decode) for each, halves and "
                   "interleaved rotating Q and the appended keys (rotary embedding)")
      ->check(listOf("rotary", {"none", std::string(kRotaryHalves), std::string(kRotaryInterleaved)}))
      ->capture_default_str();
  command
      ->add_option("--kv-dtypes", flags->kvDtypes,
                   "Comma list of KV cache element types the KV-cache kernels (decode) are built for: same (the "
                   "dtype's own cache, the default), e4m3 (an e4m3 cache under a bf16 or f16 dtype)")
      ->check(listOf("kv dtype", {"same", "e4m3"}));
  addScheduleFlags(*command, flags->schedule);
  registry.add(command, [flags, command] {
    flags->archGiven = command->count("--arch") > 0;
    return runAot(*flags);
  });
}

} // namespace flashtile::cli
