//===- Registry.cpp - built-in variants by name ---------------------------===//
#include "Variants.h"

namespace flashtile::variants {

std::optional<Variant> byName(const std::string &name) {
  if (name == "none")
    return full();
  if (name == "causal")
    return causal();
  return std::nullopt;
}

std::vector<std::string> names() { return {"none", "causal"}; }

} // namespace flashtile::variants
