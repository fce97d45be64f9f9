//===- Expr.cpp - tracing scalar arithmetic into arith/math ops -----------===//
#include "flashtile/dsl/Expr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace flashtile::dsl {

namespace {
thread_local HookTrace *currentTrace = nullptr;

OpBuilder &builderOf(const Expr &a) { return a.getBuilder(); }
Location loc(const Expr &a) { return builderOf(a).getUnknownLoc(); }

std::string typeName(const Expr &a) { return a.isBool() ? "a predicate (i1)" : a.isFloat() ? "f32" : "i32"; }
Expr predicateLiteral(OpBuilder &bld, bool value) {
  return Expr(bld, arith::ConstantIntOp::create(bld, bld.getUnknownLoc(), value ? 1 : 0, 1));
}
Expr floatLiteral(OpBuilder &bld, float value) {
  return Expr(bld, arith::ConstantFloatOp::create(bld, bld.getUnknownLoc(), bld.getF32Type(), APFloat(value)));
}

template <typename FloatOp, typename IntOp> Expr arithmetic(const Expr &a, const Expr &b, const char *op) {
  OpBuilder &bld = builderOf(a);
  if (a.get().getType() != b.get().getType() || a.isBool()) {
    reportMisuse(bld, std::string("'") + op + "' of " + typeName(a) + " and " + typeName(b) +
                          (a.isBool() || b.isBool() ? ": arithmetic takes numbers, not predicates"
                                                    : ": convert one side with toFloat or toInt"));
    return a;
  }
  if (a.isFloat())
    return Expr(bld, FloatOp::create(bld, loc(a), a.get(), b.get()));
  return Expr(bld, IntOp::create(bld, loc(a), a.get(), b.get()));
}

Expr compare(const Expr &a, const Expr &b, arith::CmpFPredicate fp, arith::CmpIPredicate ip) {
  OpBuilder &bld = builderOf(a);
  if (a.get().getType() != b.get().getType()) {
    reportMisuse(bld, "comparing " + typeName(a) + " with " + typeName(b) + ": convert one side with toFloat or toInt");
    return predicateLiteral(bld, false);
  }
  if (a.isFloat())
    return Expr(bld, arith::CmpFOp::create(bld, loc(a), fp, a.get(), b.get()));
  return Expr(bld, arith::CmpIOp::create(bld, loc(a), ip, a.get(), b.get()));
}

template <typename MathOp> Expr unaryFloat(const Expr &a, const char *name) {
  if (!a.isFloat()) {
    reportMisuse(builderOf(a), std::string(name) + " takes an f32 expression, got " + typeName(a) +
                                   (a.isBool() ? "" : ": convert it with toFloat"));
    return floatLiteral(builderOf(a), 0.f);
  }
  return Expr(builderOf(a), MathOp::create(builderOf(a), loc(a), a.get()));
}
} // namespace

HookTrace::HookTrace(Location where, std::string hook) : where(where), hook(std::move(hook)), outer(currentTrace) {
  currentTrace = this;
}
HookTrace::~HookTrace() { currentTrace = outer; }

void reportMisuse(OpBuilder &builder, const std::string &message) {
  if (!currentTrace) {
    emitError(builder.getUnknownLoc()) << "misuse of the variant DSL: " << message;
    return;
  }
  currentTrace->misused = true;
  emitError(currentTrace->where) << "misuse of the variant DSL in the " << currentTrace->hook << ": " << message;
}

Expr Expr::literal(double v) const {
  Type type = value.getType();
  if (isFloat())
    return Expr(*builder, arith::ConstantFloatOp::create(*builder, builder->getUnknownLoc(), cast<FloatType>(type),
                                                         APFloat(static_cast<float>(v))));
  return Expr(*builder,
              arith::ConstantIntOp::create(*builder, builder->getUnknownLoc(), type, static_cast<int64_t>(v)));
}

Expr operator+(const Expr &a, const Expr &b) { return arithmetic<arith::AddFOp, arith::AddIOp>(a, b, "+"); }
Expr operator-(const Expr &a, const Expr &b) { return arithmetic<arith::SubFOp, arith::SubIOp>(a, b, "-"); }
Expr operator*(const Expr &a, const Expr &b) { return arithmetic<arith::MulFOp, arith::MulIOp>(a, b, "*"); }
Expr operator/(const Expr &a, const Expr &b) { return arithmetic<arith::DivFOp, arith::DivSIOp>(a, b, "/"); }
Expr operator-(const Expr &a) {
  if (a.isFloat())
    return Expr(builderOf(a), arith::NegFOp::create(builderOf(a), loc(a), a.get()));
  return a.literal(0) - a;
}

