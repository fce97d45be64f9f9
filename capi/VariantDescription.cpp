//===- VariantDescription.cpp - JSON expression graphs -> DSL hooks --------===//
#include "capi/VariantDescription.h"

#include "flashtile/runtime/KernelAbi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/Support/JSON.h"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

namespace flashtile {

namespace {

using dsl::Expr;

enum class Ty { F32, I32, I1 };

const char *tyName(Ty t) { return t == Ty::F32 ? "f32" : t == Ty::I32 ? "i32" : "i1"; }

using BinaryFn = Expr (*)(const Expr &, const Expr &);
using UnaryFn = Expr (*)(const Expr &);

/// What a binary op accepts: arithmetic (f32/i32 -> same), comparison (f32/i32 -> i1), logic (i1 -> i1).
enum class BinaryKind { Arithmetic, Compare, Logic };
struct BinaryOp {
  BinaryFn fn;
  BinaryKind kind;
};
const std::map<std::string, BinaryOp> &binaryOps() {
  static const std::map<std::string, BinaryOp> ops = {
      {"add", {[](const Expr &a, const Expr &b) { return a + b; }, BinaryKind::Arithmetic}},
      {"sub", {[](const Expr &a, const Expr &b) { return a - b; }, BinaryKind::Arithmetic}},
      {"mul", {[](const Expr &a, const Expr &b) { return a * b; }, BinaryKind::Arithmetic}},
      {"div", {[](const Expr &a, const Expr &b) { return a / b; }, BinaryKind::Arithmetic}},
      {"min", {[](const Expr &a, const Expr &b) { return dsl::min(a, b); }, BinaryKind::Arithmetic}},
      {"max", {[](const Expr &a, const Expr &b) { return dsl::max(a, b); }, BinaryKind::Arithmetic}},
      {"lt", {[](const Expr &a, const Expr &b) { return a < b; }, BinaryKind::Compare}},
      {"le", {[](const Expr &a, const Expr &b) { return a <= b; }, BinaryKind::Compare}},
      {"gt", {[](const Expr &a, const Expr &b) { return a > b; }, BinaryKind::Compare}},
      {"ge", {[](const Expr &a, const Expr &b) { return a >= b; }, BinaryKind::Compare}},
      {"eq", {[](const Expr &a, const Expr &b) { return a == b; }, BinaryKind::Compare}},
      {"ne", {[](const Expr &a, const Expr &b) { return a != b; }, BinaryKind::Compare}},
      {"and", {[](const Expr &a, const Expr &b) { return a && b; }, BinaryKind::Logic}},
      {"or", {[](const Expr &a, const Expr &b) { return a || b; }, BinaryKind::Logic}},
  };
  return ops;
}

/// Unary ops with the operand types they accept and the result type (nullopt: the operand's).
struct UnaryOp {
  UnaryFn fn;
  std::vector<Ty> accepts;
  std::optional<Ty> result;
};
const std::map<std::string, UnaryOp> &unaryOps() {
  static const std::map<std::string, UnaryOp> ops = {
      {"neg", {[](const Expr &a) { return -a; }, {Ty::F32, Ty::I32}, std::nullopt}},
      {"not", {[](const Expr &a) { return !a; }, {Ty::I1}, std::nullopt}},
      {"abs", {[](const Expr &a) { return dsl::abs(a); }, {Ty::F32, Ty::I32}, std::nullopt}},
      {"tanh", {[](const Expr &a) { return dsl::tanh(a); }, {Ty::F32}, std::nullopt}},
      {"exp", {[](const Expr &a) { return dsl::exp(a); }, {Ty::F32}, std::nullopt}},
      {"exp2", {[](const Expr &a) { return dsl::exp2(a); }, {Ty::F32}, std::nullopt}},
      {"log", {[](const Expr &a) { return dsl::log(a); }, {Ty::F32}, std::nullopt}},
      {"sqrt", {[](const Expr &a) { return dsl::sqrt(a); }, {Ty::F32}, std::nullopt}},
      {"to_float", {[](const Expr &a) { return dsl::toFloat(a); }, {Ty::I32}, Ty::F32}},
      {"to_int", {[](const Expr &a) { return dsl::toInt(a); }, {Ty::F32}, Ty::I32}},
  };
  return ops;
}

struct Node {
  enum class Kind { Arg, Size, Dim, Param, Load, Const, Binary, Unary, Select } kind;
  std::string name; // size/dim/param/load name, or the op of Binary/Unary
  int operands[3] = {-1, -1, -1};
  int arg = 0;
  double value = 0;
  Ty type = Ty::F32;
};

/// One hook's graph, checked: every node's operands precede it and have the types its op accepts.
struct Graph {
  std::vector<Node> nodes;
  std::vector<int> results;
  std::vector<bool> live; // reachable from the results: only these become ops
};

/// A hook's signature: argument and result types.
struct HookSignature {
  const char *name;
  std::vector<Ty> args;
  std::vector<Ty> results;
};

const std::vector<HookSignature> &hookSignatures() {
  static const std::vector<HookSignature> hooks = {
      {"score", {Ty::F32, Ty::I32, Ty::I32, Ty::I32, Ty::I32}, {Ty::F32}},
      {"mask", {Ty::I32, Ty::I32, Ty::I32, Ty::I32}, {Ty::I1}},
      {"kv_range", {Ty::I32, Ty::I32, Ty::I32, Ty::I32}, {Ty::I32, Ty::I32}},
      {"full_range", {Ty::I32, Ty::I32, Ty::I32, Ty::I32}, {Ty::I32, Ty::I32}},
      {"sink", {Ty::I32, Ty::I32}, {Ty::F32}},
  };
  return hooks;
}

/// Identifiers end up in kernel names and IR attributes: letters, digits and '_', not starting with a digit.
bool isIdentifier(llvm::StringRef s, size_t maxLength) {
  if (s.empty() || s.size() > maxLength || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  return llvm::all_of(s, [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

constexpr size_t kMaxNameLength = 64;

struct ParamBounds {
  std::string name;
  std::optional<double> min, max;
  bool minExclusive = false;
  bool integer = false;
};

/// The offset of the first bracket nested deeper than `limit` arrays and objects, if any. llvm::json::parse
/// recurses once per level, so a deep enough text overflows any thread's stack: the nesting is measured first, in
/// one loop (brackets inside strings do not count).
std::optional<size_t> tooDeep(std::string_view text, int limit) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i; // the escaped character, whatever it is, cannot end the string
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit)
        return i;
    } else if (c == ']' || c == '}') {
      --depth; // unbalanced text is the JSON parser's to report
    }
  }
  return std::nullopt;
}

std::string formatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

/// The validate hook for declared bounds; every value must be finite.
std::string checkBounds(const std::vector<ParamBounds> &bounds, const std::map<std::string, float> &values) {
  for (const ParamBounds &b : bounds) {
    auto it = values.find(b.name);
    if (it == values.end())
      continue;
    float v = it->second;
    bool ok = std::isfinite(v) && (!b.integer || std::floor(v) == v) &&
              (!b.min || (b.minExclusive ? v > *b.min : v >= *b.min)) && (!b.max || v <= *b.max);
    if (ok)
      continue;
    std::string rule = b.integer ? "a whole number" : "a finite number";
    if (b.min)
      rule += std::string(b.minExclusive ? " > " : " >= ") + formatNumber(*b.min);
    if (b.max)
      rule += (b.min ? " and <= " : " <= ") + formatNumber(*b.max);
    return "parameter '" + b.name + "' is " + formatNumber(v) + "; it must be " + rule;
  }
  return "";
}

class Parser {
public:
  StatusOr<Variant> parse(std::string_view text);

private:
  Status fail(const std::string &path, const std::string &message) { return Status::error(path + ": " + message); }
  StatusOr<Graph> parseGraph(const llvm::json::Object &hook, const HookSignature &signature, const std::string &path);
  StatusOr<Node> parseNode(const llvm::json::Value &value, const std::vector<Node> &earlier,
                           const HookSignature &signature, const std::string &path);
  /// ["param", name]: a declared parameter (f32); ["load", name, i]: element i (i32) of a declared input.
  StatusOr<Node> parseParam(const struct NodeItems &in);
  StatusOr<Node> parseLoad(const struct NodeItems &in);
  /// The steps of parse(), in order: each reads one member of the description's root object into `variant`.
  Status parseParams(const llvm::json::Object &root, Variant &variant);
  Status parseInputs(const llvm::json::Object &root, Variant &variant);
  Status parseHooks(const llvm::json::Object &root, Variant &variant);

