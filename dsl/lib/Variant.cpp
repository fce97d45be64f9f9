//===- Variant.cpp --------------------------------------------------------===//
#include "flashtile/dsl/Variant.h"

namespace flashtile {

Variant &Variant::param(std::string name, float value) {
  for (auto &[existing, v] : params_)
    if (existing == name) {
      v = value;
      return *this;
    }
  params_.emplace_back(std::move(name), value);
  return *this;
}

Variant &Variant::score(dsl::ScoreFn fn) {
  score_ = std::move(fn);
  return *this;
}
Variant &Variant::mask(dsl::MaskFn fn) {
  mask_ = std::move(fn);
  return *this;
}
Variant &Variant::kvRange(dsl::RangeFn fn) {
  kvRange_ = std::move(fn);
  return *this;
}
Variant &Variant::fullRange(dsl::RangeFn fn) {
  fullRange_ = std::move(fn);
  return *this;
}

std::vector<float> Variant::paramValues() const {
  std::vector<float> values;
  for (const auto &[name, value] : params_)
    values.push_back(value);
  return values;
}

} // namespace flashtile
