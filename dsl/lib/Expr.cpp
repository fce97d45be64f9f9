//===- Expr.cpp - tracing scalar arithmetic into arith/math ops -----------===//
#include "flashtile/dsl/Expr.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cassert>

using namespace mlir;

namespace flashtile::dsl {

namespace {
OpBuilder &builderOf(const Expr &a) { return a.getBuilder(); }
Location loc(const Expr &a) { return builderOf(a).getUnknownLoc(); }

template <typename FloatOp, typename IntOp> Expr arithmetic(const Expr &a, const Expr &b) {
  assert(a.get().getType() == b.get().getType() && "mixing expression types: convert with toFloat/toInt");
  OpBuilder &bld = builderOf(a);
  if (a.isFloat())
    return Expr(bld, FloatOp::create(bld, loc(a), a.get(), b.get()));
  return Expr(bld, IntOp::create(bld, loc(a), a.get(), b.get()));
}

Expr compare(const Expr &a, const Expr &b, arith::CmpFPredicate fp, arith::CmpIPredicate ip) {
  assert(a.get().getType() == b.get().getType() && "comparing expressions of different types");
  OpBuilder &bld = builderOf(a);
  if (a.isFloat())
    return Expr(bld, arith::CmpFOp::create(bld, loc(a), fp, a.get(), b.get()));
  return Expr(bld, arith::CmpIOp::create(bld, loc(a), ip, a.get(), b.get()));
}

template <typename MathOp> Expr unaryFloat(const Expr &a) {
  assert(a.isFloat() && "this function takes a float expression");
  return Expr(builderOf(a), MathOp::create(builderOf(a), loc(a), a.get()));
}
} // namespace

Expr Expr::literal(double v) const {
  Type type = value.getType();
  if (isFloat())
    return Expr(*builder, arith::ConstantFloatOp::create(*builder, builder->getUnknownLoc(), cast<FloatType>(type),
                                                         APFloat(static_cast<float>(v))));
  return Expr(*builder,
              arith::ConstantIntOp::create(*builder, builder->getUnknownLoc(), type, static_cast<int64_t>(v)));
}

Expr operator+(const Expr &a, const Expr &b) { return arithmetic<arith::AddFOp, arith::AddIOp>(a, b); }
Expr operator-(const Expr &a, const Expr &b) { return arithmetic<arith::SubFOp, arith::SubIOp>(a, b); }
Expr operator*(const Expr &a, const Expr &b) { return arithmetic<arith::MulFOp, arith::MulIOp>(a, b); }
Expr operator/(const Expr &a, const Expr &b) { return arithmetic<arith::DivFOp, arith::DivSIOp>(a, b); }
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
  assert(a.isBool() && b.isBool() && "&& takes predicates");
  return Expr(builderOf(a), arith::AndIOp::create(builderOf(a), loc(a), a.get(), b.get()));
}
Expr operator||(const Expr &a, const Expr &b) {
  assert(a.isBool() && b.isBool() && "|| takes predicates");
  return Expr(builderOf(a), arith::OrIOp::create(builderOf(a), loc(a), a.get(), b.get()));
}
Expr operator!(const Expr &a) {
  assert(a.isBool() && "! takes a predicate");
  OpBuilder &bld = builderOf(a);
  Value one = arith::ConstantIntOp::create(bld, loc(a), 1, 1);
  return Expr(bld, arith::XOrIOp::create(bld, loc(a), a.get(), one));
}

Expr min(const Expr &a, const Expr &b) { return arithmetic<arith::MinimumFOp, arith::MinSIOp>(a, b); }
Expr max(const Expr &a, const Expr &b) { return arithmetic<arith::MaximumFOp, arith::MaxSIOp>(a, b); }

Expr select(const Expr &cond, const Expr &ifTrue, const Expr &ifFalse) {
  assert(cond.isBool() && "select's condition must be a predicate");
  OpBuilder &bld = builderOf(cond);
  return Expr(bld, arith::SelectOp::create(bld, loc(cond), cond.get(), ifTrue.get(), ifFalse.get()));
}

Expr toFloat(const Expr &i) {
  OpBuilder &bld = builderOf(i);
  return Expr(bld, arith::SIToFPOp::create(bld, loc(i), bld.getF32Type(), i.get()));
}
Expr toInt(const Expr &f) {
  OpBuilder &bld = builderOf(f);
  return Expr(bld, arith::FPToSIOp::create(bld, loc(f), bld.getI32Type(), f.get()));
}

Expr abs(const Expr &a) {
  if (a.isFloat())
    return unaryFloat<math::AbsFOp>(a);
  return Expr(builderOf(a), math::AbsIOp::create(builderOf(a), loc(a), a.get()));
}
Expr tanh(const Expr &a) { return unaryFloat<math::TanhOp>(a); }
Expr exp(const Expr &a) { return unaryFloat<math::ExpOp>(a); }
Expr exp2(const Expr &a) { return unaryFloat<math::Exp2Op>(a); }
Expr log(const Expr &a) { return unaryFloat<math::LogOp>(a); }
Expr sqrt(const Expr &a) { return unaryFloat<math::SqrtOp>(a); }

} // namespace flashtile::dsl
