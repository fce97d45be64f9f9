// ArchNames.h — the architecture names users may write, and the kernel arch each one means. One table for the
// compiler (codegen/common/TargetRegistry.cpp: tile-lower-to-target, the CLI) and the runtime's tools (`flashtile
// info`): sm_80, sm_86, sm_87 and sm_89 build sm_80 kernels (one cubin runs on every 8.x GPU, and the runtime
// dispatches 8.x GPUs to it); sm_90 is sm_90a and sm_100 is sm_100a (the `a` features, wgmma and tcgen05, run
// only on exactly that GPU, which is the one the runtime dispatches those kernels to).
#ifndef FLASHTILE_RUNTIME_ARCHNAMES_H
#define FLASHTILE_RUNTIME_ARCHNAMES_H

#include <array>
#include <string_view>

namespace flashtile {

struct ArchAlias {
  std::string_view name, canonical; ///< canonical: one of kSupportedArchs (KernelInfo.h)
};
inline constexpr std::array<ArchAlias, 8> kArchAliases = {{{"sm_80", "sm_80"},
                                                           {"sm_86", "sm_80"},
                                                           {"sm_87", "sm_80"},
                                                           {"sm_89", "sm_80"},
                                                           {"sm_90", "sm_90a"},
                                                           {"sm_90a", "sm_90a"},
                                                           {"sm_100", "sm_100a"},
                                                           {"sm_100a", "sm_100a"}}};

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_ARCHNAMES_H
