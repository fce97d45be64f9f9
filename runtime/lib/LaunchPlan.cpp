// LaunchPlan.cpp — the rules of a launch plan: parsing, evaluation and the plan's text form.
#include "flashtile/runtime/LaunchPlan.h"
#include "flashtile/runtime/KernelAbi.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <iterator>

using namespace flashtile;

struct PlanExpr::Node {
  enum class Kind { Constant, Symbol, Splits, Binary, Call } kind = Kind::Constant;
  long long value = 0;    // Constant
  size_t symbol = 0;      // Symbol: index into kPlanSymbols
  std::string op;         // Binary: + - * / > >= == != < <=; Call: cdiv, min, max
  std::vector<std::shared_ptr<const Node>> operands;
};

namespace {

using Node = PlanExpr::Node;
using NodePtr = std::shared_ptr<const Node>;

/// Values stay within ±2^62, so that every intermediate of + - * fits a long long before it is checked.
constexpr long long kMaxMagnitude = 1LL << 62;
constexpr int kWarpSize = 32;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxClusterBlocks = 16; // the largest (non-portable) cluster a block may opt in to
constexpr int kTmaSwizzleBytes[] = {32, 64, 128}; // the spans TMA swizzles boxes over (TensorMap.h, TmaSwizzle)
constexpr int kMaxTmaBoxRows = 256;
constexpr std::string_view kCalls[] = {"cdiv", "min", "max"};
constexpr std::string_view kComparisons[] = {">=", "<=", "==", "!=", ">", "<"};
/// The pointer field of the KV cache's error record (FlashtileFwdParams::kvErrors).
constexpr std::string_view kErrorRecordField = "kvErrors";

class Parser {
public:
  explicit Parser(std::string_view text) : text(text) {}

  StatusOr<NodePtr> parseAll() {
    StatusOr<NodePtr> node = comparison(0);
    if (!node.ok())
      return node;
    skipSpace();
    if (pos != text.size())
      return error("unexpected '" + std::string(1, text[pos]) + "'");
    return node;
  }

private:
  std::string_view text;
  size_t pos = 0;

  Status error(const std::string &what) const {
    return Status::error("rule '" + std::string(text) + "', at character " + std::to_string(pos + 1) + ": " + what);
  }
  void skipSpace() {
    while (pos < text.size() && text[pos] == ' ')
      ++pos;
  }
  bool eat(std::string_view token) {
    skipSpace();
    if (text.substr(pos, token.size()) != token)
      return false;
    pos += token.size();
    return true;
  }
  static NodePtr binary(std::string op, NodePtr a, NodePtr b) {
    auto node = std::make_shared<Node>();
    node->kind = Node::Kind::Binary;
    node->op = std::move(op);
    node->operands = {std::move(a), std::move(b)};
    return node;
  }

