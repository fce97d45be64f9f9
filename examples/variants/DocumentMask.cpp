//===- DocumentMask.cpp - causal attention inside each packed document ----===//
//
// Several documents packed in one sequence, with an int32 document id per token: doc_ids of shape (B, Sk),
// row-major. Query i, aligned to the bottom-right corner (i' = i + Sk - Sq; i' = i when Sq == Sk), is token i'
// of the sequence and sees key j iff j <= i' and doc_ids[b][j] == doc_ids[b][i']. No FlashAttention version
// offers this mask (varlen needs the documents unpacked); here it is a few lines, and causal tile skipping
// still applies.
//===----------------------------------------------------------------------===//
#include "Variants.h"

namespace flashtile::variants {

Variant documentMask() {
  return Variant("document_mask")
      .input("doc_ids", dsl::ElementKind::I32)
      .mask([](const dsl::Coords &c, const dsl::Params &p) {
        dsl::Expr i = c.qAligned(), sk = c.sizes.seqlenK, row = c.b * sk;
        // Rows past seqlen_q (the padding of the last Q tile) and queries before the first key (i' < 0) are
        // clamped to a valid token: the causal test drops the latter, and the former are never stored.
        dsl::Expr token = dsl::min(dsl::max(i, i.literal(0)), sk - 1);
        return c.kv <= i && p.load("doc_ids", row + c.kv) == p.load("doc_ids", row + token);
      })
      .kvRange([](const dsl::QTile &q, const dsl::Params &) { return dsl::Range::upTo(q.lastAligned() + 1); });
}

} // namespace flashtile::variants
