//===- Rule.cpp - rule text built by operators ----------------------------===//
#include "flashtile/dsl/Rule.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace flashtile::dsl {

namespace {
/// Every operation is parenthesized, so the text means what the C++ expression meant whatever the precedence.
Rule binary(const Rule &a, const char *op, const Rule &b) {
  return Rule::fromText("(" + a.text() + " " + op + " " + b.text() + ")");
}
Rule call(const char *name, const Rule &x) { return Rule::fromText(std::string(name) + "(" + x.text() + ")"); }
Rule call(const char *name, const Rule &a, const Rule &b) {
  return Rule::fromText(std::string(name) + "(" + a.text() + ", " + b.text() + ")");
}
} // namespace

Rule::Rule(double value) {
  if (!std::isfinite(value)) {
    // The grammar has no infinite or NaN literals; a text that cannot parse makes the rule's check report it.
    text_ = "nonfinite_literal";
    return;
  }
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), std::fabs(value));
  std::string digits(buffer, ec == std::errc() ? end : buffer);
  text_ = value < 0 ? "(-" + digits + ")" : digits;
}

Rule Rule::fromText(std::string text) {
  Rule rule;
  rule.text_ = std::move(text);
  return rule;
}

Rule operator+(const Rule &a, const Rule &b) { return binary(a, "+", b); }
Rule operator-(const Rule &a, const Rule &b) { return binary(a, "-", b); }
Rule operator*(const Rule &a, const Rule &b) { return binary(a, "*", b); }
Rule operator/(const Rule &a, const Rule &b) { return binary(a, "/", b); }
Rule operator-(const Rule &a) { return Rule::fromText("(-" + a.text() + ")"); }
Rule operator<(const Rule &a, const Rule &b) { return binary(a, "<", b); }
Rule operator<=(const Rule &a, const Rule &b) { return binary(a, "<=", b); }
Rule operator>(const Rule &a, const Rule &b) { return binary(a, ">", b); }
Rule operator>=(const Rule &a, const Rule &b) { return binary(a, ">=", b); }
Rule operator==(const Rule &a, const Rule &b) { return binary(a, "==", b); }
Rule operator!=(const Rule &a, const Rule &b) { return binary(a, "!=", b); }
Rule operator&&(const Rule &a, const Rule &b) { return binary(a, "&&", b); }
Rule operator||(const Rule &a, const Rule &b) { return binary(a, "||", b); }
Rule operator!(const Rule &a) { return Rule::fromText("(!" + a.text() + ")"); }
Rule isFinite(const Rule &x) { return call("isfinite", x); }
Rule isInteger(const Rule &x) { return call("isinteger", x); }
Rule abs(const Rule &x) { return call("abs", x); }
Rule floor(const Rule &x) { return call("floor", x); }
Rule min(const Rule &a, const Rule &b) { return call("min", a, b); }
Rule max(const Rule &a, const Rule &b) { return call("max", a, b); }

Rule RuleParams::operator[](const std::string &name) const {
  if (std::find(declared.begin(), declared.end(), name) == declared.end() &&
      std::find(unknown.begin(), unknown.end(), name) == unknown.end())
    unknown.push_back(name);
  return Rule::fromText(name);
}

} // namespace flashtile::dsl
