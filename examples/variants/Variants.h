//===- Variants.h - attention variants written with the public DSL --------===//
//
// Each variant is a few lines in its own file: the same hooks a user writes. None touches a kernel or schedule.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_EXAMPLES_VARIANTS_H
#define FLASHTILE_EXAMPLES_VARIANTS_H

#include "flashtile/dsl/Variant.h"

#include <optional>
#include <string>
#include <vector>

namespace flashtile::variants {

/// Plain softmax(Q·Kᵀ·scale)·V: every query attends every key.
Variant full();
/// Causal, aligned to the bottom-right corner as flash-attn >= 2.1: query i sees keys j <= i + Sk - Sq.
Variant causal();

/// The built-in variants by name ("none", "causal"), for the CLI and the runtime's variant names.
std::optional<Variant> byName(const std::string &name);
std::vector<std::string> names();

} // namespace flashtile::variants

#endif // FLASHTILE_EXAMPLES_VARIANTS_H
