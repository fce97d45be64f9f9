//===- TileBackwardOps.cpp - the verifiers of the backward programs' ops --===//
//
// tile.row_dot, tile.q_loop, tile.probs, tile.softmax_grad, tile.score_grad, tile.input_grad, tile.sink_grad,
// tile.dot_tn and tile.accumulate (TileOps.td): the ops of the backward's preprocess, main and postprocess programs
// (docs/backward.md). The forward's and the memory layer's ops are verified in TileDialect.cpp and TileMemoryOps.cpp.
//===----------------------------------------------------------------------===//
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileVerify.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace flashtile::tile;
using namespace flashtile::tile::detail;

//===----------------------------------------------------------------------===//
// The backward
//===----------------------------------------------------------------------===//

LogicalResult RowDotOp::verify() {
  auto a = cast<RankedTensorType>(getA().getType()), b = cast<RankedTensorType>(getB().getType());
  auto d = cast<RankedTensorType>(getResult().getType());
  if (a != b || a.getRank() != 2)
    return emitOpError() << "expects two rank-2 tiles of one type, got " << a << " and " << b;
  if (d.getRank() != 1 || !dimsCompatible(d.getDimSize(0), a.getDimSize(0)))
    return emitOpError() << "result must be one value per row (" << dimStr(a.getDimSize(0)) << "), got " << d;
  return success();
}

LogicalResult QLoopOp::verify() {
  if (static_cast<bool>(getLower()) != static_cast<bool>(getUpper()))
    return emitOpError() << "takes both bounds (from %lo to %hi) or neither";
  if (getSegment() != Segment::All && !getLower())
    return emitOpError() << "segment " << stringifySegment(getSegment()) << " needs bounds (from %lo to %hi)";
  SmallVector<Type> accs(getInits().getTypes());
  SmallVector<Type> args = {IntegerType::get(getContext(), 32)};
  args.append(accs);
  if (failed(checkRegionSignature(*this, getBody(), args, accs, "q_loop")))
    return failure();
  if (SmallVector<Type>(getResults().getTypes()) != accs)
    return emitOpError() << "results must have the types of the accumulators it starts from";
  return success();
}

/// A score tile (rows x keys) and one fp32 value per row.
static LogicalResult verifyRowsOf(Operation *op, Value tile, Value rows, StringRef what) {
  auto t = cast<RankedTensorType>(tile.getType()), r = cast<RankedTensorType>(rows.getType());
  if (t.getRank() != 2)
    return op->emitOpError() << "expects a rank-2 score tile, got " << t;
  if (r.getRank() != 1 || !dimsCompatible(r.getDimSize(0), t.getDimSize(0)))
    return op->emitOpError() << what << " must be one value per row (" << dimStr(t.getDimSize(0)) << "), got " << r;
  return success();
}

LogicalResult ProbsOp::verify() {
  if (getP().getType() != getS().getType())
    return emitOpError() << "P must have the score tile's type";
  return verifyRowsOf(*this, getS(), getLse(), "LSE");
}

LogicalResult SoftmaxGradOp::verify() {
  if (getP().getType() != getDp().getType() || getDs().getType() != getP().getType())
    return emitOpError() << "P, dP and dS must have one type";
  return verifyRowsOf(*this, getP(), getDelta(), "D");
}

LogicalResult ScoreGradOp::verify() {
  if (getDs().getType() != getS().getType())
    return emitOpError() << "dS and the scores must have one type";
  Builder b(getContext());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  return checkRegionSignature(*this, getBody(), {f32, i32, i32, i32, i32}, {f32}, "score_grad");
}

/// The f32 input `name` of the tile.func around `op`, and `op` inside a program of kind `kind`.
static LogicalResult checkGradientTarget(Operation *op, StringRef name, StringRef kind) {
  FuncOp func = getEnclosingFunc(op);
  if (!func || func.getKind() != kind)
    return op->emitOpError() << "belongs in a " << kind << " program";
  int64_t index = func.inputIndex(name);
  if (index < 0 || !cast<InputAttr>(func.getInputs()[index]).getElementType().isF32())
    return op->emitOpError() << "'" << name << "' is not an f32 input of @" << func.getSymName()
                             << " (declared: " << func.getInputs() << ")";
  return success();
}

