//===- Expr.h - scalar expressions of the variant DSL ---------------------===//
//
// A variant's score modifier, mask and KV-range rule are ordinary C++ lambdas over `Expr`. Calling them once
// while the program is built records their arithmetic as IR (arith/math ops inside tile.score_mod, tile.mask,
// tile.kv_range), so the same lambda runs in the CPU interpreter and in every generated kernel.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_DSL_EXPR_H
#define FLASHTILE_DSL_EXPR_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

#include <string>

namespace flashtile::dsl {

/// A scalar value being traced: f32 (scores, parameters), i32 (indices, sizes) or i1 (mask predicates).
class Expr {
public:
  Expr(mlir::OpBuilder &builder, mlir::Value value) : builder(&builder), value(value) {}
  mlir::Value get() const { return value; }
  mlir::OpBuilder &getBuilder() const { return *builder; }
  bool isFloat() const { return value.getType().isF32(); }
  bool isBool() const { return value.getType().isInteger(1); }
  /// A literal of this expression's type.
  Expr literal(double v) const;

private:
  mlir::OpBuilder *builder;
  mlir::Value value;
};

Expr operator+(const Expr &a, const Expr &b);
Expr operator-(const Expr &a, const Expr &b);
Expr operator*(const Expr &a, const Expr &b);
Expr operator/(const Expr &a, const Expr &b); // integer division truncates toward zero, as in C
Expr operator-(const Expr &a);
Expr operator<(const Expr &a, const Expr &b);
Expr operator<=(const Expr &a, const Expr &b);
Expr operator>(const Expr &a, const Expr &b);
Expr operator>=(const Expr &a, const Expr &b);
Expr operator==(const Expr &a, const Expr &b);
Expr operator!=(const Expr &a, const Expr &b);
Expr operator&&(const Expr &a, const Expr &b);
Expr operator||(const Expr &a, const Expr &b);
Expr operator!(const Expr &a);

// Mixed with C++ numbers: the number takes the expression's type.
#define FLASHTILE_DSL_MIXED(op)                                                                                        \
  inline Expr operator op(const Expr &a, double b) { return a op a.literal(b); }                                       \
  inline Expr operator op(double a, const Expr &b) { return b.literal(a) op b; }
FLASHTILE_DSL_MIXED(+)
FLASHTILE_DSL_MIXED(-)
FLASHTILE_DSL_MIXED(*)
FLASHTILE_DSL_MIXED(/)
FLASHTILE_DSL_MIXED(<)
FLASHTILE_DSL_MIXED(<=)
FLASHTILE_DSL_MIXED(>)
FLASHTILE_DSL_MIXED(>=)
FLASHTILE_DSL_MIXED(==)
FLASHTILE_DSL_MIXED(!=)
#undef FLASHTILE_DSL_MIXED

/// While a variant's hook is traced: where the user's code gave the hook, and whether it misused the DSL (mixed
/// f32 and i32, a number where a predicate belongs). A misuse is an error at that location — in Release builds
/// too — and the traced value is replaced by a placeholder of the expected type so tracing can finish; the
/// program builder then fails. One trace at a time per thread; nested traces restore the outer one.
class HookTrace {
public:
  HookTrace(mlir::Location where, std::string hook);
  ~HookTrace();
  HookTrace(const HookTrace &) = delete;
  HookTrace &operator=(const HookTrace &) = delete;
  bool failed() const { return misused; }

private:
  friend void reportMisuse(mlir::OpBuilder &builder, const std::string &message);
  mlir::Location where;
  std::string hook;
  bool misused = false;
  HookTrace *outer;
};
/// Emits a DSL-misuse error at the current hook's location (or an unknown one outside a trace).
void reportMisuse(mlir::OpBuilder &builder, const std::string &message);

Expr min(const Expr &a, const Expr &b);
Expr max(const Expr &a, const Expr &b);
Expr select(const Expr &cond, const Expr &ifTrue, const Expr &ifFalse);
Expr toFloat(const Expr &i); // i32 -> f32
Expr toInt(const Expr &f);   // f32 -> i32, truncating
Expr abs(const Expr &a);
Expr tanh(const Expr &a);
Expr exp(const Expr &a);
Expr exp2(const Expr &a);
Expr log(const Expr &a);
Expr sqrt(const Expr &a);

} // namespace flashtile::dsl

#endif // FLASHTILE_DSL_EXPR_H
