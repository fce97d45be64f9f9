// ParamRule.cpp — a recursive-descent parser and evaluator for parameter rules (grammar in ParamRule.h).
//
// Rules come from manifests, which are files a user may hand-edit or corrupt: parsing bounds its nesting depth and
// reports errors with the offending column instead of trusting the text.
#include "flashtile/runtime/ParamRule.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>

using namespace flashtile;

namespace {

/// Deeper nesting than any real rule; bounds the parser's recursion on hostile text.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxRuleLength = 4096;

enum class Kind { Number, Condition };

struct Node {
  enum class Op { Literal, Param, Neg, Not, Add, Sub, Mul, Div, Lt, Le, Gt, Ge, Eq, Ne, And, Or, Call };
  Op op = Op::Literal;
  Kind kind = Kind::Number;
  double value = 0;   // Literal
  size_t param = 0;   // Param: index into the parameter list
  std::string callee; // Call
  std::vector<std::unique_ptr<Node>> args;
};
using NodePtr = std::unique_ptr<Node>;

struct Function {
  std::string_view name;
  size_t arity;
  Kind result;
};
constexpr Function kFunctions[] = {{"isfinite", 1, Kind::Condition}, {"isinteger", 1, Kind::Condition},
                                   {"abs", 1, Kind::Number},         {"floor", 1, Kind::Number},
                                   {"min", 2, Kind::Number},         {"max", 2, Kind::Number}};

/// 'text', built by appending: GCC 12 reports a false -Wrestrict on `"'" + std::string(text)`.
std::string quoted(std::string_view text) {
  std::string out = "'";
  out += text;
  out += "'";
  return out;
}

bool isNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Parser {
public:
  Parser(std::string_view text, const std::vector<std::string> &params) : text(text), params(params) {}

  StatusOr<NodePtr> parseRule() {
    if (text.size() > kMaxRuleLength)
      return Status::error("the rule is " + std::to_string(text.size()) + " characters; at most " +
                           std::to_string(kMaxRuleLength));
    NodePtr root = parseOr(0);
    if (!root)
      return failure();
    skipSpace();
    if (pos != text.size()) {
      errorAt("unexpected '" + std::string(1, text[pos]) + "'");
      return failure();
    }
    if (root->kind != Kind::Condition)
      return Status::error("the rule is a number, not a condition (compare it: e.g. 'x > 0')");
    return root;
  }

private:
  std::string_view text;
  const std::vector<std::string> &params;
  size_t pos = 0;
  std::optional<Status> error;

  Status failure() const { return error ? *error : Status::error("invalid rule"); }
  /// Records the first error only: the innermost failure says best what is wrong.
  void errorAt(const std::string &what) {
    if (!error)
      error = Status::error("column " + std::to_string(pos + 1) + ": " + what);
  }
  NodePtr fail(const std::string &what) {
    errorAt(what);
    return nullptr;
  }

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t'))
      ++pos;
  }
  bool accept(std::string_view token) {
    skipSpace();
    if (text.substr(pos, token.size()) != token)
      return false;
    // '<' must not match the start of '<=', nor '!' that of '!='.
    if (token.size() == 1 && pos + 1 < text.size() && text[pos + 1] == '=' && std::strchr("<>=!", token[0]))
      return false;
    pos += token.size();
    return true;
  }

  NodePtr binary(Node::Op op, Kind kind, NodePtr lhs, NodePtr rhs) {
    auto node = std::make_unique<Node>();
    node->op = op;
    node->kind = kind;
    node->args.push_back(std::move(lhs));
    node->args.push_back(std::move(rhs));
    return node;
  }
  bool expect(const NodePtr &node, Kind kind, std::string_view where) {
    if (node->kind == kind)
      return true;
    errorAt(std::string(where) + " takes " + (kind == Kind::Number ? "numbers" : "conditions") + ", got " +
            (kind == Kind::Number ? "a condition" : "a number"));
    return false;
  }