/// Whether `value` is computed, inside `block`, from one of `args` (block arguments of `block`).
static bool dependsOnArgs(Value value, Block &block, ArrayRef<unsigned> args) {
  llvm::SmallVector<Value> work{value};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == &block && llvm::is_contained(args, arg.getArgNumber()))
        return true;
      continue;
    }
    if (Operation *def = v.getDefiningOp(); def && def->getBlock() == &block)
      llvm::append_range(work, def->getOperands());
  }
  return false;
}

LogicalResult InputGradOp::verify() {
  if (getDs().getType() != getS().getType())
    return emitOpError() << "dS' and the scores must have one type";
  if (failed(checkGradientTarget(*this, getName(), kBackwardMain)))
    return failure();
  Builder b(getContext());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  if (failed(checkRegionSignature(*this, getBody(), {f32, i32, i32, i32, i32}, {i32, f32}, "input_grad")))
    return failure();
  Block &body = getBody().front();
  // The index of (score, b, h, q, kv): from b and h only, so that an instance's terms share one element.
  if (dependsOnArgs(cast<YieldOp>(body.getTerminator()).getValues()[0], body, {0, 3, 4}))
    return emitOpError() << "cannot take the gradient of input '" << getName() << "' of variant '"
                         << getEnclosingFunc(*this).getVariant()
                         << "': the score hook reads it at an index that depends on the score, the query or the key, "
                            "and input gradients are reduced deterministically per (batch, head), so the index may "
                            "depend on b and h only";
  return success();
}

LogicalResult SinkGradOp::verify() {
  if (getDelta().getType() != getLse().getType() || cast<RankedTensorType>(getDelta().getType()).getRank() != 1)
    return emitOpError() << "D and LSE must be rows of one type (rank 1)";
  if (failed(checkGradientTarget(*this, getName(), kBackwardPreprocess)))
    return failure();
  Builder b(getContext());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  return checkRegionSignature(*this, getBody(), {i32, i32}, {f32, i32, f32}, "sink_grad");
}

/// A and B of A·B (AccumulateOp) or Aᵀ·B (DotTnOp, `transposed`): rank 2, B's rows are A's columns (A's rows when
/// transposed).
static LogicalResult verifyProduct(Operation *op, Value aValue, Value bValue, bool transposed) {
  auto a = cast<RankedTensorType>(aValue.getType()), b = cast<RankedTensorType>(bValue.getType());
  if (a.getRank() != 2 || b.getRank() != 2)
    return op->emitOpError() << "expects rank-2 tiles";
  int64_t inner = a.getDimSize(transposed ? 0 : 1);
  if (!dimsCompatible(inner, b.getDimSize(0)))
    return op->emitOpError() << "A's " << (transposed ? "rows" : "columns") << " (" << dimStr(inner)
                             << ") must equal B's rows (" << dimStr(b.getDimSize(0)) << ")";
  return success();
}

LogicalResult DotTnOp::verify() {
  if (failed(verifyProduct(*this, getA(), getB(), /*transposed=*/true)))
    return failure();
  auto a = cast<RankedTensorType>(getA().getType()), b = cast<RankedTensorType>(getB().getType());
  auto acc = cast<AccType>(getAcc().getType());
  if (b.getDimSize(1) != acc.getCols() || !dimsCompatible(a.getDimSize(1), acc.getRows()))
    return emitOpError() << "the accumulator must be (A columns) x (B columns)";
  return success();
}

LogicalResult AccumulateOp::verify() {
  const ProgramKind &kind = kindAround(*this);
  StringRef name = stringifyOperand(getOperand());
  if (getOperand() != Operand::DqAccum)
    return emitOpError() << "adds into an fp32 accumulator (dq_accum), not " << name;
  if (!kind.writesTensor(name))
    return emitOpError() << "a " << kind.name << " program writes " << joinNames(kind.writes) << ", not " << name;
  if (failed(verifyProduct(*this, getA(), getB(), /*transposed=*/false)))
    return failure();
  FuncOp func = getEnclosingFunc(*this);
  auto b = cast<RankedTensorType>(getB().getType());
  if (func && b.getDimSize(1) != func.getHeadDim())
    return emitOpError() << "B must have " << func.getHeadDim() << " columns (dQ's head dim), got "
                         << dimStr(b.getDimSize(1));
  return success();
}
