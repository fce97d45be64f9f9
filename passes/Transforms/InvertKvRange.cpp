//===- InvertKvRange.cpp - which query rows see a K/V tile ----------------===//
#include "passes/Transforms/InvertKvRange.h"

#include "mlir/IR/IRMapping.h"

using namespace mlir;

namespace flashtile::tile {

namespace {

/// Which converse of a non-decreasing bound e(r) to build.
enum class Side {
  FirstAbove, ///< the smallest row r with e(r) > k (rows from there on satisfy it)
  LastAtMost, ///< the largest row r with e(r) <= k (rows up to there satisfy it)
};

class Inverter {
public:
  Inverter(OpBuilder &builder, Block &rule, Value batch, Value head)
      : b(builder), loc(builder.getUnknownLoc()), rule(rule) {
    // The rule's (first, last, b, h): first and last are the row; b and h are the caller's.
    map.map(rule.getArgument(2), batch);
    map.map(rule.getArgument(3), head);
    seqlenQ = DimOp::create(b, loc, Dim::SeqlenQ);
  }

  /// The converse of `e` at key `k`, or failure when e is not of an invertible form.
  FailureOr<Value> invert(Value e, Value k, Side side);
  Value seqlenQ;

private:
  bool dependsOnRow(Value v) {
    return isComputedFrom(v, rule.getArgument(0)) || isComputedFrom(v, rule.getArgument(1));
  }
  /// `v` (independent of the row) rebuilt at the insertion point.
  Value rebuilt(Value v);
  Value c(int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32); }

  OpBuilder &b;
  Location loc;
  Block &rule;
  IRMapping map;
};

Value Inverter::rebuilt(Value v) {
  if (Value known = map.lookupOrNull(v))
    return known;
  Operation *def = v.getDefiningOp();
  assert(def && "a block argument other than b and h depends on the row");
  for (Value operand : def->getOperands())
    (void)rebuilt(operand);
  b.clone(*def, map);
  return map.lookup(v);
}

FailureOr<Value> Inverter::invert(Value e, Value k, Side side) {
  bool above = side == Side::FirstAbove;
  if (!dependsOnRow(e)) {
    // A constant bound holds for every row or for none.
    Value holds =
        arith::CmpIOp::create(b, loc, above ? arith::CmpIPredicate::sgt : arith::CmpIPredicate::sle, rebuilt(e), k);
    Value all = above ? c(0) : arith::SubIOp::create(b, loc, seqlenQ, c(1)).getResult();
    Value none = above ? seqlenQ : c(-1);
    return arith::SelectOp::create(b, loc, holds, all, none).getResult();
  }
  if (e == rule.getArgument(0) || e == rule.getArgument(1))
    return above ? arith::AddIOp::create(b, loc, k, c(1)).getResult() : k;
  Operation *def = e.getDefiningOp();
  if (!def)
    return failure();
  auto shifted = [&](Value x, Value newK) { return invert(x, newK, side); };
  // Both operands' converses; min and max of non-decreasing bounds combine them.
  auto both = [&](auto combine) -> FailureOr<Value> {
    FailureOr<Value> x = invert(def->getOperand(0), k, side), y = invert(def->getOperand(1), k, side);
    if (failed(x) || failed(y))
      return failure();
    return combine(*x, *y);
  };
  auto maxOf = [&](Value x, Value y) { return arith::MaxSIOp::create(b, loc, x, y).getResult(); };
  auto minOf = [&](Value x, Value y) { return arith::MinSIOp::create(b, loc, x, y).getResult(); };
  if (auto add = dyn_cast<arith::AddIOp>(def)) { // x + u > k  <=>  x > k − u
    if (!dependsOnRow(add.getRhs()))
      return shifted(add.getLhs(), arith::SubIOp::create(b, loc, k, rebuilt(add.getRhs())));
    if (!dependsOnRow(add.getLhs()))
      return shifted(add.getRhs(), arith::SubIOp::create(b, loc, k, rebuilt(add.getLhs())));
    return failure();
  }
  if (auto sub = dyn_cast<arith::SubIOp>(def)) { // x − u > k  <=>  x > k + u
    if (!dependsOnRow(sub.getRhs()))
      return shifted(sub.getLhs(), arith::AddIOp::create(b, loc, k, rebuilt(sub.getRhs())));
    return failure();
  }
  // min(x, y) > k needs both (rows from the later start on); min(x, y) <= k needs either (up to the later end).
  if (isa<arith::MinSIOp>(def))
    return both(maxOf);
  // max(x, y) > k needs either (from the earlier start); max(x, y) <= k needs both (up to the earlier end).
  if (isa<arith::MaxSIOp>(def))
    return both(minOf);
  if (auto select = dyn_cast<arith::SelectOp>(def); select && !dependsOnRow(select.getCondition())) {
    FailureOr<Value> x = invert(select.getTrueValue(), k, side), y = invert(select.getFalseValue(), k, side);
    if (failed(x) || failed(y))
      return failure();
    return arith::SelectOp::create(b, loc, rebuilt(select.getCondition()), *x, *y).getResult();
  }
  return failure();
}

} // namespace

