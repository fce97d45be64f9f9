//===- CausalTopLeft.cpp - causal mask aligned to the top-left corner -----===//
#include "Variants.h"

namespace flashtile::variants {

Variant causalTopLeft() {
  return Variant("causal_top_left")
      // Query i sees keys 0..i, whatever the sequence lengths (flash-attn < 2.1, PyTorch's is_causal).
      .mask([](const dsl::Coords &c, const dsl::Params &) { return c.kv <= c.q; })
      .kvRange([](const dsl::QTile &q, const dsl::Params &) { return dsl::Range::upTo(q.last + 1); })
      .fullRange([](const dsl::QTile &q, const dsl::Params &) { return dsl::Range::upTo(q.first + 1); });
}

} // namespace flashtile::variants
