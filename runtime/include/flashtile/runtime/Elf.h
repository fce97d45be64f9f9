// Elf.h — what the runtime reads from a cubin without a GPU: its target SM and its kernel symbols.
//
// A kernel library is checked when it is loaded, not when a kernel first launches: a cubin for another GPU, a
// truncated or foreign file, or one that lacks the manifest's entry is rejected with the file's name and the
// reason, on a machine with or without a driver. The reader is bounds-checked throughout: any byte string gives
// a result or an error, never an out-of-bounds read.
#ifndef FLASHTILE_RUNTIME_ELF_H
#define FLASHTILE_RUNTIME_ELF_H

#include "flashtile/runtime/Status.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

/// The parts of a CUDA ELF image (a cubin) the runtime checks.
struct CubinInfo {
  int smVersion = 0;                  // the SM it was compiled for: 80 (sm_80), 90 (sm_90 and sm_90a), 100, ...
  std::vector<std::string> functions; // defined global function symbols: the kernels' entry names
};

/// Parses `bytes` as a cubin: a 64-bit little-endian ELF image for EM_CUDA whose program headers, segments, section
/// and symbol tables lie inside the image. The SM version comes from e_flags (bits 0-7 for the ELF ABI version 7 that
/// CUDA 12 writes, bits 8-15 for version 8, CUDA 12.8+ and 13). The error says what is wrong ("truncated", "not an ELF
/// image", ...).
StatusOr<CubinInfo> readCubin(std::string_view bytes);

/// The SM version a target name stands for: "sm_80" -> 80, "sm_90a" -> 90, "sm_100a" -> 100; nothing for other
/// spellings.
std::optional<int> smVersionOfArch(std::string_view arch);

/// Ok when `bytes` is a cubin compiled for `arch` that defines the global function `entry`; else why not.
Status checkCubin(std::string_view bytes, std::string_view arch, std::string_view entry);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_ELF_H
