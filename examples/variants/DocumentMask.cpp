//===- DocumentMask.cpp - causal attention inside each packed document ----===//
//
// Several documents packed in one sequence. Packed documents are contiguous, so the variant takes, per token, the
// index of the first token of its document: doc_start of shape (B, Sk), int32, row-major, non-decreasing along a
// sequence, doc_start[b][t] <= t (positions within the sequence). With packed sequences (varlen) the same per key
// row of K: shape (total_k), sequence b's entries at [cu_seqlens_k[b], cu_seqlens_k[b + 1]). Query i, aligned to the bottom-right corner (i' = i + Sk - Sq; i' = i when
// Sq == Sk), is token i' of the sequence and sees key j iff doc_start[b][i'] <= j <= i'. No FlashAttention
// version offers this mask (varlen needs the documents unpacked); here it is a few lines. Because a document is
// a range of keys, the KV-range rules skip other documents' tiles and drop the mask inside a document: the mask
// is one load per row, and only tiles on a document's edge pay for it.
//===----------------------------------------------------------------------===//
#include "Variants.h"

namespace flashtile::variants {

namespace {
/// doc_start of token i' of this sequence (element key_offset + i'), i' clamped to a valid token: rows past
/// seqlen_q (the padding of the last Q tile) and queries before the first key (i' < 0) read a valid element; the
/// causal bound drops the latter, and the former are never stored.
dsl::Expr docStart(const dsl::Params &p, const dsl::Expr &aligned, const dsl::Sizes &sizes) {
  dsl::Expr sk = sizes.seqlenK;
  dsl::Expr token = dsl::min(dsl::max(aligned, aligned.literal(0)), sk - 1);
  return p.load("doc_start", sizes.keyOffset() + token);
}
} // namespace

Variant documentMask() {
  return Variant("document_mask")
      .input("doc_start", dsl::ElementKind::I32)
      .mask([](const dsl::Coords &c, const dsl::Params &p) {
        dsl::Expr i = c.qAligned();
        return c.kv <= i && c.kv >= docStart(p, i, c.sizes);
      })
      // Keys some row may see: from the first row's document start (starts never decrease) to the last row.
      .kvRange([](const dsl::QTile &q, const dsl::Params &p) {
        return dsl::Range{docStart(p, q.firstAligned(), q.sizes), q.lastAligned() + 1};
      })
      // Keys every row sees: from the last row's document start to the first row. Empty (lo > hi) when the rows
      // span documents; schedules clamp it.
      .fullRange([](const dsl::QTile &q, const dsl::Params &p) {
        return dsl::Range{docStart(p, q.lastAligned(), q.sizes), q.firstAligned() + 1};
      });
}

} // namespace flashtile::variants