  NodePtr parseOr(int depth) {
    NodePtr lhs = parseAnd(depth);
    while (lhs && accept("||")) {
      NodePtr rhs = parseAnd(depth);
      if (!rhs || !expect(lhs, Kind::Condition, "'||'") || !expect(rhs, Kind::Condition, "'||'"))
        return nullptr;
      lhs = binary(Node::Op::Or, Kind::Condition, std::move(lhs), std::move(rhs));
    }
    return lhs;
  }
  NodePtr parseAnd(int depth) {
    NodePtr lhs = parseCompare(depth);
    while (lhs && accept("&&")) {
      NodePtr rhs = parseCompare(depth);
      if (!rhs || !expect(lhs, Kind::Condition, "'&&'") || !expect(rhs, Kind::Condition, "'&&'"))
        return nullptr;
      lhs = binary(Node::Op::And, Kind::Condition, std::move(lhs), std::move(rhs));
    }
    return lhs;
  }
  NodePtr parseCompare(int depth) {
    NodePtr lhs = parseSum(depth);
    if (!lhs)
      return nullptr;
    static constexpr std::pair<std::string_view, Node::Op> kComparisons[] = {
        {"<=", Node::Op::Le}, {">=", Node::Op::Ge}, {"==", Node::Op::Eq},
        {"!=", Node::Op::Ne}, {"<", Node::Op::Lt},  {">", Node::Op::Gt}};
    for (auto [token, op] : kComparisons) {
      if (!accept(token))
        continue;
      NodePtr rhs = parseSum(depth);
      std::string where = quoted(token);
      if (!rhs || !expect(lhs, Kind::Number, where) || !expect(rhs, Kind::Number, where))
        return nullptr;
      return binary(op, Kind::Condition, std::move(lhs), std::move(rhs));
    }
    return lhs;
  }
  NodePtr parseSum(int depth) {
    NodePtr lhs = parseProduct(depth);
    while (lhs) {
      Node::Op op;
      if (accept("+"))
        op = Node::Op::Add;
      else if (accept("-"))
        op = Node::Op::Sub;
      else
        break;
      NodePtr rhs = parseProduct(depth);
      if (!rhs || !expect(lhs, Kind::Number, "arithmetic") || !expect(rhs, Kind::Number, "arithmetic"))
        return nullptr;
      lhs = binary(op, Kind::Number, std::move(lhs), std::move(rhs));
    }
    return lhs;
  }
  NodePtr parseProduct(int depth) {
    NodePtr lhs = parseUnary(depth);
    while (lhs) {
      Node::Op op;
      if (accept("*"))
        op = Node::Op::Mul;
      else if (accept("/"))
        op = Node::Op::Div;
      else
        break;
      NodePtr rhs = parseUnary(depth);
      if (!rhs || !expect(lhs, Kind::Number, "arithmetic") || !expect(rhs, Kind::Number, "arithmetic"))
        return nullptr;
      lhs = binary(op, Kind::Number, std::move(lhs), std::move(rhs));
    }
    return lhs;
  }
  NodePtr parseUnary(int depth) {
    if (depth > kMaxDepth)
      return fail("nested more than " + std::to_string(kMaxDepth) + " levels deep");
    for (auto [token, op, kind] : {std::tuple{"-", Node::Op::Neg, Kind::Number}, {"!", Node::Op::Not, Kind::Condition}}) {
      if (!accept(token))
        continue;
      NodePtr operand = parseUnary(depth + 1);
      if (!operand || !expect(operand, kind, quoted(token)))
        return nullptr;
      auto node = std::make_unique<Node>();
      node->op = op;
      node->kind = kind;
      node->args.push_back(std::move(operand));
      return node;
    }
    return parsePrimary(depth);
  }
  NodePtr parsePrimary(int depth) {
    skipSpace();
    if (pos == text.size())
      return fail("the rule ends where a value was expected");
    char c = text[pos];
    if (accept("(")) {
      NodePtr inner = parseOr(depth + 1);
      if (!inner)
        return nullptr;
      if (!accept(")"))
        return fail("expected ')'");
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      size_t start = pos;
      while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '.' ||
                                   ((text[pos] == '+' || text[pos] == '-') && (text[pos - 1] == 'e' || text[pos - 1] == 'E'))))
        ++pos;
      auto node = std::make_unique<Node>();
      std::string_view literal = text.substr(start, pos - start);
      auto [end, ec] = std::from_chars(literal.data(), literal.data() + literal.size(), node->value);
      if (ec != std::errc() || end != literal.data() + literal.size() || !std::isfinite(node->value)) {
        pos = start;
        return fail("'" + std::string(literal) + "' is not a finite number");
      }
      return node;
    }
    if (!isNameStart(c))
      return fail("unexpected '" + std::string(1, c) + "'");
    size_t start = pos;
    while (pos < text.size() && isNameChar(text[pos]))
      ++pos;
    std::string name(text.substr(start, pos - start));
    if (accept("("))
      return parseCall(name, start, depth);
    auto found = std::find(params.begin(), params.end(), name);
    if (found == params.end()) {
      pos = start;
      std::string known;
      for (const std::string &p : params)
        known += (known.empty() ? "" : ", ") + p;
      return fail("'" + name + "' is not a parameter of the variant (its parameters: " +
                  (known.empty() ? "none" : known) + ")");
    }
    auto node = std::make_unique<Node>();
    node->op = Node::Op::Param;
    node->param = static_cast<size_t>(found - params.begin());
    return node;
  }
  NodePtr parseCall(const std::string &name, size_t start, int depth) {
    const Function *function = nullptr;
    for (const Function &f : kFunctions)
      if (f.name == name)
        function = &f;
    if (!function) {
      pos = start;
      return fail("unknown function '" + name + "' (known: isfinite, isinteger, abs, floor, min, max)");
    }
    auto node = std::make_unique<Node>();
    node->op = Node::Op::Call;
    node->kind = function->result;
    node->callee = name;
    do {
      NodePtr arg = parseOr(depth + 1);
      if (!arg || !expect(arg, Kind::Number, name + "()"))
        return nullptr;
      node->args.push_back(std::move(arg));
    } while (accept(","));
    if (!accept(")"))
      return fail("expected ')' after the arguments of " + name + "()");
    if (node->args.size() != function->arity)
      return fail(name + "() takes " + std::to_string(function->arity) + " argument" +
                  (function->arity == 1 ? "" : "s") + ", got " + std::to_string(node->args.size()));
    return node;
  }
};

