//===- DifferentiateScore.cpp - reverse-mode derivatives of scalar hooks --===//
//
// A hook is straight-line SSA over scalars, so its derivative is one reverse sweep: rebuild the ops the result
// depends on (the primal), seed d result = 1, then visit the ops last to first, adding each one's local
// derivative times its result's adjoint into its float operands' adjoints. Values without an adjoint are zero.
//===----------------------------------------------------------------------===//
#include "passes/Transforms/DifferentiateScore.h"
#include "passes/IR/ProducerOrder.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <numbers>

using namespace mlir;

namespace flashtile::tile {

namespace {

bool isFloat(Value v) { return isa<FloatType>(v.getType()); }

/// The ops `root` is computed from, operands before users: those of `body`, and the pure ops outside it that the
/// hook reads (canonicalization hoists the hook's constants into the enclosing tile.func), which are rebuilt too.
/// A hook that reads another value from outside (a loop's index) cannot be rebuilt elsewhere.
FailureOr<SmallVector<Operation *>> opsReaching(Block &body, Value root, StringRef hook, StringRef variant) {
  auto rebuildable = [&](Operation *def) {
    return def->getBlock() == &body || (def->getNumRegions() == 0 && isMemoryEffectFree(def));
  };
  SmallVector<Operation *> ops = producersFirst(root, rebuildable);
  auto reachable = [&](Value v) -> LogicalResult {
    if (Operation *def = v.getDefiningOp(); def && !rebuildable(def))
      return def->emitError() << "is read by variant '" << variant << "''s " << hook
                              << " from outside it and cannot be rebuilt with its derivative";
    if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() != &body)
      return emitError(v.getLoc()) << "variant '" << variant << "''s " << hook
                                   << " reads a block argument from outside it: it cannot be differentiated";
    return success();
  };
  if (failed(reachable(root)))
    return failure();
  for (Operation *op : ops)
    for (Value operand : op->getOperands())
      if (failed(reachable(operand)))
        return failure();
  return ops;
}

class Differentiator {
public:
  Differentiator(OpBuilder &builder, StringRef hook, StringRef variant)
      : b(builder), loc(builder.getUnknownLoc()), hook(hook), variant(variant) {}

  FailureOr<HookDerivative> run(Block &body, ValueRange args, std::optional<unsigned> wrtArg);

private:
  // Builders that fold the trivial cases (a unit adjoint, a zero term), so a hook like ALiBi's gets ds'/ds = 1
  // as a constant rather than a chain of multiplications by one.
  Value constant(Type type, double v) { return arith::ConstantOp::create(b, loc, b.getFloatAttr(type, v)); }
  Value mul(Value x, Value y) {
    if (matchPattern(x, m_OneFloat()))
      return y;
    if (matchPattern(y, m_OneFloat()))
      return x;
    return b.createOrFold<arith::MulFOp>(loc, x, y);
  }
  Value div(Value x, Value y) { return b.createOrFold<arith::DivFOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.createOrFold<arith::SubFOp>(loc, x, y); }
  Value neg(Value x) { return b.createOrFold<arith::NegFOp>(loc, x); }
  Value cmp(arith::CmpFPredicate pred, Value x, Value y) { return arith::CmpFOp::create(b, loc, pred, x, y); }
  /// The adjoint where `cond` holds, zero elsewhere (and the converse): how select, min and max route it.
  Value where(Value cond, Value adj) {
    return arith::SelectOp::create(b, loc, cond, adj, constant(adj.getType(), 0.0));
  }
  Value whereNot(Value cond, Value adj) {
    return arith::SelectOp::create(b, loc, cond, constant(adj.getType(), 0.0), adj);
  }

  void accumulate(Value original, Value contribution) {
    auto [it, fresh] = adjoints.try_emplace(original, contribution);
    if (!fresh)
      it->second = b.createOrFold<arith::AddFOp>(loc, it->second, contribution);
  }
  /// Adds `op`'s local derivatives times `adj` (its result's adjoint) into its operands' adjoints.
  LogicalResult backpropagate(Operation *op, Value adj);