  StatusOr<NodePtr> comparison(int depth) {
    StatusOr<NodePtr> left = sum(depth);
    if (!left.ok())
      return left;
    for (std::string_view op : kComparisons)
      if (eat(op)) {
        StatusOr<NodePtr> right = sum(depth);
        if (!right.ok())
          return right;
        return binary(std::string(op), *left, *right);
      }
    return left;
  }
  StatusOr<NodePtr> sum(int depth) {
    StatusOr<NodePtr> left = product(depth);
    while (left.ok()) {
      std::string op = eat("+") ? "+" : eat("-") ? "-" : "";
      if (op.empty())
        break;
      StatusOr<NodePtr> right = product(depth);
      if (!right.ok())
        return right;
      left = binary(op, *left, *right);
    }
    return left;
  }
  StatusOr<NodePtr> product(int depth) {
    StatusOr<NodePtr> left = primary(depth);
    while (left.ok()) {
      std::string op = eat("*") ? "*" : eat("/") ? "/" : "";
      if (op.empty())
        break;
      StatusOr<NodePtr> right = primary(depth);
      if (!right.ok())
        return right;
      left = binary(op, *left, *right);
    }
    return left;
  }
  StatusOr<NodePtr> primary(int depth) {
    if (depth >= PlanExpr::kMaxDepth)
      return error("nested deeper than " + std::to_string(PlanExpr::kMaxDepth) + " levels");
    skipSpace();
    if (eat("(")) {
      StatusOr<NodePtr> inner = comparison(depth + 1);
      if (inner.ok() && !eat(")"))
        return error("expected ')'");
      return inner;
    }
    if (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      long long value = 0;
      auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), value);
      if (ec != std::errc() || value > kMaxMagnitude)
        return error("a literal past 2^62");
      pos = static_cast<size_t>(end - text.data());
      auto node = std::make_shared<Node>();
      node->value = value;
      return NodePtr(node);
    }
    size_t start = pos;
    while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_'))
      ++pos;
    std::string_view name = text.substr(start, pos - start);
    if (name.empty())
      return error("expected a number, a size, a call or '('");
    auto node = std::make_shared<Node>();
    if (std::find(std::begin(kCalls), std::end(kCalls), name) != std::end(kCalls)) {
      node->kind = Node::Kind::Call;
      node->op = std::string(name);
      if (!eat("("))
        return error("expected '(' after " + std::string(name));
      for (int i = 0; i < 2; ++i) {
        if (i && !eat(","))
          return error(std::string(name) + " takes two arguments");
        StatusOr<NodePtr> arg = comparison(depth + 1);
        if (!arg.ok())
          return arg;
        node->operands.push_back(*arg);
      }
      if (!eat(")"))
        return error("expected ')' after the arguments of " + std::string(name));
      return NodePtr(node);
    }
    if (name == kSplitsSymbol) {
      node->kind = Node::Kind::Splits;
      return NodePtr(node);
    }
    auto symbol = std::find(kPlanSymbols.begin(), kPlanSymbols.end(), name);
    if (symbol == kPlanSymbols.end()) {
      std::string known;
      for (std::string_view s : kPlanSymbols)
        known += std::string(s) + ", ";
      pos = start;
      return error("unknown size '" + std::string(name) + "' (known: " + known + std::string(kSplitsSymbol) +
                   "; calls: cdiv, min, max)");
    }
    node->kind = Node::Kind::Symbol;
    node->symbol = static_cast<size_t>(symbol - kPlanSymbols.begin());
    return NodePtr(node);
  }
};

long long symbolValue(const PlanSymbols &s, size_t index) {
  const long long values[] = {s.batch,   s.headsQ,  s.headsKv,  s.rows,    s.keys,    s.newRows,
                              s.headDim, s.headDimV, s.lseRows, s.sms, s.keyRows, s.deterministic};
  static_assert(std::size(values) == kPlanSymbols.size(), "a value for every symbol");
  return values[index];
}

StatusOr<long long> evalNode(const Node &node, const PlanSymbols &symbols) {
  switch (node.kind) {
  case Node::Kind::Constant:
    return node.value;
  case Node::Kind::Symbol:
    return symbolValue(symbols, node.symbol);
  case Node::Kind::Splits:
    return symbols.splits;
  default:
    break;
  }
  StatusOr<long long> a = evalNode(*node.operands[0], symbols);
  if (!a.ok())
    return a;
  StatusOr<long long> b = evalNode(*node.operands[1], symbols);
  if (!b.ok())
    return b;
  const std::string &op = node.op;
  long long r = 0;
  if (op == "+")
    r = *a + *b;
  else if (op == "-")
    r = *a - *b;
  else if (op == "*") {
    if (__builtin_mul_overflow(*a, *b, &r))
      return Status::error("a launch rule overflows (" + std::to_string(*a) + " * " + std::to_string(*b) + ")");
  } else if (op == "/" || op == "cdiv") {
    if (*b <= 0 || *a < 0)
      return Status::error("a launch rule divides " + std::to_string(*a) + " by " + std::to_string(*b) +
                           " (operands must be non-negative, the divisor positive)");
    r = op == "/" ? *a / *b : (*a + *b - 1) / *b;
  } else if (op == "min")
    r = std::min(*a, *b);
  else if (op == "max")
    r = std::max(*a, *b);
  else if (op == ">")
    r = *a > *b;
  else if (op == ">=")
    r = *a >= *b;
  else if (op == "<")
    r = *a < *b;
  else if (op == "<=")
    r = *a <= *b;
  else if (op == "==")
    r = *a == *b;
  else if (op == "!=")
    r = *a != *b;
  if (r > kMaxMagnitude || r < -kMaxMagnitude)
    return Status::error("a launch rule's value passes 2^62");
  return r;
}

