//===- Alibi.cpp - flash-attn's alibi_slopes ------------------------------===//
//
// score += -slope · |i + Sk - Sq - j|, with fp32 slopes per query head (H) or per (batch, query head) (B, H),
// read from the variant's input "slopes". The kernel does not know the array's length: the index below is what
// defines the shape the caller passes.
//===----------------------------------------------------------------------===//
#include "Variants.h"

namespace flashtile::variants {

Variant alibi(SlopeShape shape) {
  bool perBatch = shape == SlopeShape::BatchHeads;
  return Variant(perBatch ? "alibi_per_batch" : "alibi")
      .input("slopes", dsl::ElementKind::F32)
      .score([perBatch](dsl::Expr s, const dsl::Coords &c, const dsl::Params &p) {
        dsl::Expr slope = p.load("slopes", perBatch ? c.b * c.sizes.headsQ() + c.h : c.h);
        return s - slope * dsl::toFloat(dsl::abs(c.qAligned() - c.kv));
      });
}

int64_t alibiSlopeCount(SlopeShape shape, int batch, int headsQ) {
  return shape == SlopeShape::BatchHeads ? int64_t{batch} * headsQ : headsQ;
}

} // namespace flashtile::variants
