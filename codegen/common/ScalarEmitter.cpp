//===- ScalarEmitter.cpp - scalar IR as C expressions and statements ------===//
#include "codegen/common/ScalarEmitter.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstdio>

using namespace mlir;

namespace flashtile::codegen {

//===----------------------------------------------------------------------===//
// Names and helpers
//===----------------------------------------------------------------------===//

bool NameScopes::taken(StringRef name) const {
  return llvm::any_of(scopes, [&](const llvm::StringSet<> &scope) { return scope.contains(name); });
}

std::string NameScopes::unique(StringRef hint) {
  std::string name = hint.str();
  for (int suffix = 1; taken(name); ++suffix)
    name = hint.str() + std::to_string(suffix);
  reserve(name);
  return name;
}

std::string ScalarHelpers::definitions() const {
  std::string out;
  if (ceilDiv || floorDiv)
    out += "// Signed integer division rounding up / down (arith.ceildivsi / arith.floordivsi).\n";
  if (ceilDiv)
    out += "__device__ __forceinline__ int ceilDiv(int a, int b) { return a / b + (a % b != 0 && (a < 0) == (b < 0)); "
           "}\n";
  if (floorDiv)
    out += "__device__ __forceinline__ int floorDiv(int a, int b) { return a / b - (a % b != 0 && (a < 0) != (b < "
           "0)); }\n";
  return out;
}

//===----------------------------------------------------------------------===//
// Literals and types
//===----------------------------------------------------------------------===//

namespace {

CExpr floatLiteral(const APFloat &value) {
  if (value.isNaN())
    return {"__int_as_float(0x7fffffff)", true};
  if (value.isInfinity())
    return value.isNegative() ? CExpr{"-__int_as_float(0x7f800000)", false} : CExpr{"__int_as_float(0x7f800000)", true};
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value.convertToFloat());
  std::string text = buffer;
  if (text.find_first_of(".e") == std::string::npos)
    text += ".0";
  return {text + "f", !value.isNegative()};
}

FailureOr<CExpr> integerLiteral(const APInt &value, unsigned width) {
  if (width == 1)
    return CExpr{value.isZero() ? "false" : "true", true};
  int64_t v = value.getSExtValue();
  std::string suffix = width == 64 ? "LL" : "";
  // The most negative value has no literal: its negation overflows.
  if (width == 32 && v == INT32_MIN)
    return CExpr{"-2147483647 - 1", false};
  if (width == 64 && v == INT64_MIN)
    return CExpr{"-9223372036854775807LL - 1", false};
  return CExpr{std::to_string(v) + suffix, v >= 0};
}

StringRef dimField(tile::Dim dim) {
  switch (dim) {
  case tile::Dim::Batch:
    return "p.batch";
  case tile::Dim::HeadsQ:
    return "p.headsQ";
  case tile::Dim::HeadsKv:
    return "p.headsKv";
  case tile::Dim::SeqlenQ:
    return "p.seqlenQ";
  case tile::Dim::SeqlenK:
    return "p.seqlenK";
  case tile::Dim::KeyOffset: // computed once per block (FlashtileSequence): per score, its load of cuSeqlensK was a branch
    return "p.keyOffset";
  case tile::Dim::SplitBegin: // the keys of the block's split (split-KV), computed once per block like keyOffset
    return "p.splitBegin";
  case tile::Dim::SplitEnd:
    return "p.splitEnd";
  case tile::Dim::KvStep: // the launch's K/V tile (K/V-step programs; 0 in other launches)
    return "p.kvStep";
  case tile::Dim::BatchIndex:
    return "blockBatch";
  case tile::Dim::HeadIndex:
    return "blockHead";
  case tile::Dim::KvTile: // the K/V tile of a backward_main block; the forward's blocks own Q tiles
    return "blockKvTile";
  // A block of a larger problem (tile.position_offsets): computed once per block from FlashtilePositions.
  case tile::Dim::QOffset:
    return "p.qOffset";
  case tile::Dim::KOffset:
    return "p.kOffset";
  case tile::Dim::SeqlenQGlobal:
    return "p.seqlenQGlobal";
  case tile::Dim::SeqlenKGlobal:
    return "p.seqlenKGlobal";
  case tile::Dim::KeyOffsetGlobal:
    return "p.keyOffsetGlobal";
  case tile::Dim::HeadOffset:
    return "p.headOffset";
  case tile::Dim::HeadsQGlobal:
    return "p.headsQGlobal";
  case tile::Dim::HeadsKvGlobal:
    return "p.headsKvGlobal";
  }
  llvm_unreachable("a tile.dim the CUDA printer does not know");
}

std::string join(ArrayRef<CExpr> args) {
  std::string out;
  for (const CExpr &a : args)
    out += (out.empty() ? "" : ", ") + a.text;
  return out;
}

/// `a <cOp> b` of two printed operands.
CExpr binaryOf(ArrayRef<CExpr> in, StringRef cOp) {
  return CExpr{in[0].operand() + " " + cOp.str() + " " + in[1].operand(), false};
}

/// An integer comparison; an unsigned predicate compares the operands cast to unsigned.
FailureOr<CExpr> printCmpI(arith::CmpIOp c, SmallVector<CExpr, 3> in, bool isI32) {
  using P = arith::CmpIPredicate;
  bool isUnsigned = llvm::is_contained({P::ult, P::ule, P::ugt, P::uge}, c.getPredicate());
  if (isUnsigned) {
    std::string cast = isI32 ? "static_cast<unsigned>" : "static_cast<unsigned long long>";
    for (CExpr &e : in)
      e = CExpr{cast + "(" + e.text + ")", true};
  }
  switch (c.getPredicate()) {
  case P::eq:
    return binaryOf(in, "==");
  case P::ne:
    return binaryOf(in, "!=");
  case P::slt:
  case P::ult:
    return binaryOf(in, "<");
  case P::sle:
  case P::ule:
    return binaryOf(in, "<=");
  case P::sgt:
  case P::ugt:
    return binaryOf(in, ">");
  case P::sge:
  case P::uge:
    return binaryOf(in, ">=");
  }
  return c.emitOpError() << "has an unknown predicate";
}

/// A float comparison: ordered predicates as C's operators, the unordered ones (true where an operand is NaN) as the
/// negation of the opposite ordered one.
FailureOr<CExpr> printCmpF(arith::CmpFOp c, ArrayRef<CExpr> in) {
  using P = arith::CmpFPredicate;
  std::string a = in[0].operand(), b = in[1].operand();
  auto expr = [](std::string text, bool atom = false) { return CExpr{std::move(text), atom}; };
  switch (c.getPredicate()) {
  case P::AlwaysFalse:
    return expr("false", true);
  case P::AlwaysTrue:
    return expr("true", true);
  case P::OEQ:
    return binaryOf(in, "==");
  case P::OGT:
    return binaryOf(in, ">");
  case P::OGE:
    return binaryOf(in, ">=");
  case P::OLT:
    return binaryOf(in, "<");
  case P::OLE:
    return binaryOf(in, "<=");
  case P::UNE:
    return binaryOf(in, "!=");
  case P::ONE:
    return expr(a + " < " + b + " || " + a + " > " + b);
  case P::ORD:
    return expr(a + " == " + a + " && " + b + " == " + b);
  case P::UNO:
    return expr(a + " != " + a + " || " + b + " != " + b);
  case P::UEQ:
    return expr("!(" + a + " < " + b + " || " + a + " > " + b + ")", true);
  case P::UGT:
    return expr("!(" + a + " <= " + b + ")", true);
  case P::UGE:
    return expr("!(" + a + " < " + b + ")", true);
  case P::ULT:
    return expr("!(" + a + " >= " + b + ")", true);
  case P::ULE:
    return expr("!(" + a + " > " + b + ")", true);
  }
  return c.emitOpError() << "has an unknown predicate";
}

} // namespace

