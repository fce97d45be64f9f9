//===- ScalarOps.h - arith and math ops on scalar values ------------------===//
//
// The variant's hooks (score modifier, mask, KV-range rule) and the schedule's index arithmetic are arith/math
// ops on i1/i32 and f32 scalars. This evaluates them one op at a time.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_SCALAROPS_H
#define FLASHTILE_INTERPRETER_SCALAROPS_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>

namespace flashtile::interp {

/// An integer (sign-extended from its bit width; i1 true is -1) or an f32.
struct Scalar {
  bool isFloat = false;
  int64_t i = 0;
  float f = 0.0f;

  static Scalar integer(int64_t v) { return Scalar{false, v, 0.0f}; }
  static Scalar real(float v) { return Scalar{true, 0, v}; }
  bool isTrue() const { return i != 0; }
};

/// Evaluates an arith or math op on `operands` (one per op operand). Unknown ops, non-scalar types and
/// undefined results (division by zero, fptosi out of range) are reported through `error`, then failure().
mlir::FailureOr<Scalar> evalScalarOp(mlir::Operation *op, llvm::ArrayRef<Scalar> operands,
                                     llvm::function_ref<void(const llvm::Twine &)> error);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_SCALAROPS_H
