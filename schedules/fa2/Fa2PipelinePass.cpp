//===- Fa2PipelinePass.cpp - tile-fa2-pipeline ----------------------------===//
//
// The FA2 schedule's software pipeline (a pass of the schedule, registered with it: other schedules pipeline their
// own way); `stages` (shared-memory buffers per K/V operand) picks one of two.
// Tiles are numbered in walk order below: "next" is the tile the walk visits after j (j − 1, descending).
//
// stages = 1, FA2 as published, one K and one V buffer. Per K/V tile j:
//   wait K(j) | start V(j) | S = Q·K(j)ᵀ, mask, softmax | wait V(j) | start K(next) | acc += P·V(j)
// so each copy overlaps the compute that does not need it. Q and the first K tile are started up front. (Starting
// the first V tile up front too, its iteration's copy predicated off, cost 5-9% at every length, hd 64: the
// predicate on the loop's V copy hurt more than the earlier copy helped; bench/NOTES.md v12.)
//
// stages = 2, two buffers each (tile j in buffer j mod 2), and Q·Kᵀ runs one tile ahead: the loops carry the
// scores of tile j into iteration j, which computes the next tile's scores next to its own softmax:
//   wait K(next), V(j) | start K(next + 1), V(next) | S' = Q·K(next)ᵀ ; softmax(S) | acc += P·V(j) | S = S'
// (with a score_mod: ... | score_mod(S), mask(S) | S' = Q·K(next)ᵀ ; softmax(S) | ...)
// One barrier per tile; S' has no dependence on the softmax, so a warp's tensor-core work and its exp2/FP32 work
// are independent instructions in one block of straight-line code and overlap (FA3's intra-warpgroup overlap,
// here with mma.sync). The prologue computes the first tile's scores. On the walk's last tile there is no next
// tile: its K load is predicated off and the scores it would give are never used.
//===----------------------------------------------------------------------===//
#include "schedules/fa2/Fa2Pipeline.h"
#include "schedules/fa2/Fa2Register.h"

#include "passes/IR/TileDialect.h"

#include "mlir/Pass/Pass.h"

using namespace mlir;
using namespace flashtile::tile;

namespace {

/// `v - n` (a tile n steps further along the descending walk).
Value minus(OpBuilder &b, Location loc, Value v, int64_t n) {
  return arith::SubIOp::create(b, loc, v, arith::ConstantIntOp::create(b, loc, n, 32)).getResult();
}
/// Whether tile `v` is one the walk visits (>= its lowest tile).
Value isVisited(OpBuilder &b, Location loc, Value v, Value lowest) {
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, v, lowest).getResult();
}

/// Both pipelines' prologue: start copying Q and the walk's first K tile (predicated on there being one).
/// Returns the first tile's index and that predicate.
std::pair<Value, Value> startQAndFirstK(OpBuilder &b, Location loc, Value highest, Value lowest) {
  CopyAsyncOp::create(b, loc, "q", Value(), Value());
  Value first = minus(b, loc, highest, 1);
  Value anyTile = isVisited(b, loc, first, lowest);
  CopyAsyncOp::create(b, loc, "k", first, anyTile);
  return {first, anyTile};
}

