//===- Variant.cpp --------------------------------------------------------===//
#include "flashtile/dsl/Variant.h"

#include "passes/IR/TileNames.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace flashtile {

namespace {
/// `name` quoted with quotes, backslashes and unprintable bytes escaped: the message shows what was passed.
std::string quotedName(const std::string &name) {
  std::string text = "\"";
  llvm::raw_string_ostream os(text);
  llvm::printEscapedString(name, os);
  os << "\"";
  return text;
}
} // namespace

void Variant::misuse(const std::source_location &where, const std::string &what) {
  if (declarationError_.empty())
    declarationError_ = std::string(where.file_name()) + ":" + std::to_string(where.line()) + ": " + what;
}

Variant::Variant(std::string name, std::source_location where) : name_(std::move(name)) {
  if (!tile::isVariantName(name_))
    misuse(where, "variant name " + quotedName(name_) + " is not accepted: [A-Za-z_] then [A-Za-z0-9_.-], at most " +
                      std::to_string(tile::kMaxNameLength) + " characters");
}

Variant &Variant::param(std::string name, float value, std::source_location where) {
  if (!tile::isIdentifierName(name))
    misuse(where, "variant '" + name_ + "': parameter name " + quotedName(name) +
                      " is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most " +
                      std::to_string(tile::kMaxNameLength) + " characters)");
  for (auto &[existing, v] : params_)
    if (existing == name) {
      v = value;
      return *this;
    }
  params_.emplace_back(std::move(name), value);
  return *this;
}

Variant &Variant::score(dsl::ScoreFn fn, std::source_location where) {
  score_ = std::move(fn);
  sites_.score = where;
  return *this;
}
Variant &Variant::mask(dsl::MaskFn fn, std::source_location where) {
  mask_ = std::move(fn);
  sites_.mask = where;
  return *this;
}
Variant &Variant::kvRange(dsl::RangeFn fn, std::source_location where) {
  kvRange_ = std::move(fn);
  sites_.kvRange = where;
  return *this;
}
Variant &Variant::fullRange(dsl::RangeFn fn, std::source_location where) {
  fullRange_ = std::move(fn);
  sites_.fullRange = where;
  return *this;
}

Variant &Variant::input(std::string name, dsl::ElementKind kind, std::source_location where) {
  if (!tile::isIdentifierName(name))
    misuse(where, "variant '" + name_ + "': input name " + quotedName(name) +
                      " is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most " +
                      std::to_string(tile::kMaxNameLength) + " characters)");
  for (auto &[existing, k] : inputs_)
    if (existing == name) {
      k = kind;
      return *this;
    }
  inputs_.emplace_back(std::move(name), kind);
  return *this;
}
Variant &Variant::sink(dsl::SinkFn fn, std::source_location where) {
  sink_ = std::move(fn);
  sites_.sink = where;
  return *this;
}
Variant &Variant::validate(dsl::ValidateFn fn) {
  validators_.push_back(std::move(fn));
  return *this;
}
Variant &Variant::validate(dsl::RuleFn rule, std::string accepted) {
  rules_.emplace_back(std::move(rule), std::move(accepted));
  return *this;
}

StatusOr<std::vector<ParamRule>> Variant::paramRules() const {
  std::vector<std::string> names;
  for (const auto &[name, value] : params_)
    names.push_back(name);
  std::vector<ParamRule> rules;
  for (const auto &[fn, accepted] : rules_) {
    // Traced like the hooks: the lambda runs once, on parameter names instead of values.
    dsl::RuleParams p(names);
    ParamRule rule{fn ? fn(p).text() : std::string(), accepted};
    if (!p.unknownNames().empty())
      return Status::error("variant '" + name_ + "': a validate rule reads '" + p.unknownNames().front() +
                           "', which is not a declared parameter");
    if (Status s = verifyParamRule(rule, names); !s.ok())
      return s.withContext("variant '" + name_ + "'");
    rules.push_back(std::move(rule));
  }
  return rules;
}

std::vector<float> Variant::paramValues() const {
  std::vector<float> values;
  for (const auto &[name, value] : params_)
    values.push_back(value);
  return values;
}

