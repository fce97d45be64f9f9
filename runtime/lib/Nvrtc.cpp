// Nvrtc.cpp — dlopen of libnvrtc and one compile call.
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/KernelInfo.h"

#include "NvrtcMemo.h"

#include <nvrtc.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <string_view>

using namespace flashtile;
namespace fs = std::filesystem;

namespace {

#define FLASHTILE_NVRTC_FUNCTIONS(X)                                                                                   \
  X(nvrtcGetErrorString)                                                                                               \
  X(nvrtcVersion)                                                                                                      \
  X(nvrtcCreateProgram)                                                                                                \
  X(nvrtcDestroyProgram)                                                                                               \
  X(nvrtcCompileProgram)                                                                                               \
  X(nvrtcGetPTXSize)                                                                                                   \
  X(nvrtcGetPTX)                                                                                                       \
  X(nvrtcGetCUBINSize)                                                                                                 \
  X(nvrtcGetCUBIN)                                                                                                     \
  X(nvrtcGetProgramLogSize)                                                                                            \
  X(nvrtcGetProgramLog)

struct NvrtcApi {
#define FLASHTILE_DECLARE_NVRTC_FUNCTION(name) decltype(&::name) name = nullptr;
  FLASHTILE_NVRTC_FUNCTIONS(FLASHTILE_DECLARE_NVRTC_FUNCTION)
#undef FLASHTILE_DECLARE_NVRTC_FUNCTION

  Status check(nvrtcResult result, const std::string &call) const {
    if (result == NVRTC_SUCCESS)
      return Status();
    return Status::error(call + " failed: " + nvrtcGetErrorString(result));
  }
};

constexpr std::array<const char *, 3> kSonames = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};

