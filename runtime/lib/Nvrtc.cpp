// Nvrtc.cpp — dlopen of libnvrtc and one compile call.
#include "flashtile/runtime/Nvrtc.h"

#include <nvrtc.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>

using namespace flashtile;

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

/// The sonames to try, newest first, then the same names in toolkit directories that may not be on the loader's
/// search path.
std::vector<std::string> libraryCandidates() {
  const std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> candidates = names;
  std::vector<std::string> dirs;
  if (const char *cudaHome = std::getenv("CUDA_HOME"); cudaHome && *cudaHome)
    dirs.push_back(std::string(cudaHome) + "/lib64/");
  dirs.push_back("/usr/local/cuda/lib64/");
  for (const std::string &dir : dirs)
    for (const std::string &name : names)
      candidates.push_back(dir + name);
  return candidates;
}

Status loadNvrtc(NvrtcApi &api) {
  void *library = nullptr;
  std::string tried;
  std::string lastError;
  for (const std::string &candidate : libraryCandidates()) {
    library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library)
      break;
    tried += (tried.empty() ? "" : ", ") + candidate;
    const char *reason = dlerror();
    lastError = reason ? reason : "unknown reason";
  }
  if (!library)
    return Status::error("NVRTC could not be loaded (tried " + tried + "; last error: " + lastError +
                         "); install the CUDA toolkit (12.8 or newer) or set CUDA_HOME to it");
#define FLASHTILE_RESOLVE_NVRTC_FUNCTION(name)                                                                         \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, #name));                                              \
  if (!api.name)                                                                                                       \
    return Status::error("the loaded NVRTC does not export " #name "; it is too old for flashtile");
  FLASHTILE_NVRTC_FUNCTIONS(FLASHTILE_RESOLVE_NVRTC_FUNCTION)
#undef FLASHTILE_RESOLVE_NVRTC_FUNCTION
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
    return Status::error("arch '" + arch + "' is not a target of the form sm_<NN>[a|f] (e.g. sm_80, sm_90a, sm_100a)");
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
                                             const std::vector<std::string> &extraOptions) {
  StatusOr<std::string> target = gpuArchitecture(arch, out);
  if (!target.ok())
    return target.status();
  StatusOr<const NvrtcApi *> loaded = nvrtc();
  if (!loaded.ok())
    return loaded.status();
  const NvrtcApi &api = **loaded;

  nvrtcProgram program = nullptr;
  if (Status s = api.check(api.nvrtcCreateProgram(&program, source.c_str(), name.c_str(), 0, nullptr, nullptr),
                           "nvrtcCreateProgram");
      !s.ok())
    return s;
  ProgramGuard guard(api, program);

  std::vector<std::string> options = {"--gpu-architecture=" + *target, "-std=c++17", "-default-device"};
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  std::vector<const char *> optionPointers;
  for (const std::string &option : options)
    optionPointers.push_back(option.c_str());

  nvrtcResult compiled =
      api.nvrtcCompileProgram(program, static_cast<int>(optionPointers.size()), optionPointers.data());
  if (compiled != NVRTC_SUCCESS) {
    std::string log;
    size_t logSize = 0;
    if (api.nvrtcGetProgramLogSize(program, &logSize) == NVRTC_SUCCESS && logSize > 1) {
      log.resize(logSize);
      if (api.nvrtcGetProgramLog(program, log.data()) != NVRTC_SUCCESS)
        log = "(NVRTC's log could not be read)";
      else
        log.resize(logSize - 1); // drop the terminating NUL
    }
    std::string optionText;
    for (const std::string &option : options)
      optionText += " " + option;
    return Status::error("NVRTC failed to compile " + name + " for " + arch + " (" + api.nvrtcGetErrorString(compiled) +
                         "; options:" + optionText + "):\n" + log);
  }

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
  return result;
}