double evaluate(const Node &node, const std::vector<float> &values) {
  auto arg = [&](size_t i) { return evaluate(*node.args[i], values); };
  switch (node.op) {
  case Node::Op::Literal:
    return node.value;
  case Node::Op::Param:
    return values[node.param];
  case Node::Op::Neg:
    return -arg(0);
  case Node::Op::Not:
    return arg(0) == 0;
  case Node::Op::Add:
    return arg(0) + arg(1);
  case Node::Op::Sub:
    return arg(0) - arg(1);
  case Node::Op::Mul:
    return arg(0) * arg(1);
  case Node::Op::Div:
    return arg(0) / arg(1);
  case Node::Op::Lt:
    return arg(0) < arg(1);
  case Node::Op::Le:
    return arg(0) <= arg(1);
  case Node::Op::Gt:
    return arg(0) > arg(1);
  case Node::Op::Ge:
    return arg(0) >= arg(1);
  case Node::Op::Eq:
    return arg(0) == arg(1);
  case Node::Op::Ne:
    return arg(0) != arg(1);
  case Node::Op::And:
    return arg(0) != 0 && arg(1) != 0;
  case Node::Op::Or:
    return arg(0) != 0 || arg(1) != 0;
  case Node::Op::Call: {
    double x = arg(0);
    if (node.callee == "isfinite")
      return std::isfinite(x);
    if (node.callee == "isinteger")
      return std::isfinite(x) && std::floor(x) == x;
    if (node.callee == "abs")
      return std::fabs(x);
    if (node.callee == "floor")
      return std::floor(x);
    if (node.callee == "min")
      return std::fmin(x, arg(1));
    return std::fmax(x, arg(1));
  }
  }
  return 0;
}

