//===- SplitBoundary.cpp - tile-split-boundary ----------------------------===//
//
// One unbounded K/V loop becomes up to three bounded ones. In key indices the variant says:
//   may  = [mayLo, mayHi)   keys some row of the Q tile can attend (outside: the tile is skipped)
//   full = [fullLo, fullHi) keys every row attends (inside: no mask needed)
// In tile indices (blockN keys a tile, clamped to the key sequence):
//   [tLo, fLo) head boundary (masked) | [fLo, fHi) interior (unmasked) | [fHi, tHi) tail boundary (masked)
//===----------------------------------------------------------------------===//
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILESPLITBOUNDARY
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

struct TileBounds {
  Value lo, fullLo, fullHi, hi; // tLo <= fLo <= fHi <= tHi
};

/// Converts the variant's key ranges into clamped tile-index bounds, as IR in front of the loop.
TileBounds tileBounds(OpBuilder &b, Location loc, KvRangeOp may, KvRangeOp full, int64_t blockN) {
  auto c = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32).getResult(); };
  Value zero = c(0), bn = c(blockN);
  Value seqlenK = DimOp::create(b, loc, Dim::SeqlenK);
  auto clampKeys = [&](Value key) {
    return arith::MinSIOp::create(b, loc, arith::MaxSIOp::create(b, loc, key, zero), seqlenK).getResult();
  };
  auto clamp = [&](Value v, Value lo, Value hi) {
    return arith::MinSIOp::create(b, loc, arith::MaxSIOp::create(b, loc, v, lo), hi).getResult();
  };
  TileBounds t;
  Value mayLo = clampKeys(may.getLo()), mayHi = clampKeys(may.getHi());
  t.lo = arith::DivSIOp::create(b, loc, mayLo, bn);                                           // floor: nonnegative
  t.hi = arith::MaxSIOp::create(b, loc, arith::CeilDivSIOp::create(b, loc, mayHi, bn), t.lo); // empty if hi < lo
  Value fLo = arith::CeilDivSIOp::create(b, loc, clampKeys(full.getLo()), bn); // first tile entirely inside
  Value fHi = arith::DivSIOp::create(b, loc, clampKeys(full.getHi()), bn);     // one past the last such tile
  t.fullLo = clamp(fLo, t.lo, t.hi);
  t.fullHi = clamp(fHi, t.fullLo, t.hi);
  return t;
}

/// A copy of `loop` over [lo, hi) of one segment; interior copies drop their masks.
KvLoopOp cloneSegment(OpBuilder &b, KvLoopOp loop, Value stats, Value acc, Value lo, Value hi, Segment segment,
                      KvOrder order) {
  auto seg = KvLoopOp::create(b, loop.getLoc(), lo, hi, stats, acc, ValueRange(), segment, order);
  IRMapping map;
  loop.getBody().cloneInto(&seg.getBody(), map);
  if (segment == Segment::Interior)
    seg.getBody().walk([](MaskOp mask) {
      mask.getResult().replaceAllUsesWith(mask.getS());
      mask.erase();
    });
  return seg;
}

struct TileSplitBoundaryPass : flashtile::tile::impl::TileSplitBoundaryBase<TileSplitBoundaryPass> {
  void runOnOperation() override {
    FuncOp func = getOperation();
    auto schedule = func.getScheduleAttr();
    if (!schedule) {
      func.emitOpError() << "must be scheduled before splitting boundary tiles (run tile-apply-schedule)";
      return signalPassFailure();
    }
    const flashtile::schedule::Schedule *owner = flashtile::schedule::lookupSchedule(schedule.getName());
    if (!owner) {
      func.emitOpError() << "is scheduled with an " << flashtile::schedule::unknownScheduleMessage(schedule.getName());
      return signalPassFailure();
    }
    // The schedule decides the walk order (FA2: last to first, so the masked tiles near the diagonal come first).
    bool walkDescending = owner->walkDescending();
    KvRangeOp may, full;
    for (auto range : func.getBody().getOps<KvRangeOp>())
      (range.getKind() == RangeKind::May ? may : full) = range;
    if (!may || !full) {
      func.emitOpError() << "needs both kv_range rules (may and full) to split boundary tiles";
      return signalPassFailure();
    }
    SmallVector<KvLoopOp> loops(func.getBody().getOps<KvLoopOp>());
    for (KvLoopOp loop : loops) {
      if (loop.isBounded())
        continue;
      if (!loop.getCarried().empty()) {
        loop.emitOpError() << "carries tiles across iterations; split boundary tiles before pipelining";
        return signalPassFailure();
      }
      if (may->getBlock() != loop->getBlock() || !may->isBeforeInBlock(loop) || !full->isBeforeInBlock(loop)) {
        loop.emitOpError() << "kv_range rules must come before the K/V loop";
        return signalPassFailure();
      }
      OpBuilder b(loop);
      TileBounds t = tileBounds(b, loop.getLoc(), may, full, schedule.getBlockN());
      // Rules that start both ranges at key 0 (no mask, causal) provably leave the head segment empty.
      bool headEmpty = may.lowerBoundIs(0) && full.lowerBoundIs(0);
      KvOrder order = walkDescending ? KvOrder::Descending : KvOrder::Ascending;
      struct Part {
        Segment segment;
        Value lo, hi;
      };
      SmallVector<Part, 3> parts = {{Segment::TailBoundary, t.fullHi, t.hi}, {Segment::Interior, t.fullLo, t.fullHi}};
      if (!headEmpty)
        parts.push_back({Segment::HeadBoundary, t.lo, t.fullLo});
      if (!walkDescending)
        std::reverse(parts.begin(), parts.end());
      Value stats = loop.getInitStats(), acc = loop.getInitAcc();
      for (const Part &p : parts) {
        KvLoopOp seg = cloneSegment(b, loop, stats, acc, p.lo, p.hi, p.segment, order);
        stats = seg.getStats();
        acc = seg.getAcc();
      }
      loop.getStats().replaceAllUsesWith(stats);
      loop.getAcc().replaceAllUsesWith(acc);
      loop.erase();
    }
  }
};

} // namespace