  OpBuilder &b;
  Location loc;
  StringRef hook, variant;
  IRMapping primal;                      // original value -> its rebuilt value
  llvm::DenseMap<Value, Value> adjoints; // original value -> d result / d value
  HookDerivative out;
  llvm::MapVector<StringRef, Value> paramPartials;
};

LogicalResult Differentiator::backpropagate(Operation *op, Value adj) {
  auto in = [&](unsigned k) { return primal.lookup(op->getOperand(k)); };
  auto orig = [&](unsigned k) { return op->getOperand(k); };
  Value result = primal.lookup(op->getResult(0));
  Type type = adj.getType();
  const double ln2 = std::numbers::ln2;
  auto minMax = [&](arith::CmpFPredicate firstWins) {
    // At a tie the first operand takes the whole adjoint (a subgradient; ties are measure zero).
    Value first = cmp(firstWins, in(0), in(1));
    accumulate(orig(0), where(first, adj));
    accumulate(orig(1), whereNot(first, adj));
  };
  using P = arith::CmpFPredicate;
  bool known = llvm::TypeSwitch<Operation *, bool>(op)
                   .Case([&](arith::AddFOp) {
                     accumulate(orig(0), adj);
                     accumulate(orig(1), adj);
                     return true;
                   })
                   .Case([&](arith::SubFOp) {
                     accumulate(orig(0), adj);
                     accumulate(orig(1), neg(adj));
                     return true;
                   })
                   .Case([&](arith::MulFOp) {
                     accumulate(orig(0), mul(adj, in(1)));
                     accumulate(orig(1), mul(adj, in(0)));
                     return true;
                   })
                   .Case([&](arith::DivFOp) { // x/y: 1/y and −(x/y)/y
                     accumulate(orig(0), div(adj, in(1)));
                     accumulate(orig(1), neg(div(mul(adj, result), in(1))));
                     return true;
                   })
                   .Case([&](arith::NegFOp) {
                     accumulate(orig(0), neg(adj));
                     return true;
                   })
                   .Case<arith::MaximumFOp, arith::MaxNumFOp>([&](Operation *) {
                     minMax(P::OGE);
                     return true;
                   })
                   .Case<arith::MinimumFOp, arith::MinNumFOp>([&](Operation *) {
                     minMax(P::OLE);
                     return true;
                   })
                   .Case([&](arith::SelectOp) {
                     accumulate(orig(1), where(in(0), adj));
                     accumulate(orig(2), whereNot(in(0), adj));
                     return true;
                   })
                   .Case([&](math::AbsFOp) { // sign(x), +1 at 0
                     Value nonNegative = cmp(P::OGE, in(0), constant(type, 0.0));
                     accumulate(orig(0), arith::SelectOp::create(b, loc, nonNegative, adj, neg(adj)));
                     return true;
                   })
                   .Case([&](math::TanhOp) { // 1 − tanh²
                     accumulate(orig(0), mul(adj, sub(constant(type, 1.0), mul(result, result))));
                     return true;
                   })
                   .Case([&](math::ExpOp) {
                     accumulate(orig(0), mul(adj, result));
                     return true;
                   })
                   .Case([&](math::Exp2Op) { // 2^x·ln 2
                     accumulate(orig(0), mul(mul(adj, result), constant(type, ln2)));
                     return true;
                   })
                   .Case([&](math::LogOp) {
                     accumulate(orig(0), div(adj, in(0)));
                     return true;
                   })
                   .Case([&](math::Log2Op) { // 1/(x·ln 2)
                     accumulate(orig(0), div(adj, mul(in(0), constant(type, ln2))));
                     return true;
                   })
                   .Case([&](math::SqrtOp) { // 1/(2·√x)
                     accumulate(orig(0), div(mul(adj, constant(type, 0.5)), result));
                     return true;
                   })
                   .Case([&](math::RsqrtOp) { // −x^(−3/2)/2 = −rsqrt(x)/(2x)
                     accumulate(orig(0), neg(div(mul(adj, mul(result, constant(type, 0.5))), in(0))));
                     return true;
                   })
                   .Case([&](math::FmaOp) {
                     accumulate(orig(0), mul(adj, in(1)));
                     accumulate(orig(1), mul(adj, in(0)));
                     accumulate(orig(2), adj);
                     return true;
                   })
                   .Default([](Operation *) { return false; });
  if (known)
    return success();
  return op->emitError() << "cannot differentiate '" << op->getName() << "' in variant '" << variant << "''s " << hook;
}

FailureOr<HookDerivative> Differentiator::run(Block &body, ValueRange args, std::optional<unsigned> wrtArg) {
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield || yield.getValues().size() != 1 || !isFloat(yield.getValues()[0]))
    return emitError(loc) << "variant '" << variant << "''s " << hook << " must yield one float to be differentiated";
  if (args.size() != body.getNumArguments())
    return emitError(loc) << "differentiating variant '" << variant << "''s " << hook << ": " << body.getNumArguments()
                          << " block arguments, " << args.size() << " values given";
  Value root = yield.getValues()[0];
  for (auto [arg, value] : llvm::zip_equal(body.getArguments(), args))
    primal.map(arg, value);
  FailureOr<SmallVector<Operation *>> ops = opsReaching(body, root, hook, variant);
  if (failed(ops))
    return failure();
  for (Operation *op : *ops)
    b.clone(*op, primal);
  out.value = primal.lookup(root);