  std::map<std::string, Ty> inputTypes;
  std::vector<std::string> paramNames;
  size_t totalNodes = 0; // over the hooks parsed so far
};

/// An operand index: an integer naming an earlier node.
StatusOr<int> operandIndex(const llvm::json::Value &v, size_t count, const std::string &path) {
  std::optional<int64_t> index = v.getAsInteger();
  if (!index || *index < 0 || static_cast<size_t>(*index) >= count)
    return Status::error(path + ": an operand must be the index of an earlier node (0.." +
                         std::to_string(static_cast<int64_t>(count) - 1) + ")");
  return static_cast<int>(*index);
}

/// One node's array as the parsers below read it: its op name, and operand checks that name the node's path.
struct NodeItems {
  const llvm::json::Array &items;
  std::string op;
  const std::vector<Node> &earlier;
  std::string path;

  Status fail(const std::string &message) const { return Status::error(path + ": " + message); }
  Status arity(size_t n) const {
    if (items.size() != n + 1)
      return fail("'" + op + "' takes " + std::to_string(n) + " operand(s), got " + std::to_string(items.size() - 1));
    return Status();
  }
  std::optional<std::string> stringAt(size_t i) const {
    if (auto s = items[i].getAsString())
      return s->str();
    return std::nullopt;
  }
  StatusOr<int> operand(size_t i) const {
    return operandIndex(items[i], earlier.size(), path + "[" + std::to_string(i) + "]");
  }
  /// Items 1..n as the node's operands (indices of earlier nodes).
  Status operands(Node &node, int n) const {
    for (int i = 0; i < n; ++i) {
      StatusOr<int> index = operand(i + 1);
      if (!index.ok())
        return index.status();
      node.operands[i] = *index;
    }
    return Status();
  }
};

/// ["arg", i]: the hook's argument i.
StatusOr<Node> parseArg(const NodeItems &in, const HookSignature &signature) {
  if (Status s = in.arity(1); !s.ok())
    return s;
  std::optional<int64_t> i = in.items[1].getAsInteger();
  if (!i || *i < 0 || static_cast<size_t>(*i) >= signature.args.size())
    return in.fail(std::string("hook '") + signature.name + "' has arguments 0.." +
                   std::to_string(signature.args.size() - 1));
  Node node;
  node.name = in.op;
  node.kind = Node::Kind::Arg;
  node.arg = static_cast<int>(*i);
  node.type = signature.args[node.arg];
  return node;
}

/// ["size", "seqlen_q" | "seqlen_k"] and ["dim", "batch" | "heads_q" | "heads_kv" | "key_offset"]: i32.
StatusOr<Node> parseDimension(const NodeItems &in) {
  if (Status s = in.arity(1); !s.ok())
    return s;
  const bool size = in.op == "size";
  std::optional<std::string> name = in.stringAt(1);
  bool known = name && (size ? (*name == "seqlen_q" || *name == "seqlen_k")
                             : (*name == "batch" || *name == "heads_q" || *name == "heads_kv" || *name == "key_offset"));
  if (!known)
    return in.fail(size ? "'size' takes \"seqlen_q\" or \"seqlen_k\""
                        : "'dim' takes \"batch\", \"heads_q\", \"heads_kv\" or \"key_offset\"");
  Node node;
  node.kind = size ? Node::Kind::Size : Node::Kind::Dim;
  node.name = *name;
  node.type = Ty::I32;
  return node;
}

/// ["const", type, value]: an f32 (a number, "inf" or "-inf"), an i32 or an i1 (an integer or a boolean).
StatusOr<Node> parseConst(const NodeItems &in) {
  if (Status s = in.arity(2); !s.ok())
    return s;
  std::optional<std::string> type = in.stringAt(1);
  if (!type || (*type != "f32" && *type != "i32" && *type != "i1"))
    return in.fail("'const' takes a type \"f32\", \"i32\" or \"i1\"");
  Node node;
  node.name = in.op;
  node.kind = Node::Kind::Const;
  node.type = *type == "f32" ? Ty::F32 : *type == "i32" ? Ty::I32 : Ty::I1;
  const llvm::json::Value &v = in.items[2];
  if (node.type == Ty::F32) {
    if (std::optional<double> d = v.getAsNumber())
      node.value = *d;
    else if (v.getAsString() && *v.getAsString() == "inf")
      node.value = std::numeric_limits<double>::infinity();
    else if (v.getAsString() && *v.getAsString() == "-inf")
      node.value = -std::numeric_limits<double>::infinity();
    else
      return in.fail("an f32 constant is a number, \"inf\" or \"-inf\"");
    return node;
  }
  std::optional<int64_t> i = v.getAsInteger();
  if (!i && v.getAsBoolean())
    i = *v.getAsBoolean() ? 1 : 0;
  int64_t lo = node.type == Ty::I1 ? 0 : std::numeric_limits<int32_t>::min();
  int64_t hi = node.type == Ty::I1 ? 1 : std::numeric_limits<int32_t>::max();
  if (!i || *i < lo || *i > hi)
    return in.fail(std::string("an ") + tyName(node.type) + " constant is an integer in [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  node.value = static_cast<double>(*i);
  return node;
}

/// ["select", c, t, f]: t where the i1 c holds, else f (of t's type).
StatusOr<Node> parseSelect(const NodeItems &in) {
  Node node;
  node.name = in.op;
  if (Status s = in.arity(3); !s.ok())
    return s;
  if (Status s = in.operands(node, 3); !s.ok())
    return s;
  Ty c = in.earlier[node.operands[0]].type, t = in.earlier[node.operands[1]].type,
     f = in.earlier[node.operands[2]].type;
  if (c != Ty::I1)
    return in.fail(std::string("select's condition must be i1, got ") + tyName(c));
  if (t != f)
    return in.fail(std::string("select's branches must have one type, got ") + tyName(t) + " and " + tyName(f));
  node.kind = Node::Kind::Select;
  node.type = t;
  return node;
}

/// [op, a, b] of binaryOps(): operands of one type, i1 for the logic ops; compares give i1.
StatusOr<Node> parseBinary(const NodeItems &in, const BinaryOp &binary) {
  Node node;
  node.name = in.op;
  if (Status s = in.arity(2); !s.ok())
    return s;
  if (Status s = in.operands(node, 2); !s.ok())
    return s;
  Ty a = in.earlier[node.operands[0]].type, b = in.earlier[node.operands[1]].type;
  if (a != b)
    return in.fail("'" + in.op + "' mixes " + tyName(a) + " and " + tyName(b) + "; convert with to_float/to_int");
  bool logic = binary.kind == BinaryKind::Logic;
  if (logic != (a == Ty::I1))
    return in.fail("'" + in.op + "' takes " + (logic ? "i1 (predicates)" : "f32 or i32") + " operands, got " + tyName(a));
  node.kind = Node::Kind::Binary;
  node.type = binary.kind == BinaryKind::Compare ? Ty::I1 : a;
  return node;
}

/// [op, a] of unaryOps(): a of the types it accepts.
StatusOr<Node> parseUnary(const NodeItems &in, const UnaryOp &unary) {
  Node node;
  node.name = in.op;
  if (Status s = in.arity(1); !s.ok())
    return s;
  if (Status s = in.operands(node, 1); !s.ok())
    return s;
  Ty a = in.earlier[node.operands[0]].type;
  if (llvm::find(unary.accepts, a) == unary.accepts.end()) {
    std::string accepted;
    for (Ty t : unary.accepts)
      accepted += (accepted.empty() ? "" : " or ") + std::string(tyName(t));
    return in.fail("'" + in.op + "' takes " + accepted + ", got " + tyName(a));
  }
  node.kind = Node::Kind::Unary;
  node.type = unary.result.value_or(a);
  return node;
}

StatusOr<Node> Parser::parseParam(const NodeItems &in) {
  if (Status s = in.arity(1); !s.ok())
    return s;
  std::optional<std::string> name = in.stringAt(1);
  if (!name || llvm::find(paramNames, *name) == paramNames.end())
    return in.fail("'param' names an undeclared parameter" + (name ? " '" + *name + "'" : std::string()) +
                   "; declare it in \"params\"");
  Node node;
  node.kind = Node::Kind::Param;
  node.name = *name;
  node.type = Ty::F32;
  return node;
}

StatusOr<Node> Parser::parseLoad(const NodeItems &in) {
  if (Status s = in.arity(2); !s.ok())
    return s;
  std::optional<std::string> name = in.stringAt(1);
  auto it = name ? inputTypes.find(*name) : inputTypes.end();
  if (it == inputTypes.end())
    return in.fail("'load' names an undeclared input" + (name ? " '" + *name + "'" : std::string()) +
                   "; declare it in \"inputs\"");
  StatusOr<int> index = in.operand(2);
  if (!index.ok())
    return index.status();
  if (in.earlier[*index].type != Ty::I32)
    return in.fail("the index of input '" + *name + "' must be i32, got " + tyName(in.earlier[*index].type));
  Node node;
  node.kind = Node::Kind::Load;
  node.name = *name;
  node.operands[0] = *index;
  node.type = it->second;
  return node;
}

StatusOr<Node> Parser::parseNode(const llvm::json::Value &value, const std::vector<Node> &earlier,
                                 const HookSignature &signature, const std::string &path) {
  const llvm::json::Array *items = value.getAsArray();
  if (!items || items->empty() || !(*items)[0].getAsString())
    return fail(path, "a node is an array whose first element is its op name");
  const NodeItems in{*items, (*items)[0].getAsString()->str(), earlier, path};
  const std::string &op = in.op;
  if (op == "arg")
    return parseArg(in, signature);
  if (op == "size" || op == "dim")
    return parseDimension(in);
  if (op == "param")
    return parseParam(in);
  if (op == "load")
    return parseLoad(in);
  if (op == "const")
    return parseConst(in);
  if (op == "select")
    return parseSelect(in);
  if (auto it = binaryOps().find(op); it != binaryOps().end())
    return parseBinary(in, it->second);
  if (auto it = unaryOps().find(op); it != unaryOps().end())
    return parseUnary(in, it->second);
  return fail(path, "unknown op '" + op +
                        "'; accepted: arg, size, dim, param, load, const, add, sub, mul, div, min, max, lt, le, gt, "
                        "ge, eq, ne, and, or, neg, not, abs, tanh, exp, exp2, log, sqrt, to_float, to_int, select");
}

StatusOr<Graph> Parser::parseGraph(const llvm::json::Object &hook, const HookSignature &signature,
                                   const std::string &path) {
  const llvm::json::Array *nodes = hook.getArray("nodes");
  const llvm::json::Array *results = hook.getArray("results");
  if (!nodes || !results)
    return fail(path, "a hook is {\"nodes\": [...], \"results\": [...]}");
  if (nodes->size() > kMaxHookNodes)
    return fail(path, std::to_string(nodes->size()) + " nodes; a hook has at most " + std::to_string(kMaxHookNodes));
  totalNodes += nodes->size();
  if (totalNodes > kMaxDescriptionNodes)
    return fail(path, "the hooks have more than " + std::to_string(kMaxDescriptionNodes) + " nodes together");
  Graph graph;
  for (size_t i = 0; i < nodes->size(); ++i) {
    auto node = parseNode((*nodes)[i], graph.nodes, signature, path + ".nodes[" + std::to_string(i) + "]");
    if (!node.ok())
      return node.status();
    graph.nodes.push_back(std::move(*node));
  }
  if (results->size() != signature.results.size())
    return fail(path + ".results", "hook '" + std::string(signature.name) + "' returns " +
                                       std::to_string(signature.results.size()) + " value(s), got " +
                                       std::to_string(results->size()));
  for (size_t i = 0; i < results->size(); ++i) {
    std::string where = path + ".results[" + std::to_string(i) + "]";
    auto index = operandIndex((*results)[i], graph.nodes.size(), where);
    if (!index.ok())
      return index.status();
    Ty got = graph.nodes[*index].type, want = signature.results[i];
    if (got != want)
      return fail(where, "hook '" + std::string(signature.name) + "' returns " + tyName(want) + ", got " + tyName(got));
    graph.results.push_back(*index);
  }
  // Only what the results reach becomes IR, so unused traced values do not change the variant's identity.
  graph.live.assign(graph.nodes.size(), false);
  for (int r : graph.results)
    graph.live[r] = true;
  for (size_t i = graph.nodes.size(); i-- > 0;)
    if (graph.live[i])
      for (int operand : graph.nodes[i].operands)
        if (operand >= 0)
          graph.live[operand] = true;
  return graph;
}

/// Replays `graph` through the DSL: the same calls a C++ hook makes.
std::vector<Expr> evaluate(const Graph &graph, const std::vector<Expr> &args, const dsl::Sizes &sizes,
                           const dsl::Params &params) {
  mlir::OpBuilder &b = args.front().getBuilder();
  std::vector<std::optional<Expr>> values(graph.nodes.size());
  auto at = [&](int i) -> const Expr & { return *values[i]; };
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!graph.live[i])
      continue;
    const Node &n = graph.nodes[i];
    switch (n.kind) {
    case Node::Kind::Arg:
      values[i] = args[n.arg];
      break;
    case Node::Kind::Size:
      values[i] = n.name == "seqlen_q" ? sizes.seqlenQ : sizes.seqlenK;
      break;
    case Node::Kind::Dim:
      values[i] = n.name == "batch"      ? sizes.batch()
                  : n.name == "heads_q"  ? sizes.headsQ()
                  : n.name == "heads_kv" ? sizes.headsKv()
                                         : sizes.keyOffset();
      break;
    case Node::Kind::Param:
      values[i] = params[n.name];
      break;
    case Node::Kind::Load:
      values[i] = params.load(n.name, at(n.operands[0]));
      break;
    case Node::Kind::Const: {
      // As Expr::literal builds them.
      mlir::Location loc = b.getUnknownLoc();
      if (n.type == Ty::F32)
        values[i] = Expr(b, mlir::arith::ConstantFloatOp::create(b, loc, b.getF32Type(),
                                                                 llvm::APFloat(static_cast<float>(n.value))));
      else
        values[i] =
            Expr(b, mlir::arith::ConstantIntOp::create(b, loc, n.type == Ty::I32 ? b.getI32Type() : b.getI1Type(),
                                                       static_cast<int64_t>(n.value)));
      break;
    }
    case Node::Kind::Binary:
      values[i] = binaryOps().at(n.name).fn(at(n.operands[0]), at(n.operands[1]));
      break;
    case Node::Kind::Unary:
      values[i] = unaryOps().at(n.name).fn(at(n.operands[0]));
      break;
    case Node::Kind::Select:
      values[i] = dsl::select(at(n.operands[0]), at(n.operands[1]), at(n.operands[2]));
      break;
    }
  }
  std::vector<Expr> out;
  for (int r : graph.results)
    out.push_back(at(r));
  return out;
}

/// What is checked of the description's text before it is parsed as JSON: its size and its nesting.
Status checkText(std::string_view text) {
  if (text.size() > kMaxDescriptionBytes)
    return Status::error("variant description: " + std::to_string(text.size()) + " bytes; at most " +
                         std::to_string(kMaxDescriptionBytes) + " are accepted");
  if (std::optional<size_t> at = tooDeep(text, kMaxDescriptionDepth))
    return Status::error("variant description: arrays and objects nested more than " +
                         std::to_string(kMaxDescriptionDepth) + " levels deep (at byte " + std::to_string(*at) +
                         "); a description needs 5");
  return Status();
}

/// "params": declared parameters with their values and bounds; the bounds become the variant's first validator.
Status Parser::parseParams(const llvm::json::Object &root, Variant &variant) {
  std::vector<ParamBounds> bounds;
  if (const llvm::json::Value *params = root.get("params")) {
    const llvm::json::Array *list = params->getAsArray();
    if (!list)
      return Status::error("params: expected an array");
    if (list->size() > FLASHTILE_MAX_VARIANT_PARAMS)
      return Status::error("params: " + std::to_string(list->size()) + " parameters; a kernel takes at most " +
                           std::to_string(FLASHTILE_MAX_VARIANT_PARAMS) + " (FLASHTILE_MAX_VARIANT_PARAMS)");
    for (size_t i = 0; i < list->size(); ++i) {
      std::string path = "params[" + std::to_string(i) + "]";
      const llvm::json::Object *p = (*list)[i].getAsObject();
      std::optional<llvm::StringRef> pname = p ? p->getString("name") : std::nullopt;
      std::optional<double> value = p ? p->getNumber("value") : std::nullopt;
      if (!pname || !isIdentifier(*pname, kMaxNameLength) || !value)
        return Status::error(path + ": expected {\"name\": identifier, \"value\": number, ...}");
      if (llvm::find(paramNames, pname->str()) != paramNames.end())
        return Status::error(path + ": parameter '" + pname->str() + "' is declared twice");
      paramNames.push_back(pname->str());
      ParamBounds b{pname->str(), p->getNumber("min"), p->getNumber("max"),
                    p->getBoolean("min_exclusive").value_or(false), p->getBoolean("integer").value_or(false)};
      bounds.push_back(std::move(b));
      variant.param(pname->str(), static_cast<float>(*value));
    }
  }
  variant.validate([bounds](const std::map<std::string, float> &values) { return checkBounds(bounds, values); });
  return Status();
}

/// "rules": rules in the runtime's rule language (dsl/Rule.h), with the accepted values in words: they travel with
/// every kernel (KernelInfo::paramRules) and are part of the variant's id, as a C++ variant's validate(rule, accepted).
Status parseRules(const llvm::json::Object &root, Variant &variant) {
  if (const llvm::json::Value *rules = root.get("rules")) {
    const llvm::json::Array *list = rules->getAsArray();
    if (!list)
      return Status::error("rules: expected an array");
    if (list->size() > kMaxDescriptionRules)
      return Status::error("rules: " + std::to_string(list->size()) + " rules; at most " +
                           std::to_string(kMaxDescriptionRules));
    for (size_t i = 0; i < list->size(); ++i) {
      const llvm::json::Object *r = (*list)[i].getAsObject();
      std::optional<llvm::StringRef> text = r ? r->getString("rule") : std::nullopt;
      std::optional<llvm::StringRef> accepted = r ? r->getString("accepted") : std::nullopt;
      if (!text || !accepted)
        return Status::error("rules[" + std::to_string(i) + "]: expected {\"rule\": text, \"accepted\": text}");
      variant.validate([rule = text->str()](const dsl::RuleParams &) { return dsl::Rule::fromText(rule); },
                       accepted->str());
    }
  }
  return Status();
}

/// "inputs": the variant's named input arrays, f32 or i32.
Status Parser::parseInputs(const llvm::json::Object &root, Variant &variant) {
  if (const llvm::json::Value *inputs = root.get("inputs")) {
    const llvm::json::Array *list = inputs->getAsArray();
    if (!list)
      return Status::error("inputs: expected an array");
    if (list->size() > FLASHTILE_MAX_VARIANT_INPUTS)
      return Status::error("inputs: " + std::to_string(list->size()) + " inputs; a kernel takes at most " +
                           std::to_string(FLASHTILE_MAX_VARIANT_INPUTS) + " (FLASHTILE_MAX_VARIANT_INPUTS)");
    for (size_t i = 0; i < list->size(); ++i) {
      std::string path = "inputs[" + std::to_string(i) + "]";
      const llvm::json::Object *in = (*list)[i].getAsObject();
      std::optional<llvm::StringRef> iname = in ? in->getString("name") : std::nullopt;
      std::optional<llvm::StringRef> type = in ? in->getString("type") : std::nullopt;
      if (!iname || !isIdentifier(*iname, kMaxNameLength) || !type || (*type != "f32" && *type != "i32"))
        return Status::error(path + ": expected {\"name\": identifier, \"type\": \"f32\" | \"i32\"}");
      if (inputTypes.count(iname->str()))
        return Status::error(path + ": input '" + iname->str() + "' is declared twice");
      bool f32 = *type == "f32";
      inputTypes[iname->str()] = f32 ? Ty::F32 : Ty::I32;
      variant.input(iname->str(), f32 ? dsl::ElementKind::F32 : dsl::ElementKind::I32);
    }
  }
  return Status();
}

/// Sets `hook` of `variant` to replay `graph` (checked against the hook's signature) through the DSL.
void attachHook(Variant &variant, std::string_view hook, std::shared_ptr<const Graph> shared) {
  if (hook == "score")
    variant.score([shared](Expr s, const dsl::Coords &c, const dsl::Params &p) {
      return evaluate(*shared, {s, c.b, c.h, c.q, c.kv}, c.sizes, p)[0];
    });
  else if (hook == "mask")
    variant.mask([shared](const dsl::Coords &c, const dsl::Params &p) {
      return evaluate(*shared, {c.b, c.h, c.q, c.kv}, c.sizes, p)[0];
    });
  else if (hook == "kv_range" || hook == "full_range") {
    dsl::RangeFn fn = [shared](const dsl::QTile &q, const dsl::Params &p) {
      std::vector<Expr> r = evaluate(*shared, {q.first, q.last, q.b, q.h}, q.sizes, p);
      return dsl::Range{r[0], r[1]};
    };
    if (hook == "kv_range")
      variant.kvRange(std::move(fn));
    else
      variant.fullRange(std::move(fn));
  } else
    variant.sink([shared](const dsl::HeadCoords &c, const dsl::Params &p) {
      return evaluate(*shared, {c.b, c.h}, c.sizes, p)[0];
    });
}

/// "hooks": an object of known hook names, each an expression graph, attached in the signatures' order.
Status Parser::parseHooks(const llvm::json::Object &root, Variant &variant) {
  const llvm::json::Object *hooks = root.getObject("hooks");
  if (root.get("hooks") && !hooks)
    return Status::error("hooks: expected an object");
  if (hooks)
    for (const auto &[key, value] : *hooks)
      if (llvm::none_of(hookSignatures(), [&](const HookSignature &s) { return key == s.name; }))
        return Status::error("hooks: unknown hook '" + key.str() +
                             "'; accepted: score, mask, kv_range, full_range, sink");
  for (const HookSignature &signature : hooks ? hookSignatures() : std::vector<HookSignature>{}) {
    const llvm::json::Value *value = hooks->get(signature.name);
    if (!value)
      continue;
    std::string path = std::string("hooks.") + signature.name;
    const llvm::json::Object *object = value->getAsObject();
    if (!object)
      return Status::error(path + ": expected an object");
    auto graph = parseGraph(*object, signature, path);
    if (!graph.ok())
      return graph.status();
    attachHook(variant, signature.name, std::make_shared<const Graph>(std::move(*graph)));
  }
  return Status();
}

StatusOr<Variant> Parser::parse(std::string_view text) {
  if (Status status = checkText(text); !status.ok())
    return status;
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(llvm::StringRef(text.data(), text.size()));
  if (!parsed)
    return Status::error("variant description: not JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return Status::error("variant description: expected a JSON object");
  std::optional<llvm::StringRef> format = root->getString("format");
  if (!format || format->str() != kVariantDescriptionFormat)
    return Status::error("variant description: \"format\" must be \"" + std::string(kVariantDescriptionFormat) + "\"");
  std::optional<llvm::StringRef> name = root->getString("name");
  if (!name || !isIdentifier(*name, kMaxNameLength))
    return Status::error("variant description: \"name\" must be 1-" + std::to_string(kMaxNameLength) +
                         " letters, digits or '_', not starting with a digit");
  Variant variant(name->str());
  if (Status status = parseParams(*root, variant); !status.ok())
    return status;
  if (Status status = parseRules(*root, variant); !status.ok())
    return status;
  if (Status status = parseInputs(*root, variant); !status.ok())
    return status;
  if (Status status = parseHooks(*root, variant); !status.ok())
    return status;
  if (std::string error = variant.checkParams(variant.paramValues()); !error.empty())
    return Status::error("params: the declared values fail their bounds: " + error);
  return variant;
}

} // namespace

StatusOr<Variant> parseVariantDescription(std::string_view text) { return Parser().parse(text); }

} // namespace flashtile
