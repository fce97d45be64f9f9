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
/// Options: --gpu-architecture, -std=c++17, -default-device (functions are __device__ unless marked), then
/// `extraOptions`; fast math is off unless asked for. On failure the message contains NVRTC's full log.
StatusOr<std::string> compileCuda(const std::string &source, const std::string &name, const std::string &arch,
                                  NvrtcOutput out, const std::vector<std::string> &extraOptions = {});

/// The loaded NVRTC's version, e.g. "13.0", or why NVRTC could not be loaded.
StatusOr<std::string> nvrtcVersion();

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_NVRTC_H
