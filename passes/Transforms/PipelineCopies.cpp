//===- PipelineCopies.cpp - tile-pipeline-copies --------------------------===//
//
// FlashAttention-2's software pipeline, for the schedules whose warps all compute (a schedule names it in its
// buildPipeline): K/V loads read shared-memory slots that asynchronous copies fill while the warps compute.
// Warp-specialized schedules pipeline their own way, with roles and barriers. `stages` (shared-memory buffers per K/V
// operand, #tile.schedule) picks one of two.
// Tiles are numbered in walk order below: "next" is the tile the walk visits after j (j − 1, descending).
//
// The buffers are values (tile.buffer, one slot for Q, `stages` for K and V; tile j in slot j mod stages, tile.slot),
// every copy returns a token, and each wait names the tokens it needs: the tokens of copies started in one iteration
// for the next are carried by the loops.
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
#include "passes/Transforms/LoopCarry.h"
#include "passes/Transforms/Passes.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILEPIPELINECOPIES
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

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

/// The shared-memory buffers of the pipeline: Q's one slot, `stages` slots each for K and V.
struct Buffers {
  Value q, k, v;

  /// The slot tile `index` of `operand` lives in (Q: its one slot).
  Value slot(OpBuilder &b, Location loc, Operand operand, Value index) const {
    Value buffer = operand == Operand::Q ? q : operand == Operand::K ? k : v;
    return SlotOp::create(b, loc, buffer, index).getResult();
  }
  /// Starts copying tile `index` of `operand` into its slot; returns the copy's token.
  CopyAsyncOp copy(OpBuilder &b, Location loc, Operand operand, Value index, Value pred) const {
    return CopyAsyncOp::create(b, loc, operand, index, slot(b, loc, operand, index), /*full=*/Value(),
                               /*position=*/Value(), pred);
  }
  /// Makes `load` read its tile from `filled` (the slot a copy in the same block filled) or from the slot of its
  /// tile, selected here.
  void readFromSlot(LoadOp load, Value filled = Value()) const {
    OpBuilder b(load);
    load.getSlotMutable().assign(filled ? filled : slot(b, load.getLoc(), load.getOperand(), load.getIndex()));
  }
};

/// Both pipelines' prologue: allocate the buffers, start copying Q and the walk's first K tile (predicated on there
/// being one). Returns the first tile's index, that predicate and the two tokens.
struct Prologue {
  Value first, anyTile;
  CopyAsyncOp copyQ, copyK;
};
Prologue startQAndFirstK(OpBuilder &b, Location loc, const Buffers &buffers, Value highest, Value lowest) {
  Prologue p;
  p.copyQ = buffers.copy(b, loc, Operand::Q, Value(), Value());
  p.first = minus(b, loc, highest, 1);
  p.anyTile = isVisited(b, loc, p.first, lowest);
  p.copyK = buffers.copy(b, loc, Operand::K, p.first, p.anyTile);
  return p;
}

