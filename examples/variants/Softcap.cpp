//===- Softcap.cpp - flash-attn's softcap: cap·tanh(s / cap) --------------===//
#include "Variants.h"

namespace flashtile::variants {

Variant softcap(float cap) {
  return Variant("softcap")
      .param("cap", cap)
      .validate([](const dsl::RuleParams &p) { return p["cap"] > 0 && dsl::isFinite(p["cap"]); },
                "a positive, finite number")
      // The scaled score, squashed into (-cap, cap) before masking and softmax. Multiplying by 1/cap (the same
      // for every score, so computed once per kernel) instead of dividing each score keeps one multi-function-unit
      // op per score off the GPU's critical path.
      .score([](dsl::Expr s, const dsl::Coords &, const dsl::Params &p) {
        dsl::Expr cap = p["cap"];
        return cap * dsl::tanh(s * (1.0 / cap));
      });
}

} // namespace flashtile::variants
