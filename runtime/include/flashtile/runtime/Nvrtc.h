// Nvrtc.h — compiling generated CUDA C++ to PTX or a cubin with NVRTC, loaded with dlopen at first use.
//
// NVRTC is not linked so that a binary built here runs where the toolkit lives elsewhere (or nowhere: then only
// compiling reports an error). <nvrtc.h> is included by the implementation for types only.
#ifndef FLASHTILE_RUNTIME_NVRTC_H
#define FLASHTILE_RUNTIME_NVRTC_H

#include "flashtile/runtime/Status.h"

#include <string>
#include <vector>

namespace flashtile {

enum class NvrtcOutput { Ptx, Cubin };

/// Compiles `source` (a self-contained translation unit: generated code has no host includes) for `arch`, a
/// target of the form sm_<NN>[a|f] such as sm_80, sm_90a, sm_100a. A cubin targets that SM; PTX targets the
/// matching virtual architecture (compute_<NN>[a|f]). `name` labels the program in NVRTC's diagnostics.
/// Options: --gpu-architecture, -std=c++17, -default-device (functions are __device__ unless marked), -minimal (no
/// texture, device-runtime or runtime-API declarations: generated code uses none, and NVRTC parses less), then
/// `extraOptions`; fast math is off unless asked for. On failure the message contains NVRTC's full log; on success
/// the log (ptxas's advisories, such as "(C7520) Potential Performance Loss: wgmma.mma_async instructions are
/// serialized") goes to `log` where given.
StatusOr<std::string> compileCuda(const std::string &source, const std::string &name, const std::string &arch,
                                  NvrtcOutput out, const std::vector<std::string> &extraOptions = {},
                                  std::string *log = nullptr);

/// Whether NVRTC's `log` reports that ptxas serialized a kernel's wgmma instructions (its C7510-C7529 performance
/// advisories: a silent loss of most of the tensor cores' overlap).
bool reportsSerializedWgmma(const std::string &log);

/// The loaded NVRTC's version, e.g. "13.0", or why NVRTC could not be loaded. NVRTC is looked for, at first use:
/// where FLASHTILE_NVRTC_PATH says (a libnvrtc.so* file or its directory; nowhere else when it is set), else by
/// soname through the loader (LD_LIBRARY_PATH, ld.so.cache), then in $CUDA_HOME and $CUDA_PATH (lib64, lib),
/// /usr/local/cuda/lib64 and the pip NVRTC wheels' folders (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib) under the
/// Python package directories: this library's own, $VIRTUAL_ENV's, $CONDA_PREFIX's, ~/.local's and the system's.
/// The error lists every place looked in.
StatusOr<std::string> nvrtcVersion();

/// The file NVRTC was loaded from (loading it if needed); empty when it could not be loaded.
std::string nvrtcLibraryPath();

/// The directories looked in after the loader's search path, in order, as the environment says now
/// (FLASHTILE_NVRTC_PATH aside): what the error lists and `flashtile info` shows.
std::vector<std::string> nvrtcSearchDirs();

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_NVRTC_H
