//===- Fa1KvStepsPass.cpp - tile-fa1-kv-steps -----------------------------===//
//
// FA1's outer loop, on a scheduled program before tile-split-boundary. The program becomes one step of the walk over
// K/V tiles: it is launched once per K/V tile (tile.dim kv_step), and each of its instances (a Q tile) visits
// that tile only, with the online-softmax state carried from step to step through global memory:
//  - tile.init_state becomes tile.state_load: the state the previous step stored for these rows (empty at step 0);
//  - the "may" KV-range rule is intersected with the step's tile, [kv_step·block_n, kv_step·block_n + block_n), so
//    tile-split-boundary bounds every loop segment by it: a step visits its tile if the variant lets some row of
//    the Q tile see it, and masks it only where the rules say; a step past the sequence's keys (varlen) is [0, 0);
//  - the state the K/V loops leave goes through tile.state_store before tile.finalize: every step writes m, l and
//    acc back, and O and LSE of the keys seen so far (FA1 writes O_i every step), so after the last step O and LSE
//    are the result.
//===----------------------------------------------------------------------===//
#include "schedules/fa1/Fa1Register.h"

#include "passes/IR/TileDialect.h"

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::fa1 {
namespace {

struct Fa1KvStepsPass : PassWrapper<Fa1KvStepsPass, OperationPass<FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(Fa1KvStepsPass)
  StringRef getArgument() const override { return "tile-fa1-kv-steps"; }
  StringRef getName() const override { return "Fa1KvSteps"; }
  StringRef getDescription() const override {
    return "FA1's outer loop: one K/V tile per launch (tile.dim kv_step), the online-softmax state loaded from "
           "and stored to global memory around it (tile.state_load, tile.state_store)";
  }

  void runOnOperation() override {
    FuncOp func = getOperation();
    ScheduleAttr schedule = func.getScheduleAttr();
    if (!schedule) {
      func.emitOpError() << "must be scheduled before splitting the walk into K/V steps (run tile-apply-schedule)";
      return signalPassFailure();
    }
    if (!func.getBody().getOps<StateLoadOp>().empty()) {
      func.emitOpError() << "already walks K/V steps (it has a tile.state_load)";
      return signalPassFailure();
    }
    if (!func.getBody().getOps<StoreSplitOp>().empty()) {
      func.emitOpError() << "splits its key range (tile.store_split); K/V steps carry one state per row instead";
      return signalPassFailure();
    }
    if (llvm::any_of(func.getBody().getOps<KvLoopOp>(), [](KvLoopOp loop) { return loop.isBounded(); })) {
      func.emitOpError() << "has bounded K/V loops; split the walk into K/V steps before tile-split-boundary";
      return signalPassFailure();
    }
    auto inits = llvm::to_vector(func.getBody().getOps<InitStateOp>());
    auto finalizes = llvm::to_vector(func.getBody().getOps<FinalizeOp>());
    if (inits.size() != 1 || finalizes.size() != 1) {
      func.emitOpError() << "must initialize and finalize its softmax state once each at the top level (found "
                         << inits.size() << " tile.init_state, " << finalizes.size() << " tile.finalize)";
      return signalPassFailure();
    }
    if (failed(boundByStep(func, schedule.getBlockN())))
      return signalPassFailure();

    OpBuilder b(inits.front());
    auto load = StateLoadOp::create(b, inits.front().getLoc(), inits.front().getStats().getType(),
                                    inits.front().getAcc().getType());
    inits.front().replaceAllUsesWith(load);
    inits.front().erase();

    FinalizeOp fin = finalizes.front();
    b.setInsertionPoint(fin);
    auto store = StateStoreOp::create(b, fin.getLoc(), fin.getStats().getType(), fin.getAcc().getType(),
                                      fin.getStats(), fin.getAcc());
    fin.getStatsMutable().assign(store.getStatsOut());
    fin.getAccMutable().assign(store.getAccOut());
  }

  /// lo, hi of the "may" rule → max(lo, kv_step·N), min(hi, kv_step·N + N), or [0, 0) for a step past the
  /// sequence's keys (varlen: shorter sequences run out of tiles first). Clamped to seqlen_k, a range past the keys
  /// would land inside a partial last tile, which the walk would then visit again at every later step.
  LogicalResult boundByStep(FuncOp func, int64_t blockN) {
    KvRangeOp may;
    for (KvRangeOp range : func.getBody().getOps<KvRangeOp>())
      if (range.getKind() == RangeKind::May)
        may = range;
    if (!may)
      return func.emitOpError() << "has no tile.kv_range may rule to bound by the K/V step";
    auto yield = cast<YieldOp>(may.getRule().front().getTerminator());
    OpBuilder b(yield);
    Location loc = yield.getLoc();
    Value step = DimOp::create(b, loc, Dim::KvStep);
    Value n = arith::ConstantIntOp::create(b, loc, blockN, 32);
    Value begin = arith::MulIOp::create(b, loc, step, n);
    Value end = arith::AddIOp::create(b, loc, begin, n);
    Value lo = arith::MaxSIOp::create(b, loc, yield.getValues()[0], begin);
    Value hi = arith::MinSIOp::create(b, loc, yield.getValues()[1], end);
    Value past = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, begin, DimOp::create(b, loc, Dim::SeqlenK));
    Value zero = arith::ConstantIntOp::create(b, loc, 0, 32);
    yield->setOperands({arith::SelectOp::create(b, loc, past, zero, lo).getResult(),
                        arith::SelectOp::create(b, loc, past, zero, hi).getResult()});
    return success();
  }
};

} // namespace

std::unique_ptr<Pass> createKvStepsPass() { return std::make_unique<Fa1KvStepsPass>(); }

} // namespace flashtile::fa1