  adjoints[root] = constant(root.getType(), 1.0);
  for (Operation *op : llvm::reverse(*ops)) {
    // Only float results carry an adjoint; integer and i1 ops (indices, comparisons) are constants here.
    if (op->getNumResults() != 1 || !isFloat(op->getResult(0)))
      continue;
    Value adj = adjoints.lookup(op->getResult(0));
    if (!adj)
      continue;
    if (auto param = dyn_cast<ParamOp>(op)) {
      auto [it, fresh] = paramPartials.try_emplace(param.getName(), adj);
      if (!fresh)
        it->second = b.createOrFold<arith::AddFOp>(loc, it->second, adj);
      continue;
    }
    if (auto input = dyn_cast<InputOp>(op)) {
      out.inputs.push_back({input.getName().str(), primal.lookup(input.getIndex()), adj});
      continue;
    }
    // Leaves and ops of integers only (a constant, the softmax scale, sitofp of an index) have no float input.
    if (llvm::none_of(op->getOperands(), isFloat))
      continue;
    if (failed(backpropagate(op, adj)))
      return failure();
  }
  if (wrtArg) {
    Value arg = body.getArgument(*wrtArg);
    out.dArg = adjoints.lookup(arg);
    if (!out.dArg)
      out.dArg = constant(arg.getType(), 0.0);
  }
  for (auto &[name, partial] : paramPartials)
    out.params.push_back({name.str(), partial});
  return std::move(out);
}

std::string variantOf(Operation *op) {
  FuncOp func = getEnclosingFunc(op);
  return func ? func.getVariant().str() : std::string();
}

} // namespace

FailureOr<HookDerivative> differentiateHook(OpBuilder &builder, Block &body, ValueRange args,
                                            std::optional<unsigned> wrtArg, StringRef hook, StringRef variant) {
  return Differentiator(builder, hook, variant).run(body, args, wrtArg);
}

FailureOr<HookDerivative> differentiateScoreMod(OpBuilder &builder, ScoreModOp op, ValueRange args) {
  std::string variant = variantOf(op);
  return differentiateHook(builder, op.getBody().front(), args, /*wrtArg=*/0, "score hook", variant);
}

FailureOr<HookDerivative> differentiateSink(OpBuilder &builder, Region &sink, ValueRange args) {
  std::string variant = variantOf(sink.getParentOp());
  return differentiateHook(builder, sink.front(), args, std::nullopt, "sink", variant);
}

} // namespace flashtile::tile
