//===- ScalarOps.cpp - arith and math ops on scalar values ----------------===//
#include "interpreter/ScalarOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace flashtile::interp {

namespace {

unsigned bitWidth(Type type) { return type.isIndex() ? 64 : type.getIntOrFloatBitWidth(); }

/// Two's complement wrap-around to `width` bits, kept sign-extended.
int64_t wrap(uint64_t v, unsigned width) {
  return width >= 64 ? static_cast<int64_t>(v) : llvm::SignExtend64(v, width);
}
uint64_t zext(int64_t v, unsigned width) {
  return width >= 64 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(v) & ((uint64_t{1} << width) - 1);
}

// Signed division rounding toward zero, up and down; the divisor is nonzero. INT64_MIN / -1 wraps.
int64_t divTrunc(int64_t a, int64_t b) {
  return (b == -1) ? static_cast<int64_t>(0 - static_cast<uint64_t>(a)) : a / b;
}
int64_t remTrunc(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }
int64_t divCeil(int64_t a, int64_t b) { return divTrunc(a, b) + (remTrunc(a, b) != 0 && (a < 0) == (b < 0) ? 1 : 0); }
int64_t divFloor(int64_t a, int64_t b) { return divTrunc(a, b) - (remTrunc(a, b) != 0 && (a < 0) != (b < 0) ? 1 : 0); }

bool compareInt(arith::CmpIPredicate pred, int64_t a, int64_t b, unsigned width) {
  uint64_t ua = zext(a, width), ub = zext(b, width);
  switch (pred) {
  case arith::CmpIPredicate::eq:
    return a == b;
  case arith::CmpIPredicate::ne:
    return a != b;
  case arith::CmpIPredicate::slt:
    return a < b;
  case arith::CmpIPredicate::sle:
    return a <= b;
  case arith::CmpIPredicate::sgt:
    return a > b;
  case arith::CmpIPredicate::sge:
    return a >= b;
  case arith::CmpIPredicate::ult:
    return ua < ub;
  case arith::CmpIPredicate::ule:
    return ua <= ub;
  case arith::CmpIPredicate::ugt:
    return ua > ub;
  case arith::CmpIPredicate::uge:
    return ua >= ub;
  }
  llvm_unreachable("unknown cmpi predicate");
}

template <typename Real> bool compareFloat(arith::CmpFPredicate pred, Real a, Real b) {
  using P = arith::CmpFPredicate;
  bool unordered = std::isnan(a) || std::isnan(b);
  switch (pred) {
  case P::AlwaysFalse:
    return false;
  case P::OEQ:
    return !unordered && a == b;
  case P::OGT:
    return !unordered && a > b;
  case P::OGE:
    return !unordered && a >= b;
  case P::OLT:
    return !unordered && a < b;
  case P::OLE:
    return !unordered && a <= b;
  case P::ONE:
    return !unordered && a != b;
  case P::ORD:
    return !unordered;
  case P::UEQ:
    return unordered || a == b;
  case P::UGT:
    return unordered || a > b;
  case P::UGE:
    return unordered || a >= b;
  case P::ULT:
    return unordered || a < b;
  case P::ULE:
    return unordered || a <= b;
  case P::UNE:
    return unordered || a != b;
  case P::UNO:
    return unordered;
  case P::AlwaysTrue:
    return true;
  }
  llvm_unreachable("unknown cmpf predicate");
}

// arith.maximumf / minimumf: NaN propagates and -0 < +0.
template <typename Real> Real maximum(Real a, Real b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<Real>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
template <typename Real> Real minimum(Real a, Real b) {
  if (std::isnan(a) || std::isnan(b))
    return std::numeric_limits<Real>::quiet_NaN();
  if (a == b)
    return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

template <typename Real>
FailureOr<BasicScalar<Real>> evalScalar(Operation *op, ArrayRef<BasicScalar<Real>> in,
                                        llvm::function_ref<void(const llvm::Twine &)> error) {
  using Scalar = BasicScalar<Real>;
  auto fail = [&](const Twine &message) -> FailureOr<Scalar> {
    error(message);
    return failure();
  };
  StringRef name = op->getName().getStringRef();
  auto unsupported = [&] { return fail("the interpreter does not support '" + name + "'"); };
  if (op->getNumResults() != 1)
    return unsupported();
  Type type = op->getResult(0).getType();
  if (!type.isIntOrIndex() && !type.isF32())
    return fail("'" + name + "' produces " + typeString(type) +
                "; the interpreter evaluates integer and f32 scalars only");
  for (Value operand : op->getOperands())
    if (!operand.getType().isIntOrIndex() && !operand.getType().isF32())
      return fail("'" + name + "' takes " + typeString(operand.getType()) +
                  "; the interpreter evaluates integer and f32 scalars only");

  const unsigned width = type.isF32() ? 32 : bitWidth(type);
  auto integer = [&](uint64_t v) -> FailureOr<Scalar> { return Scalar::integer(wrap(v, width)); };
  auto real = [](Real v) -> FailureOr<Scalar> { return Scalar::real(v); };
  auto boolean = [](bool v) -> FailureOr<Scalar> { return Scalar::integer(v ? -1 : 0); }; // i1 true is -1
  auto i = [&](unsigned k) { return in[k].i; };
  auto u = [&](unsigned k) { return static_cast<uint64_t>(in[k].i); };
  auto f = [&](unsigned k) { return in[k].f; };
  auto divide = [&](int64_t (*fn)(int64_t, int64_t)) -> FailureOr<Scalar> {
    if (i(1) == 0)
      return fail("division by zero in '" + name + "'");
    return integer(static_cast<uint64_t>(fn(i(0), i(1))));
  };

  using namespace arith;
  return llvm::TypeSwitch<Operation *, FailureOr<Scalar>>(op)
      .Case([&](ConstantOp c) -> FailureOr<Scalar> {
        if (auto v = dyn_cast<IntegerAttr>(c.getValue()))
          return integer(static_cast<uint64_t>(v.getValue().getSExtValue()));
        if (auto v = dyn_cast<FloatAttr>(c.getValue()))
          return real(static_cast<Real>(v.getValueAsDouble()));
        return fail("'arith.constant' of a non-scalar value");
      })
      // Integer arithmetic wraps around, as on the GPU.
      .Case([&](AddIOp) { return integer(u(0) + u(1)); })
      .Case([&](SubIOp) { return integer(u(0) - u(1)); })
      .Case([&](MulIOp) { return integer(u(0) * u(1)); })
      .Case([&](DivSIOp) { return divide(divTrunc); })
      .Case([&](CeilDivSIOp) { return divide(divCeil); })
      .Case([&](FloorDivSIOp) { return divide(divFloor); })
      .Case([&](RemSIOp) { return divide(remTrunc); })
      .Case([&](MinSIOp) { return integer(static_cast<uint64_t>(std::min(i(0), i(1)))); })
      .Case([&](MaxSIOp) { return integer(static_cast<uint64_t>(std::max(i(0), i(1)))); })
      .Case([&](AndIOp) { return integer(u(0) & u(1)); })
      .Case([&](OrIOp) { return integer(u(0) | u(1)); })
      .Case([&](XOrIOp) { return integer(u(0) ^ u(1)); })
      .Case([&](CmpIOp c) { return boolean(compareInt(c.getPredicate(), i(0), i(1), bitWidth(c.getLhs().getType()))); })
      .Case([&](ExtSIOp) { return integer(u(0)); })
      .Case([&](ExtUIOp e) { return integer(zext(i(0), bitWidth(e.getIn().getType()))); })
      .Case([&](TruncIOp) { return integer(u(0)); })
      .Case([&](SelectOp) -> FailureOr<Scalar> { return in[0].isTrue() ? in[1] : in[2]; })
      .Case([&](math::AbsIOp) { return integer(i(0) < 0 ? 0 - u(0) : u(0)); })
      // f32 arithmetic, one IEEE rounding per op.
      .Case([&](AddFOp) { return real(f(0) + f(1)); })
      .Case([&](SubFOp) { return real(f(0) - f(1)); })
      .Case([&](MulFOp) { return real(f(0) * f(1)); })
      .Case([&](DivFOp) { return real(f(0) / f(1)); })
      .Case([&](NegFOp) { return real(-f(0)); })
      .Case([&](MaximumFOp) { return real(maximum(f(0), f(1))); })
      .Case([&](MinimumFOp) { return real(minimum(f(0), f(1))); })
      .Case([&](MaxNumFOp) { return real(std::fmax(f(0), f(1))); })
      .Case([&](MinNumFOp) { return real(std::fmin(f(0), f(1))); })
      .Case([&](CmpFOp c) { return boolean(compareFloat(c.getPredicate(), f(0), f(1))); })
      .Case([&](SIToFPOp) { return real(static_cast<Real>(i(0))); })
      .Case([&](FPToSIOp) -> FailureOr<Scalar> {
        double t = std::trunc(static_cast<double>(f(0)));
        double limit = std::ldexp(1.0, static_cast<int>(width) - 1);
        if (std::isnan(t) || t < -limit || t >= limit)
          return fail("'arith.fptosi' of " + std::to_string(f(0)) + " does not fit i" + Twine(width));
        return integer(static_cast<uint64_t>(static_cast<int64_t>(t)));
      })
      .Case([&](math::TanhOp) { return real(std::tanh(f(0))); })
      .Case([&](math::ExpOp) { return real(std::exp(f(0))); })
      .Case([&](math::Exp2Op) { return real(std::exp2(f(0))); })
      .Case([&](math::LogOp) { return real(std::log(f(0))); })
      .Case([&](math::Log2Op) { return real(std::log2(f(0))); })
      .Case([&](math::SqrtOp) { return real(std::sqrt(f(0))); })
      .Case([&](math::RsqrtOp) { return real(Real(1) / std::sqrt(f(0))); })
      .Case([&](math::AbsFOp) { return real(std::fabs(f(0))); })
      .Case([&](math::FmaOp) { return real(std::fma(f(0), f(1), f(2))); })
      .Default([&](Operation *) { return unsupported(); });
}

} // namespace

FailureOr<Scalar> evalScalarOp(Operation *op, ArrayRef<Scalar> in,
                               llvm::function_ref<void(const llvm::Twine &)> error) {
  return evalScalar<float>(op, in, error);
}

FailureOr<WideScalar> evalScalarOpWide(Operation *op, ArrayRef<WideScalar> in,
                                       llvm::function_ref<void(const llvm::Twine &)> error) {
  return evalScalar<double>(op, in, error);
}

} // namespace flashtile::interp
