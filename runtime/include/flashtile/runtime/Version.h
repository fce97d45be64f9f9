// Version.h — the compiler's identity. It goes into every JIT cache key, so a new build never reuses kernels
// that an older build generated.
#ifndef FLASHTILE_RUNTIME_VERSION_H
#define FLASHTILE_RUNTIME_VERSION_H

#include <string_view>

namespace flashtile {

/// "<project version>+<git revision>+src.<hash of the compiler's sources>", e.g.
/// "0.1.0+1a2b3c4d5e6f+src.0123456789abcdef": the hash changes with any edit, committed or not.
std::string_view compilerVersion();

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_VERSION_H
