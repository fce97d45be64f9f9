//===- Variant.h - attention variants as DSL fragments --------------------===//
//
// A variant is what changes between attention flavours: a score modifier, a mask predicate, the KV-range rule
// that lets schedules skip tiles, an attention sink, its numbers and extra input arrays. It never mentions tiles,
// warps or instructions.
//
//   flashtile::Variant softcap(float cap) {
//     return flashtile::Variant("softcap").param("cap", cap).score(
//         [](dsl::Expr s, const dsl::Coords &, const dsl::Params &p) { return p["cap"] * dsl::tanh(s / p["cap"]); });
//   }
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_DSL_VARIANT_H
#define FLASHTILE_DSL_VARIANT_H

#include "flashtile/dsl/Expr.h"
#include "flashtile/dsl/Rule.h"
#include "flashtile/runtime/ParamRule.h"
#include "flashtile/runtime/Status.h"

#include <functional>
#include <map>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

namespace flashtile {
namespace dsl {

/// Sizes of the problem, read from the kernel arguments.
struct Sizes {
  Expr seqlenQ, seqlenK;
  /// The other sizes (tile.dim batch, "heads_q", "heads_kv"), read where a hook asks for them.
  Expr batch() const;
  Expr headsQ() const;
  Expr headsKv() const;
  /// The row of this sequence's first key among all sequences' keys (tile.dim key_offset): b·seqlen_k dense,
  /// cu_seqlens_k[b] varlen. Index per-key inputs with keyOffset() + kv to accept both layouts (kv is always a key
  /// of the sequence there: kernels pass a tile's padding keys as the last key).
  Expr keyOffset() const;
};

/// Where a score sits: batch, query head, query row and key index (all i32).
struct Coords {
  Expr b, h, q, kv;
  Sizes sizes;
  /// The query row aligned to the bottom-right corner (flash-attn >= 2.1): q + seqlen_k - seqlen_q.
  Expr qAligned() const { return q + sizes.seqlenK - sizes.seqlenQ; }
};

/// The rows of the Q tile a program instance owns (both ends inclusive, already clipped to seqlen_q), and the
/// batch entry and query head it works on (for rules that read per-batch or per-head inputs).
struct QTile {
  Expr first, last;
  Expr b, h;
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

/// A batch and query head: what a sink sees (the sink is the same for every row of the head).
struct HeadCoords {
  Expr b, h;
  Sizes sizes;
};

/// Element types of a variant's extra inputs (device arrays).
enum class ElementKind { F32, I32 };

/// A variant's named numbers and extra inputs: `p["cap"]` reads a number (an f32 kernel argument),
/// `p.load("slopes", c.h)` reads element `index` of an input array declared with Variant::input.
class Params {
public:
  using Lookup = std::function<Expr(const std::string &)>;
  using Loader = std::function<Expr(const std::string &, const Expr &)>;
  explicit Params(Lookup lookup, Loader loader = nullptr) : lookup(std::move(lookup)), loader(std::move(loader)) {}
  Expr operator[](const std::string &name) const { return lookup(name); }
  /// Element `index` (an i32 expression) of input `name`, of the type the input was declared with. The kernel
  /// does not know the array's length: the index the hook computes defines the shape the caller must provide
  /// (e.g. `c.h` reads an (H) array, `c.b * heads + c.h` a (B, H) one). Hooks also see the padding of partial
  /// tiles (rows past seqlen_q; in score modifiers, keys past seqlen_k): clamp indices built from q or kv.
  Expr load(const std::string &name, const Expr &index) const { return loader(name, index); }

private:
  Lookup lookup;
  Loader loader;
};

using ScoreFn = std::function<Expr(Expr score, const Coords &, const Params &)>;
using MaskFn = std::function<Expr(const Coords &, const Params &)>;
using RangeFn = std::function<Range(const QTile &, const Params &)>;
using SinkFn = std::function<Expr(const HeadCoords &, const Params &)>;
/// A check of parameter values by name in C++: returns an error message naming the parameter, or "" when they
/// are valid. Only the JIT runs it (it is code, not data): ahead-of-time kernels cannot apply it, so prefer rules
/// (Variant::validate with a RuleFn), which every kernel carries.
using ValidateFn = std::function<std::string(const std::map<std::string, float> &)>;

} // namespace dsl

/// Names: a variant's is [A-Za-z_] then [A-Za-z0-9_.-], a parameter's or input's a C identifier, each at most
/// 128 characters (they are printed into generated code and manifests). A name outside its alphabet is not used:
/// the variant records the error with the caller's file and line, and building its program (or Jit::add) fails
/// with it.
class Variant {
public:
  explicit Variant(std::string name, std::source_location where = std::source_location::current());