using FP = arith::CmpFPredicate;
using IP = arith::CmpIPredicate;
Expr operator<(const Expr &a, const Expr &b) { return compare(a, b, FP::OLT, IP::slt); }
Expr operator<=(const Expr &a, const Expr &b) { return compare(a, b, FP::OLE, IP::sle); }
Expr operator>(const Expr &a, const Expr &b) { return compare(a, b, FP::OGT, IP::sgt); }
Expr operator>=(const Expr &a, const Expr &b) { return compare(a, b, FP::OGE, IP::sge); }
Expr operator==(const Expr &a, const Expr &b) { return compare(a, b, FP::OEQ, IP::eq); }
Expr operator!=(const Expr &a, const Expr &b) { return compare(a, b, FP::UNE, IP::ne); }

Expr operator&&(const Expr &a, const Expr &b) {
  if (!a.isBool() || !b.isBool()) {
    reportMisuse(builderOf(a), "'&&' of " + typeName(a) + " and " + typeName(b) + ": it takes predicates");
    return predicateLiteral(builderOf(a), false);
  }
  return Expr(builderOf(a), arith::AndIOp::create(builderOf(a), loc(a), a.get(), b.get()));
}
Expr operator||(const Expr &a, const Expr &b) {
  if (!a.isBool() || !b.isBool()) {
    reportMisuse(builderOf(a), "'||' of " + typeName(a) + " and " + typeName(b) + ": it takes predicates");
    return predicateLiteral(builderOf(a), false);
  }
  return Expr(builderOf(a), arith::OrIOp::create(builderOf(a), loc(a), a.get(), b.get()));
}
Expr operator!(const Expr &a) {
  if (!a.isBool()) {
    reportMisuse(builderOf(a), "'!' of " + typeName(a) + ": it takes a predicate");
    return predicateLiteral(builderOf(a), false);
  }
  OpBuilder &bld = builderOf(a);
  Value one = arith::ConstantIntOp::create(bld, loc(a), 1, 1);
  return Expr(bld, arith::XOrIOp::create(bld, loc(a), a.get(), one));
}

Expr min(const Expr &a, const Expr &b) { return arithmetic<arith::MinimumFOp, arith::MinSIOp>(a, b, "min"); }
Expr max(const Expr &a, const Expr &b) { return arithmetic<arith::MaximumFOp, arith::MaxSIOp>(a, b, "max"); }

Expr select(const Expr &cond, const Expr &ifTrue, const Expr &ifFalse) {
  if (!cond.isBool() || ifTrue.get().getType() != ifFalse.get().getType()) {
    reportMisuse(builderOf(cond), "select(" + typeName(cond) + ", " + typeName(ifTrue) + ", " + typeName(ifFalse) +
                                      "): it takes a predicate and two values of one type");
    return ifTrue;
  }
  OpBuilder &bld = builderOf(cond);
  return Expr(bld, arith::SelectOp::create(bld, loc(cond), cond.get(), ifTrue.get(), ifFalse.get()));
}

Expr toFloat(const Expr &i) {
  OpBuilder &bld = builderOf(i);
  if (i.isFloat() || i.isBool()) {
    reportMisuse(bld, "toFloat takes an i32 expression, got " + typeName(i));
    return i.isFloat() ? i : floatLiteral(bld, 0.f);
  }
  return Expr(bld, arith::SIToFPOp::create(bld, loc(i), bld.getF32Type(), i.get()));
}
Expr toInt(const Expr &f) {
  OpBuilder &bld = builderOf(f);
  if (!f.isFloat()) {
    reportMisuse(bld, "toInt takes an f32 expression, got " + typeName(f));
    return f.isBool() ? Expr(bld, arith::ConstantIntOp::create(bld, bld.getUnknownLoc(), 0, 32)) : f;
  }
  return Expr(bld, arith::FPToSIOp::create(bld, loc(f), bld.getI32Type(), f.get()));
}

Expr abs(const Expr &a) {
  if (a.isFloat() || a.isBool())
    return unaryFloat<math::AbsFOp>(a, "abs");
  return Expr(builderOf(a), math::AbsIOp::create(builderOf(a), loc(a), a.get()));
}
Expr tanh(const Expr &a) { return unaryFloat<math::TanhOp>(a, "tanh"); }
Expr exp(const Expr &a) { return unaryFloat<math::ExpOp>(a, "exp"); }
Expr exp2(const Expr &a) { return unaryFloat<math::Exp2Op>(a, "exp2"); }
Expr log(const Expr &a) { return unaryFloat<math::LogOp>(a, "log"); }
Expr sqrt(const Expr &a) { return unaryFloat<math::SqrtOp>(a, "sqrt"); }

} // namespace flashtile::dsl