FailureOr<std::string> ScalarEmitter::cType(Type type) {
  if (type.isInteger(1))
    return std::string("bool");
  if (type.isInteger(32))
    return std::string("int");
  if (type.isInteger(64))
    return std::string("long long");
  if (type.isF32())
    return std::string("float");
  return failure();
}

bool ScalarEmitter::isScalarOp(Operation *op) {
  return isa<arith::ConstantOp, arith::AddIOp, arith::SubIOp, arith::MulIOp, arith::DivSIOp, arith::CeilDivSIOp,
             arith::FloorDivSIOp, arith::RemSIOp, arith::MinSIOp, arith::MaxSIOp, arith::CmpIOp, arith::AndIOp,
             arith::OrIOp, arith::XOrIOp, arith::SelectOp, arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp,
             arith::NegFOp, arith::MaximumFOp, arith::MinimumFOp, arith::CmpFOp, arith::SIToFPOp, arith::FPToSIOp,
             math::TanhOp, math::ExpOp, math::Exp2Op, math::LogOp, math::SqrtOp, math::AbsFOp, math::AbsIOp,
             tile::DimOp, tile::ParamOp, tile::InputOp, tile::SoftmaxScaleOp>(op);
}

bool ScalarEmitter::dependsOn(Value v, Value target) { return tile::isComputedFrom(v, target); }

