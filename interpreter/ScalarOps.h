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

/// An integer (sign-extended from its bit width; i1 true is -1) or a float: f32 values are held as `Real`, float
/// (the interpreter, one f32 rounding per op as on the GPU) or double (the fp64 reference of the backward pass).
template <typename Real> struct BasicScalar {
  bool isFloat = false;
  int64_t i = 0;
  Real f = 0;

  static BasicScalar integer(int64_t v) { return BasicScalar{false, v, 0}; }
  static BasicScalar real(Real v) { return BasicScalar{true, 0, v}; }
  bool isTrue() const { return i != 0; }
};
using Scalar = BasicScalar<float>;
using WideScalar = BasicScalar<double>;

/// Evaluates an arith or math op on `operands` (one per op operand). Unknown ops, non-scalar types and
/// undefined results (division by zero, fptosi out of range) are reported through `error`, then failure().
mlir::FailureOr<Scalar> evalScalarOp(mlir::Operation *op, llvm::ArrayRef<Scalar> operands,
                                     llvm::function_ref<void(const llvm::Twine &)> error);
/// The same op semantics with f32 values computed in fp64 (integers are unchanged): the backward's reference.
mlir::FailureOr<WideScalar> evalScalarOpWide(mlir::Operation *op, llvm::ArrayRef<WideScalar> operands,
                                             llvm::function_ref<void(const llvm::Twine &)> error);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_SCALAROPS_H
