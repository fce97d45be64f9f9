//===- Variant.h - attention variants as DSL fragments --------------------===//
//
// A variant is what changes between attention flavours: a score modifier, a mask predicate, the KV-range rule
// that lets schedules skip tiles, and its numbers. It never mentions tiles, warps or instructions.
//
//   flashtile::Variant softcap(float cap) {
//     return flashtile::Variant("softcap").param("cap", cap).score(
//         [](dsl::Expr s, const dsl::Coords &, const dsl::Params &p) { return p["cap"] * dsl::tanh(s / p["cap"]); });
//   }
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_DSL_VARIANT_H
#define FLASHTILE_DSL_VARIANT_H

#include "flashtile/dsl/Expr.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashtile {
namespace dsl {

/// Sizes of the problem, read from the kernel arguments.
struct Sizes {
  Expr seqlenQ, seqlenK;
};

/// Where a score sits: batch, query head, query row and key index (all i32).
struct Coords {
  Expr b, h, q, kv;
  Sizes sizes;
  /// The query row aligned to the bottom-right corner (flash-attn >= 2.1): q + seqlen_k - seqlen_q.
  Expr qAligned() const { return q + sizes.seqlenK - sizes.seqlenQ; }
};

/// The rows of the Q tile a program instance owns (both ends inclusive, already clipped to seqlen_q).
struct QTile {
  Expr first, last;
  Sizes sizes;
  Expr firstAligned() const { return first + sizes.seqlenK - sizes.seqlenQ; }
  Expr lastAligned() const { return last + sizes.seqlenK - sizes.seqlenQ; }
};

/// A half-open key range [lo, hi). Schedules clamp it to [0, seqlen_k).
struct Range {
  Expr lo, hi;
  /// [0, hi)
  static Range upTo(const Expr &hi) { return Range{hi.literal(0), hi}; }
};

/// A variant's named numbers; `p["cap"]` reads one as an f32 kernel argument.
class Params {
public:
  explicit Params(std::function<Expr(const std::string &)> lookup) : lookup(std::move(lookup)) {}
  Expr operator[](const std::string &name) const { return lookup(name); }

private:
  std::function<Expr(const std::string &)> lookup;
};

using ScoreFn = std::function<Expr(Expr score, const Coords &, const Params &)>;
using MaskFn = std::function<Expr(const Coords &, const Params &)>;
using RangeFn = std::function<Range(const QTile &, const Params &)>;

} // namespace dsl

class Variant {
public:
  explicit Variant(std::string name) : name_(std::move(name)) {}

  /// Declares a number the hooks read as `p[name]`; its value is a kernel argument, so a new value reuses the
  /// compiled kernel.
  Variant &param(std::string name, float value);
  /// score -> new score, before masking (softcap, ALiBi, relative bias...).
  Variant &score(dsl::ScoreFn fn);
  /// (b, h, q, kv) -> keep? Masked scores do not take part in the softmax.
  Variant &mask(dsl::MaskFn fn);
  /// Keys any row of a Q tile may attend: tiles outside are skipped, never loaded.
  Variant &kvRange(dsl::RangeFn fn);
  /// Keys every row of a Q tile attends: tiles inside skip the mask. Without it, every visited tile is masked.
  Variant &fullRange(dsl::RangeFn fn);

  const std::string &name() const { return name_; }
  const std::vector<std::pair<std::string, float>> &params() const { return params_; }
  std::vector<float> paramValues() const;
  const dsl::ScoreFn &scoreFn() const { return score_; }
  const dsl::MaskFn &maskFn() const { return mask_; }
  const dsl::RangeFn &kvRangeFn() const { return kvRange_; }
  const dsl::RangeFn &fullRangeFn() const { return fullRange_; }

private:
  std::string name_;
  std::vector<std::pair<std::string, float>> params_;
  dsl::ScoreFn score_;
  dsl::MaskFn mask_;
  dsl::RangeFn kvRange_, fullRange_;
};

} // namespace flashtile

#endif // FLASHTILE_DSL_VARIANT_H