bool nodeReads(const Node &node, std::string_view symbol) {
  if (node.kind == Node::Kind::Symbol)
    return kPlanSymbols[node.symbol] == symbol;
  if (node.kind == Node::Kind::Splits)
    return symbol == kSplitsSymbol;
  return std::any_of(node.operands.begin(), node.operands.end(),
                     [&](const NodePtr &operand) { return nodeReads(*operand, symbol); });
}

bool isIdentifier(std::string_view s) {
  return !s.empty() && !std::isdigit(static_cast<unsigned char>(s[0])) &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

Status planError(const std::string &field, const std::string &problem) {
  return Status::error("field '" + field + "': " + problem);
}

/// Splits `text` at `separator`, outside parentheses.
std::vector<std::string> splitTop(std::string_view text, char separator) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == separator && depth == 0)) {
      parts.emplace_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '(')
      ++depth;
    else if (text[i] == ')')
      --depth;
  }
  return parts;
}

StatusOr<int> parseIntField(const std::string &field, std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return planError(field, "'" + std::string(text) + "' is not an integer");
  return value;
}

StatusOr<PlanExpr> parseRule(const std::string &field, std::string_view text) {
  StatusOr<PlanExpr> rule = PlanExpr::parse(text);
  if (!rule.ok())
    return planError(field, rule.status().message());
  return rule;
}

/// Removes and returns `fields[key]`, if present.
std::optional<std::string> take(std::map<std::string, std::string, std::less<>> &fields, const std::string &key) {
  auto it = fields.find(key);
  if (it == fields.end())
    return std::nullopt;
  std::string value = std::move(it->second);
  fields.erase(it);
  return value;
}

/// `names` joined by ", ", for messages.
template <size_t N> std::string joinedNames(const std::array<std::string_view, N> &names) {
  std::string text;
  for (std::string_view name : names)
    text += (text.empty() ? "" : ", ") + std::string(name);
  return text;
}

/// Field lists: `name@rule;name@rule` (workspace bindings).
std::string joinBindings(const std::vector<std::pair<std::string, PlanExpr>> &bind) {
  std::string out;
  for (const auto &[name, offset] : bind)
    out += (out.empty() ? "" : ";") + name + "@" + offset.text();
  return out;
}

template <size_t N> bool listed(const std::array<std::string_view, N> &names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

} // namespace

PlanExpr::PlanExpr() : source("0"), root(std::make_shared<Node>()) {}
PlanExpr::~PlanExpr() = default;
PlanExpr::PlanExpr(const PlanExpr &) = default;
PlanExpr &PlanExpr::operator=(const PlanExpr &) = default;

PlanExpr PlanExpr::constant(long long value) {
  PlanExpr expr;
  auto node = std::make_shared<Node>();
  node->value = value;
  expr.root = node;
  expr.source = std::to_string(value);
  return expr;
}

StatusOr<PlanExpr> PlanExpr::parse(std::string_view text) {
  StatusOr<NodePtr> root = Parser(text).parseAll();
  if (!root.ok())
    return root.status();
  PlanExpr expr;
  expr.source = std::string(text);
  expr.root = *root;
  return expr;
}

StatusOr<long long> PlanExpr::eval(const PlanSymbols &symbols) const { return evalNode(*root, symbols); }

bool PlanExpr::reads(std::string_view symbol) const { return nodeReads(*root, symbol); }