struct Fa2PipelinePass : PassWrapper<Fa2PipelinePass, OperationPass<FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(Fa2PipelinePass)
  StringRef getArgument() const override { return "tile-fa2-pipeline"; }
  StringRef getName() const override { return "Fa2Pipeline"; }
  StringRef getDescription() const override {
    return "FA2's software pipeline: K/V loads become asynchronous copies (tile.copy_async / tile.wait_async) "
           "overlapped with compute, with one or two buffers per operand (#tile.schedule stages)";
  }
  void getDependentDialects(DialectRegistry &registry) const override { registry.insert<arith::ArithDialect>(); }

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

    if (!lowest.getDefiningOp() || !highest.getDefiningOp()) {
      func.emitOpError() << "K/V loop bounds must be computed in the program body";
      return signalPassFailure();
    }
    int64_t stages = func.getScheduleAttr().getStages();
    if (stages == 1)
      pipelineSingleBuffers(loops, loadQ, highest, lowest);
    else if (stages == 2)
      pipelineQkAhead(loops, loadQ, highest, lowest);
    else
      func.emitOpError() << "has stages = " << stages << "; tile-fa2-pipeline knows 1 and 2";
    if (failed(status))
      return signalPassFailure();
  }

  LogicalResult status = success();
  LogicalResult fail(Operation *op, const Twine &message) {
    op->emitOpError() << message;
    status = failure();
    return failure();
  }

  /// The K load feeding tile.qk and the V load feeding tile.pv of one loop body.
  struct BodyLoads {
    LoadOp k, v;
    QkOp qk;
    PvOp pv;
  };
  FailureOr<BodyLoads> bodyLoads(KvLoopOp loop) {
    BodyLoads l;
    for (LoadOp load : loop.getBody().front().getOps<LoadOp>())
      (load.getOperand() == "k" ? l.k : l.v) = load;
    if (!l.k || !l.v)
      return fail(loop, "must load both a K and a V tile");
    l.qk = dyn_cast_or_null<QkOp>(*l.k->getUsers().begin());
    l.pv = dyn_cast_or_null<PvOp>(*l.v->getUsers().begin());
    if (!l.qk || !l.pv || !l.k->hasOneUse() || !l.v->hasOneUse())
      return fail(loop, "K must feed one tile.qk and V one tile.pv");
    return l;
  }

  void pipelineSingleBuffers(ArrayRef<KvLoopOp> loops, LoadOp loadQ, Value highest, Value lowest) {
    Location loc = loadQ.getLoc();
    // Prologue, after the bounds: Q and the first K tile in flight together; Q must land before the loop.
    OpBuilder b(loops.front());
    startQAndFirstK(b, loc, highest, lowest);
    auto waitQ = WaitAsyncOp::create(b, loc, "q", /*pending=*/1); // the first K tile may still be in flight
    loadQ->moveAfter(waitQ);

    for (KvLoopOp loop : loops) {
      Block &body = loop.getBody().front();
      Value j = loop.getTileIndex();
      FailureOr<BodyLoads> l = bodyLoads(loop);
      if (failed(l))
        return;
      // K(j): wait for it, then start V(j) so it overlaps Q·Kᵀ.
      OpBuilder lb(&body, body.begin());
      WaitAsyncOp::create(lb, loc, "k");
      CopyAsyncOp::create(lb, loc, "v", j, Value());
      l->k->moveBefore(l->qk);
      // V(j): wait for it right before P·V, then start K(next) so it overlaps P·V and the next softmax.
      lb.setInsertionPoint(l->pv);
      WaitAsyncOp::create(lb, loc, "v");
      Value next = minus(lb, loc, j, 1);
      CopyAsyncOp::create(lb, loc, "k", next, isVisited(lb, loc, next, lowest));
      l->v->moveBefore(l->pv);
    }
  }

  void pipelineQkAhead(ArrayRef<KvLoopOp> loops, LoadOp loadQ, Value highest, Value lowest) {
    Location loc = loadQ.getLoc();
    SmallVector<BodyLoads> bodies;
    for (KvLoopOp loop : loops) {
      FailureOr<BodyLoads> l = bodyLoads(loop);
      if (failed(l))
        return;
      bodies.push_back(*l);
    }
    // Prologue, after the bounds: Q and the first K tile; once both landed, start V(first) and K(second) and
    // compute the first tile's scores.
    OpBuilder b(loops.front());
    auto [first, anyTile] = startQAndFirstK(b, loc, highest, lowest);
    auto waitK = WaitAsyncOp::create(b, loc, "k", /*pending=*/0); // Q's group is older: it lands too
    loadQ->moveAfter(waitK);
    b.setInsertionPointAfter(loadQ);
    CopyAsyncOp::create(b, loc, "v", first, anyTile);
    Value second = minus(b, loc, first, 1);
    CopyAsyncOp::create(b, loc, "k", second, isVisited(b, loc, second, lowest));
    Type kType = bodies.front().k.getType(), sType = bodies.front().qk.getType();
    Value kFirst = LoadOp::create(b, loc, kType, "k", first, anyTile);
    Value scores = QkOp::create(b, loc, sType, loadQ.getResult(), kFirst);

    for (auto [index, constLoop] : llvm::enumerate(loops)) {
      KvLoopOp loop = constLoop;
      BodyLoads &l = bodies[index];
      // The same segment, now also carrying the scores of its tile j in and the next tile's scores out.
      b.setInsertionPoint(loop);
      auto piped =
          KvLoopOp::create(b, loop.getLoc(), loop.getResult().getType(), TypeRange{sType}, loop.getLower(),
                           loop.getUpper(), loop.getInit(), ValueRange{scores}, loop.getSegment(), loop.getOrder());
      Block &old = loop.getBody().front();
      Block *body = b.createBlock(&piped.getBody(), {},
                                  {old.getArgument(0).getType(), old.getArgument(1).getType(), sType}, {loc, loc, loc});
      body->getOperations().splice(body->end(), old.getOperations());
      old.getArgument(0).replaceAllUsesWith(body->getArgument(0));
      old.getArgument(1).replaceAllUsesWith(body->getArgument(1));
      Value j = body->getArgument(0);
      // Top of iteration j: K(next) and V(j) land (the newest groups); the barrier also means every warp is done
      // with K(j)'s buffer (read by the previous Q·Kᵀ) and V(j + 1)'s (read by the previous P·V): the copies of
      // K(next + 1) and V(next) go there.
      OpBuilder lb(body, body->begin());
      WaitAsyncOp::create(lb, loc, "v", /*pending=*/0);
      Value next = minus(lb, loc, j, 1), afterNext = minus(lb, loc, j, 2);
      Value hasNext = isVisited(lb, loc, next, lowest);
      CopyAsyncOp::create(lb, loc, "k", afterNext, isVisited(lb, loc, afterNext, lowest));
      CopyAsyncOp::create(lb, loc, "v", next, hasNext);
      // The next tile's Q·Kᵀ goes right after the copies, or, where the variant modifies scores (score_mod, in
      // every tile), right before this tile's softmax: the score_mod touches every score of the tile, and with
      // both score tiles live the registers overflow (H200, hd128: softcap +6%, causal softcap +2%; placing it
      // after the mask of boundary segments too cost the plain kernels 5%, bench/NOTES.md v7).
      auto softmaxes = body->getOps<SoftmaxUpdateOp>();
      if (std::distance(softmaxes.begin(), softmaxes.end()) != 1) {
        (void)fail(loop, "must hold one tile.softmax_update");
        return;
      }
      if (!body->getOps<ScoreModOp>().empty())
        lb.setInsertionPoint(*softmaxes.begin());
      Value kNext = LoadOp::create(lb, loc, kType, "k", next, hasNext);
      Value scoresNext = QkOp::create(lb, loc, sType, loadQ.getResult(), kNext);
      // This tile's scores arrive through the loop instead of its own Q·Kᵀ.
      l.qk.getResult().replaceAllUsesWith(body->getArgument(2));
      l.qk.erase();
      l.k.erase();
      l.v->moveBefore(l.pv);
      auto yield = cast<YieldOp>(body->getTerminator());
      SmallVector<Value> yielded(yield.getValues());
      yielded.push_back(scoresNext);
      lb.setInsertionPoint(yield);
      YieldOp::create(lb, yield.getLoc(), yielded);
      yield.erase();
      loop.getResult().replaceAllUsesWith(piped.getResult());
      scores = piped.getCarriedResults()[0];
      loop.erase();
    }
  }
};

} // namespace

namespace flashtile::fa2 {
std::unique_ptr<Pass> createPipelinePass() { return std::make_unique<Fa2PipelinePass>(); }
void registerPasses() { PassRegistration<Fa2PipelinePass>(); }
} // namespace flashtile::fa2