QueryRows buildQueryRows(OpBuilder &builder, KvRangeOp rule, Value keyFirst, Value keyLast, Value batch, Value head) {
  Block &body = rule.getRule().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  Value lo = yield.getValues()[0], hi = yield.getValues()[1];
  Inverter inverter(builder, body, batch, head);
  Location loc = builder.getUnknownLoc();
  bool may = rule.getKind() == RangeKind::May;
  // may: hi(r) > k0 and lo(r) <= k1; full: hi(r) > k1 and lo(r) <= k0.
  FailureOr<Value> from = inverter.invert(hi, may ? keyFirst : keyLast, Side::FirstAbove);
  FailureOr<Value> last = inverter.invert(lo, may ? keyLast : keyFirst, Side::LastAtMost);
  Value zero = arith::ConstantIntOp::create(builder, loc, 0, 32), seqlenQ = inverter.seqlenQ;
  QueryRows rows;
  rows.exactLo = succeeded(from);
  rows.exactHi = succeeded(last);
  if (!may && (!rows.exactLo || !rows.exactHi)) {
    // No row is known to attend every key: the backward masks every tile it visits.
    rows.lo = rows.hi = zero;
    return rows;
  }
  Value begin = rows.exactLo ? *from : zero;
  Value end =
      rows.exactHi
          ? arith::AddIOp::create(builder, loc, *last, arith::ConstantIntOp::create(builder, loc, 1, 32)).getResult()
          : seqlenQ;
  auto clamp = [&](Value v, Value min, Value max) {
    return arith::MinSIOp::create(builder, loc, arith::MaxSIOp::create(builder, loc, v, min), max).getResult();
  };
  rows.lo = clamp(begin, zero, seqlenQ);
  rows.hi = clamp(end, rows.lo, seqlenQ);
  return rows;
}

QueryTiles buildQueryTiles(OpBuilder &builder, const QueryRows &may, const QueryRows &full, int64_t blockM) {
  Location loc = builder.getUnknownLoc();
  auto c = [&](int64_t v) { return arith::ConstantIntOp::create(builder, loc, v, 32).getResult(); };
  auto clamp = [&](Value v, Value lo, Value hi) {
    return arith::MinSIOp::create(builder, loc, arith::MaxSIOp::create(builder, loc, v, lo), hi).getResult();
  };
  Value bm = c(blockM), seqlenQ = DimOp::create(builder, loc, Dim::SeqlenQ);
  QueryTiles t;
  t.lo = arith::DivSIOp::create(builder, loc, may.lo, bm); // rows are nonnegative: division floors
  // No row, no tile (an empty [lo, lo) of rows may sit inside a tile).
  Value anyRow = arith::CmpIOp::create(builder, loc, arith::CmpIPredicate::slt, may.lo, may.hi);
  t.hi = arith::SelectOp::create(builder, loc, anyRow, arith::CeilDivSIOp::create(builder, loc, may.hi, bm), t.lo);
  // A tile is full when its rows of the sequence lie in [full.lo, full.hi): the last, partial tile too when
  // full.hi reaches seqlen_q.
  Value fullLo = arith::CeilDivSIOp::create(builder, loc, full.lo, bm);
  Value reachesEnd = arith::CmpIOp::create(builder, loc, arith::CmpIPredicate::sge, full.hi, seqlenQ);
  Value fullHi =
      arith::SelectOp::create(builder, loc, reachesEnd, arith::CeilDivSIOp::create(builder, loc, full.hi, bm),
                              arith::DivSIOp::create(builder, loc, full.hi, bm));
  t.fullLo = clamp(fullLo, t.lo, t.hi);
  t.fullHi = clamp(fullHi, t.fullLo, t.hi);
  return t;
}

} // namespace flashtile::tile