std::string Variant::checkParams(const std::vector<float> &values) const {
  if (!declarationError_.empty())
    return declarationError_;
  if (values.size() != params_.size())
    return "variant '" + name_ + "' takes " + std::to_string(params_.size()) + " parameters, got " +
           std::to_string(values.size());
  StatusOr<std::vector<ParamRule>> rules = paramRules();
  if (!rules.ok())
    return rules.status().message();
  std::vector<std::string> names;
  for (const auto &[name, value] : params_)
    names.push_back(name);
  if (Status s = checkParamRules(name_, *rules, names, values); !s.ok())
    return s.message();
  std::map<std::string, float> byName;
  for (size_t i = 0; i < values.size(); ++i)
    byName[params_[i].first] = values[i];
  for (const dsl::ValidateFn &fn : validators_)
    if (std::string error = fn(byName); !error.empty())
      return "variant '" + name_ + "': " + error;
  return "";
}

namespace {
/// What a rule-less variant means (see buildAttentionProgram): every key may be attended; every key is fully
/// attended unless there is a mask.
dsl::Range allKeys(const dsl::QTile &q) { return dsl::Range::upTo(q.sizes.seqlenK); }
dsl::Range noKeys(const dsl::QTile &q) { return dsl::Range::upTo(q.sizes.seqlenK.literal(0)); }

dsl::Range intersect(const dsl::Range &x, const dsl::Range &y) {
  return dsl::Range{dsl::max(x.lo, y.lo), dsl::min(x.hi, y.hi)};
}
} // namespace

Variant both(const Variant &a, const Variant &b, std::string name, std::source_location where) {
  Variant v(std::move(name), where);
  for (const Variant *part : {&a, &b}) {
    for (const auto &[param, value] : part->params())
      if (std::none_of(v.params().begin(), v.params().end(), [&](const auto &p) { return p.first == param; }))
        v.param(param, value);
    for (const auto &[input, kind] : part->inputs())
      v.input(input, kind);
    for (const dsl::ValidateFn &fn : part->validators())
      v.validate(fn);
    for (const auto &[rule, accepted] : part->ruleFns())
      v.validate(rule, accepted);
    if (!part->declarationError().empty() && v.declarationError_.empty())
      v.declarationError_ = part->declarationError();
  }
  if (a.scoreFn() && b.scoreFn())
    v.score([fa = a.scoreFn(), fb = b.scoreFn()](dsl::Expr s, const dsl::Coords &c,
                                                 const dsl::Params &p) { return fb(fa(s, c, p), c, p); },
            a.hookSites().score);
  else
    v.score(a.scoreFn() ? a.scoreFn() : b.scoreFn(), (a.scoreFn() ? a : b).hookSites().score);
  if (a.maskFn() && b.maskFn())
    v.mask(
        [fa = a.maskFn(), fb = b.maskFn()](const dsl::Coords &c, const dsl::Params &p) { return fa(c, p) && fb(c, p); },
        a.hookSites().mask);
  else
    v.mask(a.maskFn() ? a.maskFn() : b.maskFn(), (a.maskFn() ? a : b).hookSites().mask);
  if (a.kvRangeFn() || b.kvRangeFn())
    v.kvRange(
        [fa = a.kvRangeFn(), fb = b.kvRangeFn()](const dsl::QTile &q, const dsl::Params &p) {
          return intersect(fa ? fa(q, p) : allKeys(q), fb ? fb(q, p) : allKeys(q));
        },
        (a.kvRangeFn() ? a : b).hookSites().kvRange);
  if (a.maskFn() || b.maskFn()) {
    auto fullOf = [](const Variant &x) -> dsl::RangeFn {
      if (x.fullRangeFn())
        return x.fullRangeFn();
      if (x.maskFn())
        return [](const dsl::QTile &q, const dsl::Params &) { return noKeys(q); };
      return [](const dsl::QTile &q, const dsl::Params &) { return allKeys(q); };
    };
    v.fullRange([fa = fullOf(a), fb = fullOf(b)](const dsl::QTile &q, const dsl::Params &p) {
      return intersect(fa(q, p), fb(q, p));
    });
  }
  v.sink(a.sinkFn() ? a.sinkFn() : b.sinkFn(), (a.sinkFn() ? a : b).hookSites().sink);
  return v;
}

} // namespace flashtile
