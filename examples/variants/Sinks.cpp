//===- Sinks.cpp - attention sinks: a learnable logit per head (gpt-oss) --===//
//
// Each query head h has one extra logit sinks[h] (fp32, shape (H), in the units of the scaled scores) that joins
// the softmax denominator of all its rows, and the LSE, but carries no value: O = Σ e^s·v / (Σ e^s + e^sink).
// A row that sees no key gets O = 0 and LSE = sinks[h].
//===----------------------------------------------------------------------===//
#include "Variants.h"

namespace flashtile::variants {

Variant sinks() {
  return Variant("sinks")
      .input("sinks", dsl::ElementKind::F32)
      .sink([](const dsl::HeadCoords &c, const dsl::Params &p) { return p.load("sinks", c.h); });
}

} // namespace flashtile::variants
