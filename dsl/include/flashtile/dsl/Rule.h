//===- Rule.h - host-side rules for a variant's numbers -------------------===//
//
// A variant's numbers (a window size, a cap) are kernel arguments: a new value reuses the compiled kernel, so no
// compiler sees it. Their rules are written like the hooks, as expressions over `p[name]`, but they are recorded as
// text (ParamRule) that every kernel carries in its KernelInfo, and the runtime evaluates them at each call, for
// ahead-of-time kernels too:
//
//   Variant("softcap").param("cap", cap)
//       .validate([](const dsl::RuleParams &p) { return p["cap"] > 0 && dsl::isFinite(p["cap"]); },
//                 "a positive, finite number")
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_DSL_RULE_H
#define FLASHTILE_DSL_RULE_H

#include <functional>
#include <string>
#include <vector>

namespace flashtile::dsl {

/// A number or condition over a variant's parameters, as rule text (the grammar of runtime/ParamRule.h).
class Rule {
public:
  /// A literal number.
  Rule(double value);
  /// Text in the rule grammar; the operators and functions below build it.
  static Rule fromText(std::string text);
  const std::string &text() const { return text_; }

private:
  Rule() = default;
  std::string text_;
};

Rule operator+(const Rule &a, const Rule &b);
Rule operator-(const Rule &a, const Rule &b);
Rule operator*(const Rule &a, const Rule &b);
Rule operator/(const Rule &a, const Rule &b);
Rule operator-(const Rule &a);
Rule operator<(const Rule &a, const Rule &b);
Rule operator<=(const Rule &a, const Rule &b);
Rule operator>(const Rule &a, const Rule &b);
Rule operator>=(const Rule &a, const Rule &b);
Rule operator==(const Rule &a, const Rule &b);
Rule operator!=(const Rule &a, const Rule &b);
Rule operator&&(const Rule &a, const Rule &b);
Rule operator||(const Rule &a, const Rule &b);
Rule operator!(const Rule &a);
/// Conditions: x is finite; x is finite and whole.
Rule isFinite(const Rule &x);
Rule isInteger(const Rule &x);
/// Numbers.
Rule abs(const Rule &x);
Rule floor(const Rule &x);
Rule min(const Rule &a, const Rule &b);
Rule max(const Rule &a, const Rule &b);

/// The variant's parameters as a rule reads them: `p["left"]`. A name the variant does not declare is recorded
/// and reported when the variant is checked (Variant::checkParams), naming the rule.
class RuleParams {
public:
  explicit RuleParams(std::vector<std::string> declared) : declared(std::move(declared)) {}
  Rule operator[](const std::string &name) const;
  /// Names read that the variant does not declare.
  const std::vector<std::string> &unknownNames() const { return unknown; }

private:
  std::vector<std::string> declared;
  mutable std::vector<std::string> unknown;
};

/// A rule over the parameters: true for the values the variant accepts.
using RuleFn = std::function<Rule(const RuleParams &)>;

} // namespace flashtile::dsl

#endif // FLASHTILE_DSL_RULE_H
