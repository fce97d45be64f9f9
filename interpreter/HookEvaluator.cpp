//===- HookEvaluator.cpp - a variant's scalar IR, evaluated in fp64 -------===//
#include "interpreter/HookEvaluator.h"

#include "passes/IR/TileDialect.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace flashtile::interp {

FailureOr<WideScalar> HookEvaluator::read(Operation *user, Value v) {
  if (auto it = values.find(v); it != values.end())
    return it->second;
  Operation *def = v.getDefiningOp();
  if (!def || def->getNumRegions() != 0 || def->getNumResults() != 1)
    return user->emitError() << "reads a value the hook evaluator cannot compute";
  FailureOr<WideScalar> result = evalOp(def);
  if (succeeded(result))
    values[v] = *result;
  return result;
}

FailureOr<WideScalar> HookEvaluator::evalOp(Operation *op) {
  using namespace tile;
  return llvm::TypeSwitch<Operation *, FailureOr<WideScalar>>(op)
      .Case([&](DimOp dim) -> FailureOr<WideScalar> {
        const std::pair<Dim, int64_t> sizes[] = {{Dim::Batch, env.batch},     {Dim::HeadsQ, env.headsQ},
                                                 {Dim::HeadsKv, env.headsKv}, {Dim::SeqlenQ, env.seqlenQ},
                                                 {Dim::SeqlenK, env.seqlenK}, {Dim::KeyOffset, env.keyOffset}};
        for (auto [which, value] : sizes)
          if (which == dim.getDim())
            return WideScalar::integer(value);
        return op->emitError() << "is not a size a variant's hook reads";
      })
      .Case([&](ParamOp param) -> FailureOr<WideScalar> {
        auto it = env.params.find(param.getName().str());
        if (it == env.params.end())
          return op->emitError() << "reads parameter '" << param.getName() << "', which the call does not give";
        return WideScalar::real(it->second);
      })
      .Case([&](SoftmaxScaleOp scale) {
        return WideScalar::real(scale.getInverse() ? 1.0 / env.softmaxScale : env.softmaxScale);
      })
      .Case([&](InputOp input) -> FailureOr<WideScalar> {
        auto it = env.inputs.find(input.getName().str());
        if (it == env.inputs.end())
          return op->emitError() << "reads input '" << input.getName() << "', which the call does not give";
        FailureOr<WideScalar> at = read(op, input.getIndex());
        if (failed(at))
          return failure();
        int64_t index = at->i;
        int64_t size = std::visit([](const auto &a) { return static_cast<int64_t>(a.size()); }, it->second);
        if (index < 0 || index >= size)
          return op->emitError() << "reads element " << index << " of input '" << input.getName() << "', which has "
                                 << size;
        if (const auto *real = std::get_if<std::vector<double>>(&it->second))
          return WideScalar::real((*real)[index]);
        return WideScalar::integer(std::get<std::vector<int32_t>>(it->second)[index]);
      })
      .Default([&](Operation *) -> FailureOr<WideScalar> {
        SmallVector<WideScalar, 3> operands;
        for (Value operand : op->getOperands()) {
          FailureOr<WideScalar> value = read(op, operand);
          if (failed(value))
            return failure();
          operands.push_back(*value);
        }
        return evalScalarOpWide(op, operands, [&](const Twine &message) { op->emitError() << message; });
      });
}

LogicalResult HookEvaluator::run(Block &block, ArrayRef<WideScalar> args) {
  values.clear();
  for (auto [arg, value] : llvm::zip_equal(block.getArguments(), args))
    values[arg] = value;
  for (Operation &op : block) {
    if (op.hasTrait<OpTrait::IsTerminator>())
      break;
    FailureOr<WideScalar> result = evalOp(&op);
    if (failed(result))
      return failure();
    values[op.getResult(0)] = *result;
  }
  return success();
}

FailureOr<SmallVector<WideScalar>> HookEvaluator::yielded(Block &block, ArrayRef<WideScalar> args) {
  if (failed(run(block, args)))
    return failure();
  SmallVector<WideScalar> out;
  for (Value v : block.getTerminator()->getOperands()) {
    FailureOr<WideScalar> value = read(block.getTerminator(), v);
    if (failed(value))
      return failure();
    out.push_back(*value);
  }
  return out;
}

} // namespace flashtile::interp
