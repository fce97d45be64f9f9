//===- Registry.cpp - built-in variants by name ---------------------------===//
#include "Variants.h"

#include <functional>
#include <utility>

namespace flashtile::variants {

namespace {
/// Every built-in variant, by the name the CLI and the runtime use. Numbers are defaults only: they are kernel
/// arguments (AttentionArgs::variantParams), so any value runs on the kernel built for the name.
const std::vector<std::pair<std::string, std::function<Variant()>>> &registry() {
  static const std::vector<std::pair<std::string, std::function<Variant()>>> entries = {
      {"none", full},
      {"causal", causal},
      {"causal_top_left", causalTopLeft},
      {"sliding_window", [] { return slidingWindow(256, 0); }},
      {"sliding_window_causal", [] { return slidingWindowCausal(256); }},
      {"softcap", [] { return softcap(30.f); }},
      {"softcap_causal", [] { return both(softcap(30.f), causal(), "softcap_causal"); }},
      {"alibi", [] { return alibi(SlopeShape::Heads); }},
      {"alibi_per_batch", [] { return alibi(SlopeShape::BatchHeads); }},
      {"alibi_causal", [] { return both(alibi(SlopeShape::Heads), causal(), "alibi_causal"); }},
      {"sinks", sinks},
      {"sinks_causal", [] { return both(sinks(), causal(), "sinks_causal"); }},
      {"document_mask", documentMask},
  };
  return entries;
}
} // namespace

std::optional<Variant> byName(const std::string &name) {
  for (const auto &[known, make] : registry())
    if (known == name)
      return make();
  return std::nullopt;
}

std::string checkInputLength(const std::string &variant, const std::string &input, int64_t count, int batch, int headsQ,
                             int seqlenK) {
  struct Shape {
    const char *text;
    int64_t elements;
  };
  std::optional<Shape> shape;
  const char *type = "fp32";
  if (input == "slopes" && (variant == "alibi" || variant == "alibi_causal"))
    shape = Shape{"(H)", alibiSlopeCount(SlopeShape::Heads, batch, headsQ)};
  else if (input == "slopes" && variant == "alibi_per_batch")
    shape = Shape{"(B, H)", alibiSlopeCount(SlopeShape::BatchHeads, batch, headsQ)};
  else if (input == "sinks" && (variant == "sinks" || variant == "sinks_causal"))
    shape = Shape{"(H)", headsQ};
  else if (input == "doc_start" && variant == "document_mask") {
    shape = Shape{"(B, Sk)", int64_t{batch} * seqlenK};
    type = "int32";
  }
  if (!shape)
    return "variant '" + variant + "' has no built-in input '" + input + "'";
  if (count == shape->elements)
    return "";
  return input + " has " + std::to_string(count) + " elements; variant '" + variant + "' reads " + type + " " + input +
         " of shape " + shape->text + " = " + std::to_string(shape->elements) + " elements";
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto &[name, make] : registry())
    out.push_back(name);
  return out;
}

} // namespace flashtile::variants