  /// Declares a number the hooks read as `p[name]`; its value is a kernel argument, so a new value reuses the
  /// compiled kernel.
  Variant &param(std::string name, float value, std::source_location where = std::source_location::current());
  /// score -> new score, before masking (softcap, ALiBi, relative bias...).
  Variant &score(dsl::ScoreFn fn, std::source_location where = std::source_location::current());
  /// (b, h, q, kv) -> keep? Masked scores do not take part in the softmax.
  Variant &mask(dsl::MaskFn fn, std::source_location where = std::source_location::current());
  /// Keys any row of a Q tile may attend: tiles outside are skipped, never loaded.
  Variant &kvRange(dsl::RangeFn fn, std::source_location where = std::source_location::current());
  /// Keys every row of a Q tile attends: tiles inside skip the mask. Without it, every visited tile is masked.
  Variant &fullRange(dsl::RangeFn fn, std::source_location where = std::source_location::current());
  /// Declares a device array the hooks read with `p.load(name, index)`. Its pointer is a kernel argument
  /// (AttentionArgs::inputs, in declaration order); its shape is whatever the hooks' indices reach.
  Variant &input(std::string name, dsl::ElementKind kind,
                 std::source_location where = std::source_location::current());
  /// (b, h) -> an attention sink: a logit, in the units of the scaled scores, that joins the softmax denominator
  /// of every row of head h (and its LSE) but contributes no value: O = Σ e^s·v / (Σ e^s + e^sink).
  Variant &sink(dsl::SinkFn fn, std::source_location where = std::source_location::current());
  /// A rule the parameters' values must satisfy (a window size >= -1, a positive cap, ...), and the accepted
  /// values in words for error messages (printable ASCII without '"' or ';'). Building the program rejects invalid
  /// declared values; every kernel carries the rules (KernelInfo::paramRules), so the runtime rejects invalid
  /// values at every call, naming the parameter, for JIT and ahead-of-time kernels alike.
  Variant &validate(dsl::RuleFn rule, std::string accepted);
  /// A C++ check the JIT runs at every call (see ValidateFn: ahead-of-time kernels cannot apply it).
  Variant &validate(dsl::ValidateFn fn);

  const std::string &name() const { return name_; }
  const std::vector<std::pair<std::string, float>> &params() const { return params_; }
  std::vector<float> paramValues() const;
  const std::vector<std::pair<std::string, dsl::ElementKind>> &inputs() const { return inputs_; }
  const dsl::ScoreFn &scoreFn() const { return score_; }
  const dsl::MaskFn &maskFn() const { return mask_; }
  const dsl::RangeFn &kvRangeFn() const { return kvRange_; }
  const dsl::RangeFn &fullRangeFn() const { return fullRange_; }
  const dsl::SinkFn &sinkFn() const { return sink_; }
  const std::vector<dsl::ValidateFn> &validators() const { return validators_; }
  /// Where each hook was given (score, mask, kvRange, fullRange, sink): a misuse of the DSL inside a hook (mixing
  /// f32 and i32, a non-predicate where a predicate belongs) is reported at that line of the user's code.
  struct HookSites {
    std::source_location score, mask, kvRange, fullRange, sink;
  };
  const HookSites &hookSites() const { return sites_; }
  const std::vector<std::pair<dsl::RuleFn, std::string>> &ruleFns() const { return rules_; }
  /// The rules as the kernels carry them, each checked (it parses and reads only declared parameters); the
  /// error names the rule.
  StatusOr<std::vector<ParamRule>> paramRules() const;
  /// The first misuse of the declarations (a name outside its alphabet), "<file>:<line>: ..." of the call; ""
  /// when there is none.
  const std::string &declarationError() const { return declarationError_; }
  /// "" when the declarations are sound and `values` (one per declared parameter, in order) pass every rule and
  /// validate hook, else the first message.
  std::string checkParams(const std::vector<float> &values) const;

private:
  std::string name_;
  std::vector<std::pair<std::string, float>> params_;
  std::vector<std::pair<std::string, dsl::ElementKind>> inputs_;
  dsl::ScoreFn score_;
  dsl::MaskFn mask_;
  dsl::RangeFn kvRange_, fullRange_;
  dsl::SinkFn sink_;
  std::vector<dsl::ValidateFn> validators_;
  HookSites sites_;
  std::vector<std::pair<dsl::RuleFn, std::string>> rules_;
  std::string declarationError_;
  void misuse(const std::source_location &where, const std::string &what);
  friend Variant both(const Variant &a, const Variant &b, std::string name, std::source_location where);
};

/// `a` and `b` at once: a key is kept when both keep it (masks ANDed, "may" and "full" ranges intersected), the
/// score goes through a's modifier then b's, parameters and inputs are the union (a name both declare is one
/// value, so it must mean the same to both), the sink is a's, else b's. E.g. both(slidingWindow, causal).
Variant both(const Variant &a, const Variant &b, std::string name,
             std::source_location where = std::source_location::current());

} // namespace flashtile

#endif // FLASHTILE_DSL_VARIANT_H
