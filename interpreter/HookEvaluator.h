//===- HookEvaluator.h - a variant's scalar IR, evaluated in fp64 ---------===//
//
// The backward's reference evaluates the variant's hooks, and the derivative IR built from them
// (passes/Transforms/DifferentiateScore.h), outside any program instance: given the sizes, parameters and input
// arrays of one call, it runs a block of scalar ops with the interpreter's op semantics (ScalarOps.h), but with
// f32 values held in fp64 so that finite differences of the result are meaningful.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_HOOKEVALUATOR_H
#define FLASHTILE_INTERPRETER_HOOKEVALUATOR_H

#include "interpreter/ScalarOps.h"

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace flashtile::interp {

/// A variant's input array with f32 elements held in fp64, or i32 elements.
using WideInput = std::variant<std::vector<double>, std::vector<int32_t>>;

/// What the tile ops of a hook read (tile.dim, tile.param, tile.input, tile.softmax_scale) for one sequence.
struct HookEnv {
  int64_t batch = 1, headsQ = 1, headsKv = 1, seqlenQ = 0, seqlenK = 0;
  int64_t keyOffset = 0; ///< tile.dim key_offset: the sequence's first key row among all keys
  double softmaxScale = 1;
  std::map<std::string, double> params;
  std::map<std::string, WideInput> inputs;
};

/// Evaluates blocks of scalar ops. Values computed by one run stay readable (value()) until the next.
class HookEvaluator {
public:
  explicit HookEvaluator(const HookEnv &env) : env(env) {}
  /// Runs every op of `block` but its terminator, its arguments bound to `args`. Errors (an unknown op, an
  /// input read outside its array, ...) are emitted on the op.
  mlir::LogicalResult run(mlir::Block &block, llvm::ArrayRef<WideScalar> args);
  /// After run: a value of the block (an argument or a result of one of its ops).
  WideScalar value(mlir::Value v) const { return values.lookup(v); }
  /// run, then the values the block's terminator yields.
  mlir::FailureOr<llvm::SmallVector<WideScalar>> yielded(mlir::Block &block, llvm::ArrayRef<WideScalar> args);

private:
  mlir::FailureOr<WideScalar> evalOp(mlir::Operation *op);
  /// A value the block reads: computed, or the result of an op outside the block (canonicalization hoists a
  /// hook's constants into the tile.func), evaluated when first read.
  mlir::FailureOr<WideScalar> read(mlir::Operation *user, mlir::Value v);
  const HookEnv &env;
  llvm::DenseMap<mlir::Value, WideScalar> values;
};

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_HOOKEVALUATOR_H
