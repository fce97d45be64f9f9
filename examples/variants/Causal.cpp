//===- Causal.cpp - causal mask aligned to the bottom-right corner --------===//
#include "Variants.h"

namespace flashtile::variants {

Variant causal() {
  return Variant("causal")
      // Query i (aligned: i + Sk - Sq) sees keys up to and including itself.
      .mask([](const dsl::Coords &c, const dsl::Params &) { return c.kv <= c.qAligned(); })
      // Keys past the tile's last aligned row are never attended: their tiles are skipped.
      .kvRange([](const dsl::QTile &q, const dsl::Params &) { return dsl::Range::upTo(q.lastAligned() + 1); })
      // Keys up to the tile's first aligned row are attended by every row: no mask there.
      .fullRange([](const dsl::QTile &q, const dsl::Params &) { return dsl::Range::upTo(q.firstAligned() + 1); });
}

} // namespace flashtile::variants
