//===- Pipeline.cpp - tile-pipeline ---------------------------------------===//
//
// FA2's software pipeline over one K and one V shared-memory buffer. Per K/V tile j, in walk order:
//   wait K(j) | start V(j) | S = Q·K(j)ᵀ, mask, softmax | wait V(j) | start K(next) | acc += P·V(j)
// so each copy overlaps the compute that does not need it. Q and the first K tile are started up front.
//===----------------------------------------------------------------------===//
#include "passes/Transforms/Passes.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILEPIPELINE
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

struct TilePipelinePass : flashtile::tile::impl::TilePipelineBase<TilePipelinePass> {
  void runOnOperation() override {
    FuncOp func = getOperation();
    if (!func.getScheduleAttr()) {
      func.emitOpError() << "must be scheduled before pipelining (run tile-apply-schedule)";
      return signalPassFailure();
    }
    if (!func.getBody().getOps<CopyAsyncOp>().empty()) {
      func.emitOpError() << "is already pipelined";
      return signalPassFailure();
    }
    SmallVector<KvLoopOp> loops(func.getBody().getOps<KvLoopOp>());
    auto qLoads = llvm::to_vector(func.getBody().getOps<LoadOp>());
    if (loops.empty() || qLoads.size() != 1 || qLoads.front().getOperand() != "q") {
      func.emitOpError() << "needs one Q load and at least one K/V loop at top level";
      return signalPassFailure();
    }
    for (KvLoopOp loop : loops)
      if (!loop.isBounded() || loop.getOrder() != "descending") {
        loop.emitOpError() << "must be a bounded, descending segment (run tile-split-boundary first)";
        return signalPassFailure();
      }
    // The walk covers tiles [lowest, highest) from the top: the first loop starts at its upper bound and
    // the last loop ends at its lower bound; segments are contiguous.
    Value highest = loops.front().getUpper(), lowest = loops.back().getLower();
    LoadOp loadQ = qLoads.front();
    Location loc = loadQ.getLoc();

    if (!lowest.getDefiningOp() || !highest.getDefiningOp()) {
      func.emitOpError() << "K/V loop bounds must be computed in the program body";
      return signalPassFailure();
    }
    // Prologue, after the bounds: Q and the first K tile in flight together; Q must land before the loop.
    OpBuilder b(loops.front());
    CopyAsyncOp::create(b, loc, "q", Value(), Value());
    Value one = arith::ConstantIntOp::create(b, loc, 1, 32);
    Value first = arith::SubIOp::create(b, loc, highest, one);
    Value anyTile = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, first, lowest);
    CopyAsyncOp::create(b, loc, "k", first, anyTile);
    auto waitQ = WaitAsyncOp::create(b, loc, "q", /*pending=*/1); // the first K tile may still be in flight
    loadQ->moveAfter(waitQ);

    for (KvLoopOp loop : loops) {
      Block &body = loop.getBody().front();
      Value j = loop.getTileIndex();
      LoadOp loadK, loadV;
      for (LoadOp load : body.getOps<LoadOp>())
        (load.getOperand() == "k" ? loadK : loadV) = load;
      if (!loadK || !loadV) {
        loop.emitOpError() << "must load both a K and a V tile";
        return signalPassFailure();
      }
      auto qk = dyn_cast_or_null<QkOp>(*loadK->getUsers().begin());
      auto pv = dyn_cast_or_null<PvOp>(*loadV->getUsers().begin());
      if (!qk || !pv) {
        loop.emitOpError() << "K must feed tile.qk and V must feed tile.pv";
        return signalPassFailure();
      }
      // K(j): wait for it, then start V(j) so it overlaps Q·Kᵀ.
      OpBuilder lb(&body, body.begin());
      WaitAsyncOp::create(lb, loc, "k");
      CopyAsyncOp::create(lb, loc, "v", j, Value());
      loadK->moveBefore(qk);
      // V(j): wait for it right before P·V, then start K(next) so it overlaps P·V and the next softmax.
      lb.setInsertionPoint(pv);
      WaitAsyncOp::create(lb, loc, "v");
      Value next = arith::SubIOp::create(lb, loc, j, arith::ConstantIntOp::create(lb, loc, 1, 32));
      Value hasNext = arith::CmpIOp::create(lb, loc, arith::CmpIPredicate::sge, next, lowest);
      CopyAsyncOp::create(lb, loc, "k", next, hasNext);
      loadV->moveBefore(pv);
    }
  }
};

} // namespace