void collectParams(const Node &node, std::vector<size_t> &out) {
  if (node.op == Node::Op::Param && std::find(out.begin(), out.end(), node.param) == out.end())
    out.push_back(node.param);
  for (const NodePtr &arg : node.args)
    collectParams(*arg, out);
}

std::string formatValue(float value) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : "?";
}

bool acceptedTextIsValid(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c >= ' ' && c <= '~' && c != '"' && c != ';'; });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

} // namespace

Status flashtile::verifyParamRule(const ParamRule &rule, const std::vector<std::string> &params) {
  if (rule.expr.find_first_of(";\"") != std::string::npos)
    return Status::error("rule '" + rule.expr + "' contains ';' or '\"'");
  StatusOr<NodePtr> parsed = Parser(rule.expr, params).parseRule();
  if (!parsed.ok())
    return parsed.status().withContext("rule '" + rule.expr + "'");
  if (!acceptedTextIsValid(rule.accepted))
    return Status::error("rule '" + rule.expr + "': its description '" + rule.accepted +
                         "' must be printable ASCII without '\"' or ';'");
  return Status();
}

Status flashtile::checkParamRules(std::string_view variant, const std::vector<ParamRule> &rules,
                                  const std::vector<std::string> &params, const std::vector<float> &values) {
  if (values.size() != params.size())
    return Status::error("variant '" + std::string(variant) + "' takes " + std::to_string(params.size()) +
                         " parameters, got " + std::to_string(values.size()));
  for (const ParamRule &rule : rules) {
    StatusOr<NodePtr> parsed = Parser(rule.expr, params).parseRule();
    if (!parsed.ok())
      return parsed.status().withContext("variant '" + std::string(variant) + "': rule '" + rule.expr + "'");
    if (evaluate(**parsed, values) != 0)
      continue;
    std::vector<size_t> read;
    collectParams(**parsed, read);
    std::string which;
    for (size_t index : read)
      which += (which.empty() ? "" : ", ") + params[index] + " = " + formatValue(values[index]);
    return Status::error("variant '" + std::string(variant) + "': " + (which.empty() ? "its parameters" : which) +
                         (read.size() > 1 ? " are" : " is") + " not accepted; accepted: " +
                         (rule.accepted.empty() ? "values for which " + rule.expr : rule.accepted));
  }
  return Status();
}

std::string flashtile::serializeParamRules(const std::vector<ParamRule> &rules) {
  std::string text;
  for (const ParamRule &rule : rules)
    text += (text.empty() ? "" : "; ") + rule.expr + " \"" + rule.accepted + "\"";
  return text;
}

StatusOr<std::vector<ParamRule>> flashtile::parseParamRules(std::string_view text) {
  std::vector<ParamRule> rules;
  text = trim(text);
  if (text.empty())
    return rules;
  while (true) {
    size_t semicolon = text.find(';');
    std::string_view item = trim(text.substr(0, semicolon));
    size_t open = item.find('"');
    if (item.size() < 2 || item.back() != '"' || open == item.size() - 1)
      return Status::error("rule '" + std::string(item) + "' is not 'condition \"accepted values\"'");
    rules.push_back({std::string(trim(item.substr(0, open))), std::string(item.substr(open + 1, item.size() - open - 2))});
    if (semicolon == std::string_view::npos)
      return rules;
    text = text.substr(semicolon + 1);
  }
}
