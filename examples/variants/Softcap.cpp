//===- Softcap.cpp - flash-attn's softcap: cap·tanh(s / cap) --------------===//
#include "Variants.h"

#include <cmath>
#include <sstream>

namespace flashtile::variants {

Variant softcap(float cap) {
  return Variant("softcap")
      .param("cap", cap)
      .validate([](const std::map<std::string, float> &v) -> std::string {
        float cap = v.at("cap");
        if (std::isfinite(cap) && cap > 0)
          return "";
        std::ostringstream message;
        message << "softcap cap is " << cap << "; it must be positive and finite";
        return message.str();
      })
      // The scaled score, squashed into (-cap, cap) before masking and softmax.
      .score([](dsl::Expr s, const dsl::Coords &, const dsl::Params &p) { return p["cap"] * dsl::tanh(s / p["cap"]); });
}

} // namespace flashtile::variants