bool ScalarEmitter::readsInput(Operation *op) {
  SmallVector<Operation *> work = {op};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Operation *next = work.pop_back_val();
    if (!seen.insert(next).second)
      continue;
    if (isa<tile::InputOp>(next))
      return true;
    for (Value operand : next->getOperands())
      if (Operation *def = operand.getDefiningOp())
        work.push_back(def);
  }
  return false;
}

bool ScalarEmitter::floatOfKey(Operation *op, Value kv, Value &a, bool &keyFirst, bool &abs) {
  auto cast = dyn_cast<arith::SIToFPOp>(op);
  if (!cast || !kv || !cast.getIn().getType().isInteger(32))
    return false;
  Value x = cast.getIn();
  abs = false;
  if (auto absOp = x.getDefiningOp<math::AbsIOp>()) {
    x = absOp.getOperand();
    abs = true;
  }
  a = Value();
  keyFirst = true;
  if (x == kv)
    return true;
  auto sub = x.getDefiningOp<arith::SubIOp>();
  if (!sub)
    return false;
  if (sub.getRhs() == kv && !dependsOn(sub.getLhs(), kv)) {
    a = sub.getLhs();
    keyFirst = false;
    return true;
  }
  if (sub.getLhs() == kv && !dependsOn(sub.getRhs(), kv)) {
    a = sub.getRhs();
    return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Printing ops
//===----------------------------------------------------------------------===//

int ScalarEmitter::foldDepth(Operation *op) const {
  int depth = 0;
  for (Value operand : op->getOperands())
    if (auto it = exprs.find(operand); it != exprs.end())
      depth = std::max(depth, it->second.depth);
  return depth + 1;
}

FailureOr<CExpr> ScalarEmitter::print(Operation *op) {
  FailureOr<CExpr> e = printText(op);
  if (succeeded(e))
    e->depth = foldDepth(op);
  bool libraryCall = isa<math::ExpOp, math::LogOp, math::SqrtOp, arith::DivFOp, arith::DivSIOp, arith::RemSIOp,
                         arith::CeilDivSIOp, arith::FloorDivSIOp>(op);
  printedCost += libraryCall ? kLibraryCallCost : 1;
  return e;
}

std::string ScalarEmitter::functionQualifiers() const {
  return printedCost > kMaxInlinedCost ? "__device__ __noinline__ " : "__device__ __forceinline__ ";
}

/// float(A - kv) = float(A - kvTile) - kvStep: A - kvTile is one value per row and K tile (one conversion the compiler
/// shares across the row's keys) and kvStep a constant, so a score costs a float add instead of an int-to-float
/// conversion, which issues at the rate of exp2. Exact while |A - kvTile| < 2^24; beyond, two roundings instead of one
/// (relative error 2^-23). Nothing when `op` is not such a float of a key distance.
std::optional<FailureOr<CExpr>> ScalarEmitter::printKeyDistance(Operation *op) {
  Value a;
  bool keyFirst = false, abs = false;
  if (!floatOfKey(op, keyValue, a, keyFirst, abs))
    return std::nullopt;
  std::string tileF, step = "static_cast<float>(" + keyStep + ")";
  if (!a) {
    tileF = "static_cast<float>(" + keyTile + ")";
  } else {
    FailureOr<CExpr> aExpr = expr(a, op);
    if (failed(aExpr))
      return FailureOr<CExpr>(failure());
    tileF = "static_cast<float>(" +
            (keyFirst ? keyTile + " - " + aExpr->operand() : aExpr->operand() + " - " + keyTile) + ")";
  }
  std::string value = tileF + (keyFirst ? " + " : " - ") + step;
  return FailureOr<CExpr>(abs ? CExpr{"fabsf(" + value + ")", true} : CExpr{value, false});
}

FailureOr<CExpr> ScalarEmitter::printText(Operation *op) {
  for (Type type : llvm::concat<const Type>(op->getOperandTypes(), op->getResultTypes()))
    if (failed(cType(type)))
      return op->emitOpError() << "works on " << type
                               << ", which the CUDA printer has no scalar type for (it prints i1, i32, i64, f32)";
  if (std::optional<FailureOr<CExpr>> distance = printKeyDistance(op))
    return *distance;
  SmallVector<CExpr, 3> in;
  for (Value operand : op->getOperands()) {
    FailureOr<CExpr> e = expr(operand, op);
    if (failed(e))
      return failure();
    in.push_back(*e);
  }
  auto binary = [&](StringRef cOp) { return CExpr{in[0].operand() + " " + cOp.str() + " " + in[1].operand(), false}; };
  auto call = [&](StringRef fn) { return CExpr{fn.str() + "(" + join(in) + ")", true}; };
  bool isBool = op->getNumOperands() > 0 && op->getOperand(0).getType().isInteger(1);
  bool isI32 = op->getNumOperands() > 0 && op->getOperand(0).getType().isInteger(32);

  return llvm::TypeSwitch<Operation *, FailureOr<CExpr>>(op)
      .Case([&](arith::ConstantOp c) -> FailureOr<CExpr> {
        if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
          return integerLiteral(i.getValue(), i.getType().getIntOrFloatBitWidth());
        if (auto f = dyn_cast<FloatAttr>(c.getValue()))
          return floatLiteral(f.getValue());
        return c.emitOpError() << "has a value the CUDA printer cannot spell: " << c.getValue();
      })
      .Case([&](tile::DimOp d) {
        return CExpr{dimField(d.getDim()).str(), true};
      })
      .Case([&](tile::SoftmaxScaleOp c) {
        return CExpr{c.getInverse() ? "p.invSoftmaxScale" : "p.softmaxScale", true};
      })
      .Case([&](tile::ParamOp p) -> FailureOr<CExpr> {
        int64_t index = func.paramIndex(p.getName());
        if (index < 0)
          return p.emitOpError() << "names no parameter of the enclosing tile.func";
        return CExpr{"p.variantParams[" + std::to_string(index) + "]", true};
      })
      .Case([&](tile::InputOp input) -> FailureOr<CExpr> {
        int64_t index = func.inputIndex(input.getName());
        if (index < 0)
          return input.emitOpError() << "names no input of the enclosing tile.func";
        std::string type = input.getType().isF32() ? "const float *" : "const int *";
        return CExpr{"static_cast<" + type + ">(p.inputs[" + std::to_string(index) + "])[" + in[0].text + "]", true};
      })
      .Case([&](arith::AddIOp) { return binary("+"); })
      .Case([&](arith::SubIOp) { return binary("-"); })
      .Case([&](arith::MulIOp) { return binary("*"); })
      .Case([&](arith::DivSIOp) { return binary("/"); })
      .Case([&](arith::RemSIOp) { return binary("%"); })
      .Case([&](arith::MinSIOp) { return call("min"); })
      .Case([&](arith::MaxSIOp) { return call("max"); })
      .Case<arith::CeilDivSIOp, arith::FloorDivSIOp>([&](Operation *div) -> FailureOr<CExpr> {
        if (!isI32)
          return div->emitOpError() << "is printed for i32 only";
        bool ceil = isa<arith::CeilDivSIOp>(div);
        (ceil ? helpers.ceilDiv : helpers.floorDiv) = true;
        return call(ceil ? "ceilDiv" : "floorDiv");
      })
      // i1 and/or: where a side reads an input, & and | (both sides evaluated, as in the IR): with && and || the
      // load became a branch per score, and loads under different branches are not merged. Without reads the
      // two are the same and && / || leave the compiler its choice (fewer registers in the window masks).
      .Case([&](arith::AndIOp) { return binary(isBool && !readsInput(op) ? "&&" : "&"); })
      .Case([&](arith::OrIOp) { return binary(isBool && !readsInput(op) ? "||" : "|"); })
      .Case([&](arith::XOrIOp x) {
        // `x ^ true` is how negation reaches the IR: print it as `!x`.
        for (int i = 0; i < 2; ++i)
          if (isBool && matchPattern(x->getOperand(1 - i), m_One()))
            return CExpr{"!" + in[i].operand(), true};
        return binary(isBool ? "!=" : "^");
      })
      .Case([&](arith::CmpIOp c) { return printCmpI(c, in, isI32); })
      .Case([&](arith::SelectOp) {
        return CExpr{in[0].operand() + " ? " + in[1].operand() + " : " + in[2].operand(), false};
      })
      .Case([&](arith::AddFOp) { return binary("+"); })
      .Case([&](arith::SubFOp) { return binary("-"); })
      .Case([&](arith::MulFOp) { return binary("*"); })
      .Case([&](arith::DivFOp) { return binary("/"); })
      .Case([&](arith::NegFOp) {
        return CExpr{"-" + in[0].operand(), false};
      })
      .Case([&](arith::MaximumFOp) { return call("fmaxf"); })
      .Case([&](arith::MinimumFOp) { return call("fminf"); })
      .Case([&](arith::CmpFOp c) { return printCmpF(c, in); })
      .Case<arith::SIToFPOp, arith::FPToSIOp>([&](Operation *cast) {
        return CExpr{"static_cast<" + *cType(cast->getResult(0).getType()) + ">(" + in[0].text + ")", true};
      })
      .Case([&](math::TanhOp) { return call("tileTanh"); }) // the target prelude's tanh (TileTarget.h)
      .Case([&](math::ExpOp) { return call("expf"); })
      .Case([&](math::Exp2Op) { return call("exp2f"); })
      .Case([&](math::LogOp) { return call("logf"); })
      .Case([&](math::SqrtOp) { return call("sqrtf"); })
      .Case([&](math::AbsFOp) { return call("fabsf"); })
      .Case([&](math::AbsIOp) { return call(isI32 ? "abs" : "llabs"); })
      .Default([&](Operation *other) -> FailureOr<CExpr> {
        return other->emitOpError() << "is not a scalar op the CUDA printer knows";
      });
}

FailureOr<std::string> ScalarEmitter::declare(Type type, const CExpr &value, StringRef name) {
  FailureOr<std::string> cTypeName = cType(type);
  if (failed(cTypeName))
    return failure();
  std::string unique = names.unique(name);
  w.line("const " + *cTypeName + " " + unique + " = " + value.text + ";");
  return unique;
}

LogicalResult ScalarEmitter::emit(Operation *op) {
  if (op->getNumResults() != 1)
    return op->emitOpError() << "has " << op->getNumResults() << " results; the CUDA printer expects one";
  Value result = op->getResult(0);
  FailureOr<CExpr> e = print(op);
  if (failed(e))
    return failure();
  if (!declares(op)) {
    exprs[result] = *e;
    return success();
  }
  auto hint = hints.find(result);
  std::string name = hint != hints.end() ? hint->second : "t" + std::to_string(nextTemp++);
  FailureOr<std::string> declared = declare(result.getType(), *e, name);
  if (failed(declared))
    return failure();
  bind(result, *declared);
  return success();
}

bool ScalarEmitter::declares(Operation *op) const {
  if (isa<arith::ConstantOp, tile::DimOp, tile::ParamOp, tile::SoftmaxScaleOp>(op) || op->getNumResults() != 1)
    return false;
  Value result = op->getResult(0);
  bool foldable = !hints.contains(result) && result.hasOneUse() &&
                  result.getUses().begin()->getOwner()->getBlock() == op->getBlock() && foldDepth(op) <= kMaxFoldDepth;
  return !foldable;
}

FailureOr<CExpr> ScalarEmitter::materialize(Value value, Operation *user) {
  Operation *def = value.getDefiningOp();
  if (!def || !isScalarOp(def))
    return user->emitOpError() << "uses a value from outside its region that the CUDA printer cannot recompute "
                                  "inside the variant function (only constants, tile.dim, tile.param and scalar "
                                  "arith/math ops on them can be)";
  FailureOr<CExpr> e = print(def);
  if (failed(e))
    return failure();
  if (isa<arith::ConstantOp, tile::DimOp, tile::ParamOp, tile::SoftmaxScaleOp>(def)) {
    exprs[value] = *e;
    return *e;
  }
  FailureOr<std::string> declared = declare(value.getType(), *e, "t" + std::to_string(nextTemp++));
  if (failed(declared))
    return failure();
  bind(value, *declared);
  return exprs[value];
}

FailureOr<CExpr> ScalarEmitter::expr(Value value, Operation *user) {
  auto it = exprs.find(value);
  if (it != exprs.end())
    return it->second;
  Region *owner = value.getParentRegion();
  if (isolated && !isolated->isAncestor(owner))
    return materialize(value, user);
  return user->emitOpError() << "uses a value the CUDA printer has not printed yet (is the IR in program order?)";
}

} // namespace flashtile::codegen
