//===- PipelineQLoop.cpp - tile-pipeline-q-loop ---------------------------===//
//
// The backward's Q-tile loop, ordered and marked for its printer (Passes.td says what; docs/backward.md shows the
// loop). Two decisions of the schedule, taken here on the IR so the printer only obeys them:
//  - one staging barrier a Q tile: the GEMMs whose rows are keys (tile.dot_tn) read P and dS through shared memory;
//    moved down to the first tile.accumulate, they come after both tiles are complete, and the printer stages both
//    before the first of them;
//    (under tile.early_dv, dV's stays after tile.probs and is issued there: P staged alone, behind its own barrier);
//  - copies one tile ahead (#tile.schedule stages = 2): the loop's loads all index its own tile, so tile i + 1's can
//    be issued before tile i's GEMMs into a second buffer (tile.q_buffers = 2).
//===----------------------------------------------------------------------===//
#include "passes/IR/ProgramKinds.h"
#include "passes/Transforms/Passes.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILEPIPELINEQLOOP
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

/// Moves each tile.dot_tn of `body` that comes before its first tile.accumulate down to just before it, in order,
/// when every use of its result comes after that point (the loop's yield). With `earlyDv` the one whose A is P (a
/// tile.probs) stays where the program has it and is marked tile.issue_early.
void sinkKeyRowGemms(Block &body, bool earlyDv) {
  Operation *target = body.getTerminator();
  for (Operation &op : body)
    if (isa<AccumulateOp>(op)) {
      target = &op;
      break;
    }
  SmallVector<DotTnOp> gemms;
  for (Operation &op : body) {
    if (&op == target)
      break;
    if (auto dot = dyn_cast<DotTnOp>(op))
      gemms.push_back(dot);
  }
  for (DotTnOp dot : gemms) {
    if (earlyDv && dot.getA().getDefiningOp<ProbsOp>()) {
      dot->setAttr(kIssueEarlyAttr, UnitAttr::get(dot.getContext()));
      continue;
    }
    bool usedLater = llvm::all_of(dot->getUsers(), [&](Operation *user) {
      Operation *inBody = body.findAncestorOpInBlock(*user);
      return inBody && (inBody == target || target->isBeforeInBlock(inBody));
    });
    if (usedLater)
      dot->moveBefore(target);
  }
}

struct TilePipelineQLoopPass : flashtile::tile::impl::TilePipelineQLoopBase<TilePipelineQLoopPass> {
  void runOnOperation() override {
    FuncOp func = getOperation();
    auto loops = llvm::to_vector(func.getBody().getOps<QLoopOp>());
    if (func.getKind() != kBackwardMain || loops.empty())
      return;
    ScheduleAttr schedule = func.getScheduleAttr();
    if (!schedule) {
      func.emitOpError() << "must be scheduled before its Q-tile loops are pipelined (run tile-apply-schedule)";
      return signalPassFailure();
    }
    const bool twoBuffers = schedule.getStages() >= 2;
    for (QLoopOp loop : loops) {
      if (!loop.isBounded()) {
        loop.emitOpError() << "is not bounded; run tile-bound-q-loop before tile-pipeline-q-loop";
        return signalPassFailure();
      }
      Block &body = loop.getBody().front();
      sinkKeyRowGemms(body, func->hasAttr(kEarlyDvAttr));
      if (!twoBuffers)
        continue;
      for (LoadOp load : body.getOps<LoadOp>())
        if (load.getIndex() != loop.getTileIndex()) {
          load.emitOpError() << "does not load the loop's own Q tile: it cannot be copied one tile ahead";
          return signalPassFailure();
        }
      loop->setAttr(kQBuffersAttr, IntegerAttr::get(IntegerType::get(&getContext(), 32), 2));
    }
  }
};

} // namespace