struct TilePipelineCopiesPass : flashtile::tile::impl::TilePipelineCopiesBase<TilePipelineCopiesPass> {
  void runOnOperation() override {
    FuncOp func = getOperation();
    if (!func.getScheduleAttr()) {
      func.emitOpError() << "must be scheduled before pipelining (run tile-apply-schedule)";
      return signalPassFailure();
    }
    if (!func.getBody().getOps<BufferOp>().empty()) {
      func.emitOpError() << "is already pipelined";
      return signalPassFailure();
    }
    SmallVector<KvLoopOp> loops(func.getBody().getOps<KvLoopOp>());
    auto qLoads = llvm::to_vector(func.getBody().getOps<LoadOp>());
    if (loops.empty() || qLoads.size() != 1 || qLoads.front().getOperand() != Operand::Q) {
      func.emitOpError() << "needs one Q load and at least one K/V loop at top level";
      return signalPassFailure();
    }
    for (KvLoopOp loop : loops)
      if (!loop.isBounded() || loop.getOrder() != KvOrder::Descending) {
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
    SmallVector<BodyLoads> bodies;
    for (KvLoopOp loop : loops) {
      FailureOr<BodyLoads> l = bodyLoads(loop);
      if (failed(l))
        return signalPassFailure();
      bodies.push_back(*l);
    }
    int64_t stages = func.getScheduleAttr().getStages();
    if (stages != 1 && stages != 2) {
      func.emitOpError() << "has stages = " << stages << "; tile-pipeline-copies knows 1 and 2";
      return signalPassFailure();
    }
    // The buffers, at the top of the program: their tiles are the scheduled loads'.
    OpBuilder top(&func.getBody().front(), func.getBody().front().begin());
    Location loc = loadQ.getLoc();
    auto bufferOf = [&](Operand operand, Type tile, int64_t slots) {
      auto type = BufferType::get(&getContext(), cast<RankedTensorType>(tile), slots);
      return BufferOp::create(top, loc, type, operand).getResult();
    };
    Buffers buffers{bufferOf(Operand::Q, loadQ.getType(), 1), bufferOf(Operand::K, bodies.front().k.getType(), stages),
                    bufferOf(Operand::V, bodies.front().v.getType(), stages)};
    if (stages == 1)
      pipelineSingleBuffers(loops, bodies, buffers, loadQ, highest, lowest);
    else
      pipelineQkAhead(loops, bodies, buffers, loadQ, highest, lowest);
    if (failed(status))
      return signalPassFailure();
    stageOThroughQ(func, loadQ);
  }

  /// O staging: Q's tile is dead once the walk is over, so `tile.store o` sends O through its slot (`through`: whole
  /// rows, 16-byte stores, where a thread would store 4-byte fragment pairs) — unless O's rows are wider than Q's (a
  /// V head dim above Q's).
  static void stageOThroughQ(FuncOp func, LoadOp loadQ) {
    auto q = cast<RankedTensorType>(loadQ.getType());
    if (func.getHeadDimV() > q.getDimSize(1))
      return;
    for (Operation &op : func.getBody().front())
      if (auto store = dyn_cast<StoreOp>(op); store && store.getOperand() == Output::O)
        store.getStagingMutable().assign(loadQ.getSlot());
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
      (load.getOperand() == Operand::K ? l.k : l.v) = load;
    if (!l.k || !l.v)
      return fail(loop, "must load both a K and a V tile");
    l.qk = dyn_cast_or_null<QkOp>(*l.k->getUsers().begin());
    l.pv = dyn_cast_or_null<PvOp>(*l.v->getUsers().begin());
    if (!l.qk || !l.pv || !l.k->hasOneUse() || !l.v->hasOneUse())
      return fail(loop, "must load K for one tile.qk and V for one tile.pv");
    return l;
  }

  /// Appends `values` to the yield of `loop`'s body.
  static void yieldAlso(KvLoopOp loop, ValueRange values) {
    auto yield = cast<YieldOp>(loop.getBody().front().getTerminator());
    SmallVector<Value> yielded(yield.getValues());
    llvm::append_range(yielded, values);
    OpBuilder b(yield);
    YieldOp::create(b, yield.getLoc(), yielded);
    yield.erase();
  }

  void pipelineSingleBuffers(ArrayRef<KvLoopOp> loops, MutableArrayRef<BodyLoads> bodies, const Buffers &buffers,
                             LoadOp loadQ, Value highest, Value lowest) {
    Location loc = loadQ.getLoc();
    // Prologue, after the bounds: Q and the first K tile in flight together; Q must land before the loop.
    OpBuilder b(loops.front());
    Prologue p = startQAndFirstK(b, loc, buffers, highest, lowest);
    auto waitQ = WaitOp::create(b, loc, ValueRange{p.copyQ.getToken()}); // the first K tile may still be in flight
    loadQ->moveAfter(waitQ);
    buffers.readFromSlot(loadQ, p.copyQ.getSlot());

    // Each iteration gets the token of its K tile from the one before (the first from the prologue).
    Value tokenK = p.copyK.getToken();
    for (auto [constLoop, l] : llvm::zip(loops, bodies)) {
      KvLoopOp loop = withCarried(constLoop, ValueRange{tokenK});
      Block &body = loop.getBody().front();
      Value j = loop.getTileIndex();
      // K(j): wait for it, then start V(j) so it overlaps Q·Kᵀ.
      OpBuilder lb(&body, body.begin());
      WaitOp::create(lb, loc, ValueRange{body.getArguments().back()});
      CopyAsyncOp copyV = buffers.copy(lb, loc, Operand::V, j, Value());
      l.k->moveBefore(l.qk);
      buffers.readFromSlot(l.k);
      // V(j): wait for it right before P·V, then start K(next) so it overlaps P·V and the next softmax.
      lb.setInsertionPoint(l.pv);
      WaitOp::create(lb, loc, ValueRange{copyV.getToken()});
      Value next = minus(lb, loc, j, 1);
      Value tokenNext = buffers.copy(lb, loc, Operand::K, next, isVisited(lb, loc, next, lowest)).getToken();
      l.v->moveBefore(l.pv);
      buffers.readFromSlot(l.v, copyV.getSlot());
      yieldAlso(loop, ValueRange{tokenNext});
      tokenK = loop.getCarriedResults().back();
    }
  }

  void pipelineQkAhead(ArrayRef<KvLoopOp> loops, MutableArrayRef<BodyLoads> bodies, const Buffers &buffers,
                       LoadOp loadQ, Value highest, Value lowest) {
    Location loc = loadQ.getLoc();
    // Prologue, after the bounds: Q and the first K tile; once both landed, start V(first) and K(second) and
    // compute the first tile's scores.
    OpBuilder b(loops.front());
    Prologue p = startQAndFirstK(b, loc, buffers, highest, lowest);
    auto waitQK = WaitOp::create(b, loc, ValueRange{p.copyQ.getToken(), p.copyK.getToken()});
    loadQ->moveAfter(waitQK);
    buffers.readFromSlot(loadQ, p.copyQ.getSlot());
    b.setInsertionPointAfter(loadQ);
    Value tokenV = buffers.copy(b, loc, Operand::V, p.first, p.anyTile).getToken();
    Value second = minus(b, loc, p.first, 1);
    Value tokenK = buffers.copy(b, loc, Operand::K, second, isVisited(b, loc, second, lowest)).getToken();
    Type kType = bodies.front().k.getType(), sType = bodies.front().qk.getS().getType();
    auto kFirst = LoadOp::create(b, loc, kType, Operand::K, p.first, Value(), p.anyTile);
    buffers.readFromSlot(kFirst, p.copyK.getSlot());
    Value scores = QkOp::create(b, loc, sType, Type(), loadQ.getResult(), kFirst).getS();

    for (auto [constLoop, l] : llvm::zip(loops, bodies)) {
      // The same segment, now also carrying the scores of its tile j, the token of V(j) and that of K(next).
      KvLoopOp loop = withCarried(constLoop, ValueRange{scores, tokenV, tokenK});
      Block *body = &loop.getBody().front();
      auto args = body->getArguments();
      Value j = loop.getTileIndex(), scoresJ = args[args.size() - 3];
      // Top of iteration j: K(next) and V(j) land; the barrier also means every thread is done with K(j)'s slot
      // (read by the previous Q·Kᵀ) and V(j + 1)'s (read by the previous P·V): the copies of K(next + 1) and
      // V(next) go there.
      OpBuilder lb(body, body->begin());
      WaitOp::create(lb, loc, ValueRange{args[args.size() - 2], args[args.size() - 1]});
      Value next = minus(lb, loc, j, 1), afterNext = minus(lb, loc, j, 2);
      Value hasNext = isVisited(lb, loc, next, lowest);
      Value tokenKAfter =
          buffers.copy(lb, loc, Operand::K, afterNext, isVisited(lb, loc, afterNext, lowest)).getToken();
      Value tokenVNext = buffers.copy(lb, loc, Operand::V, next, hasNext).getToken();
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
      auto kNext = LoadOp::create(lb, loc, kType, Operand::K, next, Value(), hasNext);
      buffers.readFromSlot(kNext);
      Value scoresNext = QkOp::create(lb, loc, sType, Type(), loadQ.getResult(), kNext).getS();
      // This tile's scores arrive through the loop instead of its own Q·Kᵀ.
      l.qk.getS().replaceAllUsesWith(scoresJ);
      l.qk.erase();
      l.k.erase();
      l.v->moveBefore(l.pv);
      buffers.readFromSlot(l.v);
      yieldAlso(loop, ValueRange{scoresNext, tokenVNext, tokenKAfter});
      auto results = loop.getCarriedResults();
      scores = results[results.size() - 3];
      tokenV = results[results.size() - 2];
      tokenK = results[results.size() - 1];
    }
  }
};

} // namespace
