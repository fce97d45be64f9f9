//===- LoopCarry.h - a K/V loop segment that carries more values ----------===//
//
// Pipeline passes (tile-pipeline-copies' Q·Kᵀ one tile ahead, fa3's intra-warpgroup overlap) make a K/V loop carry
// values from one iteration to the next: tokens, scores, P. Header-only.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_LOOPCARRY_H
#define FLASHTILE_PASSES_TRANSFORMS_LOOPCARRY_H

#include "passes/IR/TileDialect.h"

#include "mlir/IR/Builders.h"

namespace flashtile::tile {

/// Replaces `loop` by the same segment carrying `carried` after its own carried values (their block arguments
/// appended); the caller extends the yield. Returns the new loop.
inline tile::KvLoopOp withCarried(tile::KvLoopOp loop, mlir::ValueRange carried) {
  mlir::OpBuilder b(loop);
  llvm::SmallVector<mlir::Value> inits(loop.getCarried());
  llvm::append_range(inits, carried);
  auto piped = tile::KvLoopOp::create(b, loop.getLoc(), loop.getLower(), loop.getUpper(), loop.getInitStats(),
                                      loop.getInitAcc(), inits, loop.getSegment(), loop.getOrder());
  mlir::Block &old = loop.getBody().front();
  llvm::SmallVector<mlir::Type> argTypes(old.getArgumentTypes());
  llvm::SmallVector<mlir::Location> argLocs(argTypes.size(), loop.getLoc());
  for (mlir::Value v : carried) {
    argTypes.push_back(v.getType());
    argLocs.push_back(loop.getLoc());
  }
  mlir::Block *body = b.createBlock(&piped.getBody(), {}, argTypes, argLocs);
  body->getOperations().splice(body->end(), old.getOperations());
  for (auto [from, to] : llvm::zip(old.getArguments(), body->getArguments()))
    from.replaceAllUsesWith(to);
  loop.getStats().replaceAllUsesWith(piped.getStats());
  loop.getAcc().replaceAllUsesWith(piped.getAcc());
  for (auto [from, to] : llvm::zip(loop.getCarriedResults(), piped.getCarriedResults()))
    from.replaceAllUsesWith(to);
  loop.erase();
  return piped;
}

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_TRANSFORMS_LOOPCARRY_H
