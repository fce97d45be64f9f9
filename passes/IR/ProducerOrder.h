//===- ProducerOrder.h - the ops values are computed from, producers first ===//
#ifndef FLASHTILE_PASSES_IR_PRODUCERORDER_H
#define FLASHTILE_PASSES_IR_PRODUCERORDER_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <utility>

namespace flashtile::tile {

/// The ops `roots` are computed from, through producers `follow(op)` accepts, each op after the accepted producers
/// of its operands: depth first over operands left to right, from each root in turn. The order depends only on
/// what the roots compute, not on where the ops stand. An explicit stack: traced hooks (Python's) can be deep.
template <typename Follow> llvm::SmallVector<mlir::Operation *> producersFirst(mlir::ValueRange roots, Follow follow) {
  llvm::SmallVector<mlir::Operation *> order;
  llvm::DenseSet<mlir::Operation *> placed;
  llvm::SmallVector<std::pair<mlir::Operation *, unsigned>> stack;
  auto producer = [&](mlir::Value v) -> mlir::Operation * {
    mlir::Operation *def = v.getDefiningOp();
    return def && !placed.contains(def) && follow(def) ? def : nullptr;
  };
  for (mlir::Value root : roots) {
    if (mlir::Operation *op = producer(root))
      stack.push_back({op, 0});
    while (!stack.empty()) {
      auto &[op, next] = stack.back();
      if (placed.contains(op)) {
        stack.pop_back();
        continue;
      }
      if (next < op->getNumOperands()) {
        mlir::Value operand = op->getOperand(next++);
        if (mlir::Operation *def = producer(operand))
          stack.push_back({def, 0});
        continue;
      }
      placed.insert(op);
      order.push_back(op);
      stack.pop_back();
    }
  }
  return order;
}

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_PRODUCERORDER_H
