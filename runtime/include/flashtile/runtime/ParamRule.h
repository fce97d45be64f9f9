// ParamRule.h — a variant's rules for its numbers, kept with every kernel built for it.
//
// A rule is a small expression over the variant's parameter names that must hold for the values of a call, e.g.
//   isinteger(left) && left >= -1 && left <= 16777216     "a whole number from -1 (unbounded) to 16777216"
// The DSL writes it (Variant::validate), the compiler stores it in the kernel's KernelInfo (manifests and cache
// entries), and the runtime evaluates it at every call, for ahead-of-time kernels too, without the compiler.
//
// Grammar (C precedence; values are doubles, and the rule as a whole is a condition):
//   rule    := or
//   or      := and ('||' and)*          and := compare ('&&' compare)*
//   compare := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?
//   sum     := product (('+' | '-') product)*     product := unary (('*' | '/') unary)*
//   unary   := ('-' | '!') unary | number | name | name '(' rule (',' rule)* ')' | '(' rule ')'
// Functions: isfinite(x), isinteger(x) (finite and whole): conditions; abs(x), floor(x), min(x, y), max(x, y):
// numbers. Conditions and numbers do not mix (`cap && 1` is an error), and comparisons with NaN are false, so
// `cap > 0` already refuses NaN.
#ifndef FLASHTILE_RUNTIME_PARAMRULE_H
#define FLASHTILE_RUNTIME_PARAMRULE_H

#include "flashtile/runtime/Status.h"

#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

struct ParamRule {
  std::string expr;     // the condition accepted values satisfy (grammar above)
  std::string accepted; // the accepted values in words, for error messages; may be empty

  bool operator==(const ParamRule &) const = default;
};

/// Ok when `rule.expr` parses, is a condition and reads only names in `params`, and `rule.accepted` is printable
/// ASCII without '"' or ';' (the manifest's delimiters); else the message says what is wrong and where.
Status verifyParamRule(const ParamRule &rule, const std::vector<std::string> &params);

/// Checks `values` (one per name in `params`, in order) against every rule. The error names the variant, the
/// parameters the first failing rule reads with their values, and the accepted values, e.g.
/// "variant 'sliding_window': left = 2.5 is not accepted; accepted: a whole number from -1 (unbounded) to 16777216".
Status checkParamRules(std::string_view variant, const std::vector<ParamRule> &rules,
                       const std::vector<std::string> &params, const std::vector<float> &values);

/// The manifest form: `expr "accepted"` per rule, joined by "; " (empty for no rules).
std::string serializeParamRules(const std::vector<ParamRule> &rules);
/// Parses serializeParamRules' form (each rule's syntax is checked by verifyParamRule, not here).
StatusOr<std::vector<ParamRule>> parseParamRules(std::string_view text);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_PARAMRULE_H