/// Where a pip-installed NVRTC wheel puts the library, under a site-packages directory: CUDA 13's
/// nvidia-cuda-nvrtc (nvidia/cu13/lib) and CUDA 12's nvidia-cuda-nvrtc-cu12 (nvidia/cuda_nvrtc/lib).
constexpr std::array<const char *, 2> kWheelDirs = {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"};

/// Python package directories where an NVRTC wheel may be: the one this library was loaded from (the flashtile
/// package itself lives in site-packages), the active virtual or conda environment's, the user's and the system's.
std::vector<fs::path> sitePackagesDirs() {
  std::vector<fs::path> dirs;
  auto add = [&](const fs::path &dir) {
    std::error_code ec;
    if (fs::is_directory(dir, ec) && std::find(dirs.begin(), dirs.end(), dir) == dirs.end())
      dirs.push_back(dir);
  };
  Dl_info self;
  if (dladdr(reinterpret_cast<void *>(&sitePackagesDirs), &self) && self.dli_fname)
    for (fs::path dir = fs::path(self.dli_fname).parent_path(); dir.has_relative_path(); dir = dir.parent_path())
      if (dir.filename() == "site-packages" || dir.filename() == "dist-packages") {
        add(dir);
        break;
      }
  // <prefix>/lib/python3.*/{site,dist}-packages
  auto addPrefix = [&](const fs::path &prefix) {
    std::error_code ec;
    for (fs::directory_iterator it(prefix / "lib", ec), end; !ec && it != end; it.increment(ec))
      if (it->path().filename().string().starts_with("python3"))
        for (const char *leaf : {"site-packages", "dist-packages"})
          add(it->path() / leaf);
  };
  for (const char *variable : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char *prefix = std::getenv(variable); prefix && *prefix)
      addPrefix(prefix);
  if (const char *home = std::getenv("HOME"); home && *home)
    addPrefix(fs::path(home) / ".local");
  addPrefix("/usr/local");
  addPrefix("/usr");
  add("/usr/lib/python3/dist-packages");
  return dirs;
}

/// Directories to look in after the loader's own search path, in order.
std::vector<fs::path> searchDirs() {
  std::vector<fs::path> dirs;
  for (const char *variable : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(variable); root && *root) {
      dirs.push_back(fs::path(root) / "lib64");
      dirs.push_back(fs::path(root) / "lib");
    }
  dirs.push_back("/usr/local/cuda/lib64");
  for (const fs::path &site : sitePackagesDirs())
    for (const char *wheelDir : kWheelDirs)
      dirs.push_back(site / wheelDir);
  return dirs;
}

std::string loadedPath;

/// Opens `path` (a file name or a soname); on failure appends what happened to `tried`.
void *tryOpen(const std::string &path, std::vector<std::string> &tried) {
  if (void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
    return library;
  const char *reason = dlerror();
  tried.push_back(path + " (" + (reason ? reason : "unknown reason") + ")");
  return nullptr;
}

/// FLASHTILE_NVRTC_PATH (a library file or a directory), alone when set; else the loader's search path
/// (LD_LIBRARY_PATH, the ld.so cache), then searchDirs().
void *openNvrtc(std::vector<std::string> &tried) {
  if (const char *forced = std::getenv("FLASHTILE_NVRTC_PATH"); forced && *forced) {
    std::error_code ec;
    if (!fs::is_directory(forced, ec))
      return tryOpen(forced, tried);
    for (const char *name : kSonames)
      if (fs::exists(fs::path(forced) / name, ec))
        if (void *library = tryOpen((fs::path(forced) / name).string(), tried))
          return library;
    tried.push_back(std::string(forced) + " (FLASHTILE_NVRTC_PATH: no libnvrtc.so* there)");
    return nullptr;
  }
  std::vector<std::string> sonameErrors;
  for (const char *name : kSonames)
    if (void *library = tryOpen(name, sonameErrors))
      return library;
  tried.push_back("the loader's search path (LD_LIBRARY_PATH, ld.so.cache) for libnvrtc.so.13, .12 and "
                  "libnvrtc.so: not found");
  for (const fs::path &dir : searchDirs()) {
    std::error_code ec;
    bool any = false;
    for (const char *name : kSonames)
      if (fs::exists(dir / name, ec)) {
        any = true;
        if (void *library = tryOpen((dir / name).string(), tried))
          return library;
      }
    if (!any)
      tried.push_back(dir.string() + (fs::is_directory(dir, ec) ? " (no libnvrtc.so* there)" : " (missing)"));
  }
  return nullptr;
}

Status loadNvrtc(NvrtcApi &api) {
  std::vector<std::string> tried;
  void *library = openNvrtc(tried);
  if (!library) {
    std::string places;
    for (const std::string &place : tried)
      places += "; " + place;
    return Status::error("NVRTC could not be loaded. Looked in: " + places.substr(2) +
                         ". Install the CUDA toolkit (12.8 or newer) or the nvidia-cuda-nvrtc-cu12 wheel, or set "
                         "FLASHTILE_NVRTC_PATH to libnvrtc.so or its directory (CUDA_HOME to the toolkit)");
  }
#define FLASHTILE_RESOLVE_NVRTC_FUNCTION(name)                                                                         \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, #name));                                              \
  if (!api.name)                                                                                                       \
    return Status::error("the loaded NVRTC does not export " #name "; it is too old for flashtile");
  FLASHTILE_NVRTC_FUNCTIONS(FLASHTILE_RESOLVE_NVRTC_FUNCTION)
#undef FLASHTILE_RESOLVE_NVRTC_FUNCTION
  Dl_info where;
  loadedPath = dladdr(reinterpret_cast<void *>(api.nvrtcVersion), &where) && where.dli_fname ? where.dli_fname : "";
  return Status();
}

/// Loaded once per process (thread-safe); the library stays loaded for the process's lifetime.
StatusOr<const NvrtcApi *> nvrtc() {
  static NvrtcApi api;
  static const Status loaded = loadNvrtc(api);
  if (!loaded.ok())
    return loaded;
  return &api;
}

/// "sm_90a" -> "compute_90a" for PTX; the SM target is kept for a cubin. Rejects anything else.
StatusOr<std::string> gpuArchitecture(const std::string &arch, NvrtcOutput out) {
  constexpr std::string_view kPrefix = "sm_";
  std::string_view number = arch;
  if (number.starts_with(kPrefix))
    number.remove_prefix(kPrefix.size());
  if (number.ends_with('a') || number.ends_with('f'))
    number.remove_suffix(1);
  bool isNumber = !number.empty() && std::all_of(number.begin(), number.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
  if (!arch.starts_with(kPrefix) || !isNumber)
    return Status::error("arch '" + arch + "' is not a target of the form sm_<NN>[a|f] (e.g. " + supportedArchsText() +
                         ")");
  return out == NvrtcOutput::Cubin ? arch : "compute_" + arch.substr(kPrefix.size());
}

/// Destroys the program on every return path.
class ProgramGuard {
public:
  ProgramGuard(const NvrtcApi &api, nvrtcProgram program) : api(api), program(program) {}
  ~ProgramGuard() { api.nvrtcDestroyProgram(&program); }
  ProgramGuard(const ProgramGuard &) = delete;
  ProgramGuard &operator=(const ProgramGuard &) = delete;

private:
  const NvrtcApi &api;
  nvrtcProgram program;
};

} // namespace

std::vector<std::string> flashtile::nvrtcSearchDirs() {
  std::vector<std::string> dirs;
  for (const fs::path &dir : searchDirs())
    dirs.push_back(dir.string());
  return dirs;
}

std::string flashtile::nvrtcLibraryPath() { return nvrtc().ok() ? loadedPath : ""; }

StatusOr<std::string> flashtile::nvrtcVersion() {
  StatusOr<const NvrtcApi *> api = nvrtc();
  if (!api.ok())
    return api.status();
  int major = 0;
  int minor = 0;
  if (Status s = (*api)->check((*api)->nvrtcVersion(&major, &minor), "nvrtcVersion"); !s.ok())
    return s;
  return std::to_string(major) + "." + std::to_string(minor);
}

StatusOr<std::string> flashtile::compileCuda(const std::string &source, const std::string &name,
                                             const std::string &arch, NvrtcOutput out,
                                             const std::vector<std::string> &extraOptions, std::string *log) {
  StatusOr<std::string> target = gpuArchitecture(arch, out);
  if (!target.ok())
    return target.status();
  StatusOr<const NvrtcApi *> loaded = nvrtc();
  if (!loaded.ok())
    return loaded.status();
  const NvrtcApi &api = **loaded;

  // -minimal: generated kernels include nothing and use no texture, device-runtime or runtime-API types, so NVRTC
  // skips declaring them (about 10 ms less front end per compile; the cubin is the same).
  std::vector<std::string> options = {"--gpu-architecture=" + *target, "-std=c++17", "-default-device", "-minimal"};
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());

  // The memo of finished compiles, where FLASHTILE_NVRTC_CACHE_DIR names one (NvrtcMemo.h; off by default).
  const std::string memoDir = nvrtcMemoDirectory();
  std::string memoKey;
  if (!memoDir.empty()) {
    // NVRTC's version and the library file itself (its path, size and time: a patch release reports the same
    // version and may print other code).
    int major = 0, minor = 0;
    api.nvrtcVersion(&major, &minor);
    std::error_code ec;
    const auto size = fs::file_size(loadedPath, ec);
    const auto time = fs::last_write_time(loadedPath, ec).time_since_epoch().count();
    memoKey = nvrtcMemoKey(std::to_string(major) + "." + std::to_string(minor) + " " + loadedPath + " " +
                               std::to_string(size) + " " + std::to_string(time),
                           name, options, out == NvrtcOutput::Cubin, source);
    if (std::optional<NvrtcMemoEntry> hit = findNvrtcMemo(memoDir, memoKey)) {
      if (log)
        *log = hit->log;
      return hit->output;
    }
  }

  nvrtcProgram program = nullptr;
  if (Status s = api.check(api.nvrtcCreateProgram(&program, source.c_str(), name.c_str(), 0, nullptr, nullptr),
                           "nvrtcCreateProgram");
      !s.ok())
    return s;
  ProgramGuard guard(api, program);

  std::vector<const char *> optionPointers;
  for (const std::string &option : options)
    optionPointers.push_back(option.c_str());

  nvrtcResult compiled =
      api.nvrtcCompileProgram(program, static_cast<int>(optionPointers.size()), optionPointers.data());
  std::string programLog;
  size_t logSize = 0;
  if (api.nvrtcGetProgramLogSize(program, &logSize) == NVRTC_SUCCESS && logSize > 1) {
    programLog.resize(logSize);
    if (api.nvrtcGetProgramLog(program, programLog.data()) != NVRTC_SUCCESS)
      programLog = "(NVRTC's log could not be read)";
    else
      programLog.resize(logSize - 1); // drop the terminating NUL
  }
  if (compiled != NVRTC_SUCCESS) {
    std::string optionText;
    for (const std::string &option : options)
      optionText += " " + option;
    return Status::error("NVRTC failed to compile " + name + " for " + arch + " (" + api.nvrtcGetErrorString(compiled) +
                         "; options:" + optionText + "):\n" + programLog);
  }
  if (log)
    *log = programLog;

  size_t size = 0;
  std::string result;
  if (out == NvrtcOutput::Cubin) {
    if (Status s = api.check(api.nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize"); !s.ok())
      return s;
    result.resize(size);
    if (Status s = api.check(api.nvrtcGetCUBIN(program, result.data()), "nvrtcGetCUBIN"); !s.ok())
      return s;
  } else {
    if (Status s = api.check(api.nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize"); !s.ok())
      return s;
    result.resize(size);
    if (Status s = api.check(api.nvrtcGetPTX(program, result.data()), "nvrtcGetPTX"); !s.ok())
      return s;
    if (!result.empty() && result.back() == '\0')
      result.pop_back();
  }
  if (!memoDir.empty())
    keepNvrtcMemo(memoDir, memoKey, {.output = result, .log = programLog});
  return result;
}

bool flashtile::reportsSerializedWgmma(const std::string &log) {
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos)
      end = log.size();
    const std::string line = log.substr(start, end - start);
    const size_t at = line.find("(C75");
    if (at != std::string::npos && line.size() >= at + 7 && line[at + 6] == ')' && line.substr(at + 4, 2) >= "10" &&
        line.substr(at + 4, 2) <= "29" && line.find("wgmma") != std::string::npos &&
        line.find("serialized") != std::string::npos)
      return true;
    start = end + 1;
  }
  return false;
}
