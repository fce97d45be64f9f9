//===- SlidingWindow.cpp - flash-attn's window_size = (left, right) -------===//
//
// Query i, aligned to the bottom-right corner (i' = i + Sk - Sq), sees keys [i' - left, i' + right]; -1 leaves
// that side unbounded. The sizes are kernel parameters, so every window shares one kernel. Parameters are f32
// kernel arguments: the hooks turn them into integers with dsl::toInt (sizes are whole numbers, exact in f32 up
// to 2^24).
//===----------------------------------------------------------------------===//
#include "Variants.h"

namespace flashtile::variants {

namespace {
constexpr float kMaxWindow = 1 << 24; // every integer up to here is exact in f32
constexpr const char *kWindowSideAccepted = "a whole number from -1 (unbounded) to 16777216";

/// One side of the window: -1 (unbounded) or a whole number of keys.
dsl::Rule windowSide(const dsl::Rule &side) { return dsl::isInteger(side) && side >= -1 && side <= kMaxWindow; }
} // namespace

Variant slidingWindow(int left, int right) {
  return Variant("sliding_window")
      .param("left", static_cast<float>(left))
      .param("right", static_cast<float>(right))
      .validate([](const dsl::RuleParams &p) { return windowSide(p["left"]); }, kWindowSideAccepted)
      .validate([](const dsl::RuleParams &p) { return windowSide(p["right"]); }, kWindowSideAccepted)
      .mask([](const dsl::Coords &c, const dsl::Params &p) {
        dsl::Expr i = c.qAligned(), left = dsl::toInt(p["left"]), right = dsl::toInt(p["right"]);
        return (left < 0 || c.kv >= i - left) && (right < 0 || c.kv <= i + right);
      })
      // Keys some row of the tile may see: from the first row's window start to the last row's window end.
      // Tiles outside are skipped, not masked.
      .kvRange([](const dsl::QTile &q, const dsl::Params &p) {
        dsl::Expr left = dsl::toInt(p["left"]), right = dsl::toInt(p["right"]);
        return dsl::Range{dsl::select(left < 0, left.literal(0), q.firstAligned() - left),
                          dsl::select(right < 0, q.sizes.seqlenK, q.lastAligned() + right + 1)};
      })
      // Keys every row sees: from the last row's window start to the first row's window end; no mask there.
      .fullRange([](const dsl::QTile &q, const dsl::Params &p) {
        dsl::Expr left = dsl::toInt(p["left"]), right = dsl::toInt(p["right"]);
        return dsl::Range{dsl::select(left < 0, left.literal(0), q.lastAligned() - left),
                          dsl::select(right < 0, q.sizes.seqlenK, q.firstAligned() + right + 1)};
      });
}

Variant slidingWindowCausal(int left) {
  Variant window = slidingWindow(left, -1);
  return both(window, causal(), "sliding_window_causal");
}

} // namespace flashtile::variants
