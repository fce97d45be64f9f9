//===- BoundQLoop.cpp - tile-bound-q-loop ---------------------------------===//
//
// The backward's converse of tile-split-boundary: a backward_main instance owns K/V tile j (keys [j·N, min(j·N + N,
// seqlen_k)), N = blockN) and walks the Q tiles that see them. The variant's KV-range rules, inverted
// (InvertKvRange.h), give in Q-tile indices (blockM rows a tile):
//   [lo, fullLo) head boundary (masked) | [fullLo, fullHi) interior (unmasked) | [fullHi, hi) tail boundary (masked)
// A K/V tile that ends past the sequence has padding keys only a mask drops: its whole walk is boundary. The
// kv_range rules are consumed.
//===----------------------------------------------------------------------===//
#include "passes/IR/ProgramKinds.h"
#include "passes/Transforms/InvertKvRange.h"
#include "passes/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILEBOUNDQLOOP
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

/// Whether `may` is the whole key range for every row: it yields (0, seqlen_k), so every instance's walk is every Q tile.
bool coversEveryKey(KvRangeOp may) {
  auto yield = cast<YieldOp>(may.getRule().front().getTerminator());
  auto seqlenK = yield.getValues()[1].getDefiningOp<DimOp>();
  return matchPattern(yield.getValues()[0], m_Zero()) && seqlenK && seqlenK.getDim() == Dim::SeqlenK;
}

/// A copy of `loop` over Q tiles [lo, hi) starting from `inits`; interior copies drop their masks.
QLoopOp cloneSegment(OpBuilder &b, QLoopOp loop, ValueRange inits, Value lo, Value hi, Segment segment) {
  auto seg = QLoopOp::create(b, loop.getLoc(), loop.getResultTypes(), lo, hi, inits, segment);
  IRMapping map;
  loop.getBody().cloneInto(&seg.getBody(), map);
  if (segment == Segment::Interior)
    seg.getBody().walk([](MaskOp mask) {
      mask.getResult().replaceAllUsesWith(mask.getS());
      mask.erase();
    });
  return seg;
}

struct TileBoundQLoopPass : flashtile::tile::impl::TileBoundQLoopBase<TileBoundQLoopPass> {
  void runOnOperation() override {
    FuncOp func = getOperation();
    SmallVector<QLoopOp> loops;
    for (QLoopOp loop : func.getBody().getOps<QLoopOp>())
      if (!loop.isBounded())
        loops.push_back(loop);
    if (func.getKind() != kBackwardMain || loops.empty())
      return;
    ScheduleAttr schedule = func.getScheduleAttr();
    if (!schedule) {
      func.emitOpError() << "must be scheduled before its Q-tile loop is bounded (run tile-apply-schedule)";
      return signalPassFailure();
    }
    KvRangeOp may, full;
    for (auto range : func.getBody().getOps<KvRangeOp>())
      (range.getKind() == RangeKind::May ? may : full) = range;
    if (!may || !full) {
      func.emitOpError() << "needs both kv_range rules (may and full) to bound its Q-tile loop";
      return signalPassFailure();
    }
    for (QLoopOp loop : loops) {
      if (!may->isBeforeInBlock(loop) || !full->isBeforeInBlock(loop)) {
        loop.emitOpError() << "kv_range rules must come before the Q-tile loop";
        return signalPassFailure();
      }
      OpBuilder b(loop);
      Location loc = loop.getLoc();
      auto c = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32).getResult(); };
      // The instance's keys [first, last] (last < seqlen_k), and whether its tile runs past the sequence.
      Value seqlenK = DimOp::create(b, loc, Dim::SeqlenK), bn = c(schedule.getBlockN());
      Value first = arith::MulIOp::create(b, loc, DimOp::create(b, loc, Dim::KvTile), bn);
      Value end = arith::AddIOp::create(b, loc, first, bn);
      Value last = arith::SubIOp::create(b, loc, arith::MinSIOp::create(b, loc, end, seqlenK), c(1));
      Value partial = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, end, seqlenK);
      Value batch = DimOp::create(b, loc, Dim::BatchIndex), head = DimOp::create(b, loc, Dim::HeadIndex);
      QueryRows mayRows = buildQueryRows(b, may, first, last, batch, head);
      QueryRows fullRows = buildQueryRows(b, full, first, last, batch, head);
      QueryTiles t = buildQueryTiles(b, mayRows, fullRows, schedule.getBlockM());
      Value fullHi = arith::SelectOp::create(b, loc, partial, t.fullLo, t.fullHi);
      struct Part {
        Segment segment;
        Value lo, hi;
      };
      SmallVector<Value> carried(loop.getInits().begin(), loop.getInits().end());
      for (Part p : {Part{Segment::HeadBoundary, t.lo, t.fullLo}, Part{Segment::Interior, t.fullLo, fullHi},
                     Part{Segment::TailBoundary, fullHi, t.hi}}) {
        QLoopOp seg = cloneSegment(b, loop, carried, p.lo, p.hi, p.segment);
        carried.assign(seg.getResults().begin(), seg.getResults().end());
      }
      loop->replaceAllUsesWith(carried);
      loop.erase();
    }
    if (coversEveryKey(may))
      func->setAttr(kFullWalkAttr, UnitAttr::get(func.getContext()));
    may.erase();
    full.erase();
  }
};

} // namespace