std::string LaunchPlan::serialize() const {
  std::string text;
  auto line = [&](const std::string &key, const std::string &value) { text += key + "=" + value + "\n"; };
  for (size_t i = 0; i < launches.size(); ++i) {
    const PlanLaunch &l = launches[i];
    const std::string p = "launch." + std::to_string(i) + ".";
    line(p + "entry", l.entry);
    line(p + "grid", l.grid[0].text() + ";" + l.grid[1].text() + ";" + l.grid[2].text());
    line(p + "threads", std::to_string(l.threads));
    if (l.cluster != std::array<int, 3>{1, 1, 1})
      line(p + "cluster",
           std::to_string(l.cluster[0]) + "x" + std::to_string(l.cluster[1]) + "x" + std::to_string(l.cluster[2]));
    line(p + "smemBytes", std::to_string(l.smemBytes));
    if (l.when)
      line(p + "when", l.when->text());
    if (l.repeat) {
      line(p + "repeat", l.repeat->text());
      line(p + "repeatField", l.repeatField);
    }
    if (!l.tensorMaps.empty()) {
      std::string maps;
      for (const PlanTensorMap &m : l.tensorMaps)
        maps += (maps.empty() ? "" : ",") + m.tensor + ":" + std::to_string(m.boxRows) + ":" +
                std::to_string(m.swizzleBytes);
      line(p + "tensorMaps", maps);
    }
    if (l.dependent)
      line(p + "dependent", "1");
  }
  for (size_t i = 0; i < workspaces.size(); ++i) {
    const PlanWorkspace &w = workspaces[i];
    const std::string p = "workspace." + std::to_string(i) + ".";
    line(p + "name", w.name);
    line(p + "bytes", w.bytes.text());
    if (w.when)
      line(p + "when", w.when->text());
    if (w.zeroed)
      line(p + "zeroed", "1");
    if (w.errorRecord)
      line(p + "errorRecord", "1");
    line(p + "bind", joinBindings(w.bind));
  }
  // In name order, as parse() reads them back.
  std::vector<std::pair<std::string, PlanExpr>> sorted = set;
  std::sort(sorted.begin(), sorted.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
  for (const auto &[field, rule] : sorted)
    line("set." + field, rule.text());
  if (splits) {
    line("splits.blocks", splits->blocks.text());
    line("splits.kvTiles", splits->kvTiles.text());
    line("splits.occupancyOf", std::to_string(splits->occupancyOf));
  }
  return text;
}

namespace {

using PlanFields = std::map<std::string, std::string, std::less<>>;

/// A `0` or `1` field into `target`, where present.
Status takeFlag(PlanFields &fields, const std::string &key, bool &target) {
  if (std::optional<std::string> flag = take(fields, key)) {
    if (*flag != "0" && *flag != "1")
      return planError(key, "'" + *flag + "' is not 0 or 1");
    target = *flag == "1";
  }
  return Status();
}

/// `<p>grid`: three rules separated by ';'.
Status parseGrid(PlanFields &fields, const std::string &p, PlanLaunch &launch) {
  std::optional<std::string> grid = take(fields, p + "grid");
  if (!grid)
    return planError(p + "grid", "missing");
  std::vector<std::string> dims = splitTop(*grid, ';');
  if (dims.size() != 3)
    return planError(p + "grid", "'" + *grid + "' is not three rules separated by ';'");
  for (size_t d = 0; d < 3; ++d) {
    StatusOr<PlanExpr> rule = parseRule(p + "grid", dims[d]);
    if (!rule.ok())
      return rule.status();
    launch.grid[d] = *rule;
  }
  return Status();
}

/// `<p>cluster`, where present: XxYxZ.
Status parseCluster(PlanFields &fields, const std::string &p, PlanLaunch &launch) {
  if (std::optional<std::string> cluster = take(fields, p + "cluster")) {
    std::vector<std::string> dims = splitTop(*cluster, 'x');
    if (dims.size() != 3)
      return planError(p + "cluster", "'" + *cluster + "' is not XxYxZ");
    for (size_t d = 0; d < 3; ++d) {
      StatusOr<int> parsed = parseIntField(p + "cluster", dims[d]);
      if (!parsed.ok())
        return parsed.status();
      launch.cluster[d] = *parsed;
    }
  }
  return Status();
}

/// `<p>tensorMaps`, where present: tensor:boxRows:swizzleBytes, separated by ','.
Status parseTensorMaps(PlanFields &fields, const std::string &p, PlanLaunch &launch) {
  if (std::optional<std::string> maps = take(fields, p + "tensorMaps"))
    for (const std::string &item : splitTop(*maps, ',')) {
      std::vector<std::string> parts = splitTop(item, ':');
      if (parts.size() != 3)
        return planError(p + "tensorMaps", "'" + item + "' is not tensor:boxRows:swizzleBytes");
      PlanTensorMap map{parts[0]};
      for (auto [text, target] : {std::pair{&parts[1], &map.boxRows}, {&parts[2], &map.swizzleBytes}}) {
        StatusOr<int> parsed = parseIntField(p + "tensorMaps", *text);
        if (!parsed.ok())
          return parsed.status();
        *target = *parsed;
      }
      launch.tensorMaps.push_back(map);
    }
  return Status();
}

/// The fields of the launch whose keys start with `p` (`launch.<i>.`), after its entry, in the order they are
/// checked: grid, threads, smemBytes, cluster, when, repeat, repeatField, tensorMaps, dependent.
Status parseLaunch(PlanFields &fields, const std::string &p, PlanLaunch &launch) {
  if (Status status = parseGrid(fields, p, launch); !status.ok())
    return status;
  for (auto [name, target] : {std::pair{"threads", &launch.threads}, {"smemBytes", &launch.smemBytes}}) {
    std::optional<std::string> value = take(fields, p + name);
    if (!value)
      return planError(p + name, "missing");
    StatusOr<int> parsed = parseIntField(p + name, *value);
    if (!parsed.ok())
      return parsed.status();
    *target = *parsed;
  }
  if (Status status = parseCluster(fields, p, launch); !status.ok())
    return status;
  for (auto [name, target] : {std::pair{"when", &launch.when}, {"repeat", &launch.repeat}})
    if (std::optional<std::string> text = take(fields, p + name)) {
      StatusOr<PlanExpr> rule = parseRule(p + name, *text);
      if (!rule.ok())
        return rule.status();
      *target = *rule;
    }
  if (std::optional<std::string> field = take(fields, p + "repeatField"))
    launch.repeatField = *field;
  if (Status status = parseTensorMaps(fields, p, launch); !status.ok())
    return status;
  return takeFlag(fields, p + "dependent", launch.dependent);
}

/// The fields of the workspace whose keys start with `p` (`workspace.<i>.`), after its name: bytes, when, zeroed,
/// errorRecord, bind.
Status parseWorkspace(PlanFields &fields, const std::string &p, PlanWorkspace &workspace) {
  std::optional<std::string> bytes = take(fields, p + "bytes");
  if (!bytes)
    return planError(p + "bytes", "missing");
  StatusOr<PlanExpr> size = parseRule(p + "bytes", *bytes);
  if (!size.ok())
    return size.status();
  workspace.bytes = *size;
  if (std::optional<std::string> text = take(fields, p + "when")) {
    StatusOr<PlanExpr> rule = parseRule(p + "when", *text);
    if (!rule.ok())
      return rule.status();
    workspace.when = *rule;
  }
  if (Status status = takeFlag(fields, p + "zeroed", workspace.zeroed); !status.ok())
    return status;
  if (Status status = takeFlag(fields, p + "errorRecord", workspace.errorRecord); !status.ok())
    return status;
  std::optional<std::string> bind = take(fields, p + "bind");
  if (!bind)
    return planError(p + "bind", "missing");
  for (const std::string &item : splitTop(*bind, ';')) {
    size_t at = item.find('@');
    if (at == std::string::npos)
      return planError(p + "bind", "'" + item + "' is not field@offset");
    StatusOr<PlanExpr> offset = parseRule(p + "bind", item.substr(at + 1));
    if (!offset.ok())
      return offset.status();
    workspace.bind.emplace_back(item.substr(0, at), *offset);
  }
  return Status();
}

/// Every `set.<field>` rule, in the fields' (name) order.
Status parseSetRules(PlanFields &fields, std::vector<std::pair<std::string, PlanExpr>> &set) {
  for (auto it = fields.begin(); it != fields.end();) {
    if (it->first.rfind("set.", 0) != 0) {
      ++it;
      continue;
    }
    StatusOr<PlanExpr> rule = parseRule(it->first, it->second);
    if (!rule.ok())
      return rule.status();
    set.emplace_back(it->first.substr(4), *rule);
    it = fields.erase(it);
  }
  return Status();
}

/// `splits.blocks`, `splits.kvTiles` and `splits.occupancyOf`: all three or none.
Status parseSplits(PlanFields &fields, std::optional<PlanSplits> &splits) {
  std::optional<std::string> blocks = take(fields, "splits.blocks");
  std::optional<std::string> kvTiles = take(fields, "splits.kvTiles");
  std::optional<std::string> occupancyOf = take(fields, "splits.occupancyOf");
  if (!blocks && !kvTiles && !occupancyOf)
    return Status();
  if (!blocks || !kvTiles || !occupancyOf)
    return planError("splits", "needs blocks, kvTiles and occupancyOf together");
  PlanSplits rule;
  StatusOr<PlanExpr> b = parseRule("splits.blocks", *blocks), k = parseRule("splits.kvTiles", *kvTiles);
  if (!b.ok())
    return b.status();
  if (!k.ok())
    return k.status();
  StatusOr<int> index = parseIntField("splits.occupancyOf", *occupancyOf);
  if (!index.ok())
    return index.status();
  rule.blocks = *b;
  rule.kvTiles = *k;
  rule.occupancyOf = *index;
  splits = rule;
  return Status();
}

} // namespace

StatusOr<LaunchPlan> LaunchPlan::parse(std::map<std::string, std::string, std::less<>> &fields) {
  LaunchPlan plan;
  for (size_t i = 0;; ++i) {
    const std::string p = "launch." + std::to_string(i) + ".";
    std::optional<std::string> entry = take(fields, p + "entry");
    if (!entry)
      break;
    PlanLaunch launch;
    launch.entry = *entry;
    if (Status status = parseLaunch(fields, p, launch); !status.ok())
      return status;
    plan.launches.push_back(std::move(launch));
  }
  for (size_t i = 0;; ++i) {
    const std::string p = "workspace." + std::to_string(i) + ".";
    std::optional<std::string> name = take(fields, p + "name");
    if (!name)
      break;
    PlanWorkspace workspace;
    workspace.name = *name;
    if (Status status = parseWorkspace(fields, p, workspace); !status.ok())
      return status;
    plan.workspaces.push_back(std::move(workspace));
  }
  if (Status status = parseSetRules(fields, plan.set); !status.ok())
    return status;
  if (Status status = parseSplits(fields, plan.splits); !status.ok())
    return status;
  return plan;
}

Status LaunchPlan::verify(int maxSmem) const {
  if (launches.empty())
    return planError("launch.0.entry", "missing: a plan launches at least one kernel");
  for (size_t i = 0; i < launches.size(); ++i) {
    const PlanLaunch &l = launches[i];
    const std::string p = "launch." + std::to_string(i) + ".";
    if (!isIdentifier(l.entry))
      return planError(p + "entry", "'" + l.entry + "' is not a C identifier");
    if (l.threads < kWarpSize || l.threads > kMaxThreadsPerBlock || l.threads % kWarpSize != 0)
      return planError(p + "threads", std::to_string(l.threads) + " is not a multiple of 32 in [32, 1024]");
    if (l.smemBytes < 0 || l.smemBytes > maxSmem)
      return planError(p + "smemBytes", std::to_string(l.smemBytes) + " is not in [0, " + std::to_string(maxSmem) +
                                            "] (the most a block may use on this arch)");
    const long long clusterBlocks = 1LL * l.cluster[0] * l.cluster[1] * l.cluster[2];
    if (std::any_of(l.cluster.begin(), l.cluster.end(), [](int d) { return d < 1; }) ||
        clusterBlocks > kMaxClusterBlocks)
      return planError(p + "cluster", "dims must be positive with at most " + std::to_string(kMaxClusterBlocks) +
                                          " blocks in a cluster");
    if (l.repeat.has_value() != !l.repeatField.empty() ||
        (l.repeat && !listed(kPlanIntFields, l.repeatField)))
      return planError(p + "repeatField", "'" + l.repeatField +
                                              "' must come with repeat, and be an int field of the kernel parameters "
                                              "(" + joinedNames(kPlanIntFields) + ")");
    if (!l.tensorMaps.empty()) {
      // The kernel's second parameter is AttentionTensorMaps (q, k, v), or a backward kernel's BackwardTensorMaps (q,
      // k, v, do: dO's box Q's): the boxes of K and V are one tile's keys.
      const size_t n = l.tensorMaps.size();
      const bool qkv = (n == 3 || (n == 4 && l.tensorMaps[3].tensor == "do" &&
                                   l.tensorMaps[3].boxRows == l.tensorMaps[0].boxRows)) &&
                       l.tensorMaps[0].tensor == "q" && l.tensorMaps[1].tensor == "k" &&
                       l.tensorMaps[2].tensor == "v" && l.tensorMaps[1].boxRows == l.tensorMaps[2].boxRows;
      // One span for the three: the kernel reads every tile in one layout (codegen/sm90/README.md).
      const int span = l.tensorMaps[0].swizzleBytes;
      const bool boxes = std::find(std::begin(kTmaSwizzleBytes), std::end(kTmaSwizzleBytes), span) !=
                             std::end(kTmaSwizzleBytes) &&
                         std::all_of(l.tensorMaps.begin(), l.tensorMaps.end(), [span](const PlanTensorMap &m) {
                           return m.boxRows >= 1 && m.boxRows <= kMaxTmaBoxRows && m.swizzleBytes == span;
                         });
      if (!qkv || !boxes)
        return planError(p + "tensorMaps", "the runtime encodes q, k, v in that order (a backward kernel's: q, k, v, "
                                           "do, dO's box Q's), K's and V's boxes of the same rows (1 to 256), all "
                                           "swizzled over one span of 32, 64 or 128 bytes");
    }
    if (i == 0 && l.dependent)
      return planError(p + "dependent", "the first launch has no launch before it to depend on");
  }
  for (size_t i = 0; i < workspaces.size(); ++i) {
    const PlanWorkspace &w = workspaces[i];
    const std::string p = "workspace." + std::to_string(i) + ".";
    if (!isIdentifier(w.name))
      return planError(p + "name", "'" + w.name + "' is not an identifier");
    if (w.bind.empty())
      return planError(p + "bind", "binds no field; a workspace no kernel reads is not needed");
    for (const auto &[field, offset] : w.bind) {
      if (!listed(kPlanPointerFields, field))
        return planError(p + "bind", "'" + field + "' is not a pointer field of the kernel parameters (" +
                                         joinedNames(kPlanPointerFields) + ")");
      if ((field == kErrorRecordField) != w.errorRecord)
        return planError(p + "bind", w.errorRecord ? "an error record binds kvErrors only"
                                                   : "kvErrors points into the runtime's error record: only a "
                                                     "workspace with errorRecord set binds it");
    }
    if (w.errorRecord) {
      // The runtime keeps one record per context and reads it as a FlashtileKvError: its shape is fixed.
      const bool atStart = w.bind.size() == 1 && w.bind[0].second.text() == "0";
      const bool sized = w.bytes.text() == std::to_string(sizeof(FlashtileKvError));
      if (!atStart || !sized || w.when || w.zeroed)
        return planError(p + "errorRecord", "an error record binds kvErrors at 0, is " +
                                                std::to_string(sizeof(FlashtileKvError)) +
                                                " bytes (FlashtileKvError), and has no `when` and no per-call zeroing");
    }
  }
  for (const auto &[field, rule] : set)
    if (!listed(kPlanIntFields, field))
      return planError("set." + field, "'" + field + "' is not an int field of the kernel parameters (" +
                                           joinedNames(kPlanIntFields) + ")");
  if (splits) {
    if (splits->occupancyOf < 0 || static_cast<size_t>(splits->occupancyOf) >= launches.size())
      return planError("splits.occupancyOf", std::to_string(splits->occupancyOf) + " is not a launch of the plan");
    if (splits->blocks.reads(kSplitsSymbol) || splits->kvTiles.reads(kSplitsSymbol))
      return planError("splits", "the split rule cannot read the split count it decides");
  } else if (reads(kSplitsSymbol)) {
    return planError("splits", "rules read the split count, but the plan has no split rule");
  }
  return Status();
}

const PlanLaunch *LaunchPlan::launchOf(std::string_view entry) const {
  for (const PlanLaunch &launch : launches)
    if (launch.entry == entry)
      return &launch;
  return nullptr;
}

bool LaunchPlan::reads(std::string_view symbol) const {
  auto optionalReads = [&](const std::optional<PlanExpr> &e) { return e && e->reads(symbol); };
  for (const PlanLaunch &l : launches)
    if (std::any_of(l.grid.begin(), l.grid.end(), [&](const PlanExpr &e) { return e.reads(symbol); }) ||
        optionalReads(l.when) || optionalReads(l.repeat))
      return true;
  for (const PlanWorkspace &w : workspaces)
    if (w.bytes.reads(symbol) || optionalReads(w.when) ||
        std::any_of(w.bind.begin(), w.bind.end(), [&](const auto &b) { return b.second.reads(symbol); }))
      return true;
  if (std::any_of(set.begin(), set.end(), [&](const auto &s) { return s.second.reads(symbol); }))
    return true;
  return splits && (splits->blocks.reads(symbol) || splits->kvTiles.reads(symbol));
}

std::string LaunchPlan::describe() const {
  std::string text;
  for (const PlanLaunch &l : launches) {
    text += l.entry + ": grid (" + l.grid[0].text() + ", " + l.grid[1].text() + ", " + l.grid[2].text() +
            "), block (" + std::to_string(l.threads) + "), " + std::to_string(l.smemBytes) + " bytes of shared memory";
    if (l.cluster != std::array<int, 3>{1, 1, 1})
      text += ", cluster " + std::to_string(l.cluster[0]) + "x" + std::to_string(l.cluster[1]) + "x" +
              std::to_string(l.cluster[2]);
    if (l.when)
      text += ", when " + l.when->text();
    if (l.repeat)
      text += ", " + l.repeat->text() + " times (" + l.repeatField + " = 0, 1, ...)";
    if (!l.tensorMaps.empty())
    {
      text += ", TMA descriptors of";
      for (size_t m = 0; m < l.tensorMaps.size(); ++m)
        text += (m ? ", " : " ") + l.tensorMaps[m].tensor;
    }
    if (l.dependent)
      text += ", programmatic dependent launch after the previous one";
    text += "\n";
  }
  for (const PlanWorkspace &w : workspaces)
    text += "workspace " + w.name + ": " + w.bytes.text() + " bytes" + (w.zeroed ? ", zeroed" : "") +
            (w.errorRecord ? ", the runtime's error record (kept across calls)" : "") +
            (w.when ? ", when " + w.when->text() : "") + " (" + joinBindings(w.bind) + ")\n";
  for (const auto &[field, rule] : set)
    text += "params." + field + " = " + rule.text() + "\n";
  if (splits)
    text += "splits: the caller's, or the split heuristic over " + splits->blocks.text() + " blocks and " +
            splits->kvTiles.text() + " key tiles\n";
  return text;
}
