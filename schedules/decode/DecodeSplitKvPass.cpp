//===- DecodeSplitKvPass.cpp - tile-decode-split-kv -----------------------===//
//
// The decode schedule's split of the key range (flash-decoding), on a scheduled program before
// tile-split-boundary:
//  - the "may" KV-range rule is intersected with the program instance's split, [tile.dim split_begin,
//    tile.dim split_end), so tile-split-boundary bounds every loop segment by it: a split walks only its own
//    whole K/V tiles (an empty split walks none), and the variant's masks stay where they were;
//  - tile.store o and lse of the finalized state become one tile.store_split, which writes the split's
//    partial O and LSE for the combine kernel (or, unsplit, the result); finalize's sink moves onto it, so that it
//    joins each row's softmax once rather than once per split;
//  - with `pack-query-heads` (the default), rows pack the query heads of a K/V head (tile.pack_query_heads,
//    passes/IR/TilePacking.h) unless a KV-range rule reads its head: one rule for the group's heads must hold;
//  - with `kv-cache` (off by default, as the schedule's knob), the program may read a KV cache, contiguous or paged (tile.kv_cache,
//    passes/IR/TileKvCache.h): no op changes, the kernel's sequence view and K/V copies follow the cache.
//===----------------------------------------------------------------------===//
#include "schedules/decode/DecodeRegister.h"

#include "passes/IR/TileDialect.h"
#include "passes/IR/TileKvCache.h"
#include "passes/IR/TileKvDtype.h"
#include "passes/IR/TilePacking.h"

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::decode {
namespace {

struct DecodeSplitKvPass : PassWrapper<DecodeSplitKvPass, OperationPass<FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(DecodeSplitKvPass)
  DecodeSplitKvPass() = default;
  DecodeSplitKvPass(const DecodeSplitKvPass &other) : PassWrapper(other) {}
  DecodeSplitKvPass(bool pack, bool cache) {
    packQueryHeads = pack;
    kvCache = cache;
  }
  Option<bool> packQueryHeads{*this, "pack-query-heads",
                              llvm::cl::desc("rows pack the query heads of a K/V head (GQA), where the program's "
                                             "KV-range rules do not read the head"),
                              llvm::cl::init(true)};
  Option<bool> kvCache{*this, "kv-cache",
                       llvm::cl::desc("the program may read a KV cache, contiguous or paged (tile.kv_cache)"),
                       llvm::cl::init(false)};
  StringRef getArgument() const override { return "tile-decode-split-kv"; }
  StringRef getName() const override { return "DecodeSplitKv"; }
  StringRef getDescription() const override {
    return "split-KV (flash-decoding): bounds the walk by the program instance's split of the key range and "
           "stores partial O and LSE for the combine step (tile.store_split)";
  }

  void runOnOperation() override {
    FuncOp func = getOperation();
    if (!func.getScheduleAttr()) {
      func.emitOpError() << "must be scheduled before splitting the key range (run tile-apply-schedule)";
      return signalPassFailure();
    }
    if (!func.getBody().getOps<StoreSplitOp>().empty()) {
      func.emitOpError() << "already splits its key range (it has a tile.store_split)";
      return signalPassFailure();
    }
    if (!func.getBody().getOps<KvLoopOp>().empty() &&
        llvm::any_of(func.getBody().getOps<KvLoopOp>(), [](KvLoopOp loop) { return loop.isBounded(); })) {
      func.emitOpError() << "has bounded K/V loops; split the key range before tile-split-boundary";
      return signalPassFailure();
    }
    if (hasKvDtype(func) && !kvCache) {
      func.emitOpError() << "reads K and V of " << kKvDtypeAttr << " " << kvDtypeOf(func)
                         << ", which only a KV cache holds: split it with kv-cache (the KV-cache kernels)";
      return signalPassFailure();
    }
    if (failed(boundBySplit(func)) || failed(storeSplits(func)))
      return signalPassFailure();
    // A KV-range rule that reads its head (region argument 3) bounds one head's keys; a packed tile spans the
    // group's heads, so such programs keep one head a tile.
    bool rulesReadHead = llvm::any_of(func.getBody().getOps<KvRangeOp>(), [](KvRangeOp range) {
      return !range.getRule().front().getArgument(3).use_empty();
    });
    if (packQueryHeads && !rulesReadHead)
      func->setAttr(kPackQueryHeadsAttr, UnitAttr::get(func.getContext()));
    if (kvCache)
      func->setAttr(kKvCacheAttr, UnitAttr::get(func.getContext()));
  }

  /// lo, hi of the "may" rule → max(lo, split_begin), min(hi, split_end).
  LogicalResult boundBySplit(FuncOp func) {
    KvRangeOp may;
    for (KvRangeOp range : func.getBody().getOps<KvRangeOp>())
      if (range.getKind() == RangeKind::May)
        may = range;
    if (!may)
      return func.emitOpError() << "has no tile.kv_range may rule to bound by the split";
    auto yield = cast<YieldOp>(may.getRule().front().getTerminator());
    OpBuilder b(yield);
    Location loc = yield.getLoc();
    Value begin = DimOp::create(b, loc, Dim::SplitBegin), end = DimOp::create(b, loc, Dim::SplitEnd);
    Value lo = arith::MaxSIOp::create(b, loc, yield.getValues()[0], begin);
    Value hi = arith::MinSIOp::create(b, loc, yield.getValues()[1], end);
    yield->setOperands({lo, hi});
    return success();
  }

  /// tile.store o %o; tile.store lse %lse (of one tile.finalize) → tile.store_split %o, %lse [sink].
  LogicalResult storeSplits(FuncOp func) {
    SmallVector<StoreOp> stores(func.getBody().getOps<StoreOp>());
    FinalizeOp fin;
    StoreOp storeO, storeLse;
    for (StoreOp store : stores) {
      (store.getOperand() == Output::O ? storeO : storeLse) = store;
      auto from = store.getValue().getDefiningOp<FinalizeOp>();
      if (!from || (fin && from != fin))
        return store.emitOpError() << "stores a value that is not a result of the program's one tile.finalize; "
                                      "split-KV stores the finalized O and LSE together";
      fin = from;
    }
    if (stores.size() != 2 || !storeO || !storeLse)
      return func.emitOpError() << "must store O and LSE once each to split its key range";
    Operation *last = storeO->isBeforeInBlock(storeLse) ? storeLse : storeO;
    OpBuilder b(last);
    auto split = StoreSplitOp::create(b, last->getLoc(), fin.getO(), fin.getLse(), /*staging=*/Value());
    split.getSink().takeBody(fin.getSink());
    storeO.erase();
    storeLse.erase();
    return success();
  }
};

} // namespace

std::unique_ptr<Pass> createSplitKvPass(bool packQueryHeads, bool kvCache) {
  return std::make_unique<DecodeSplitKvPass>(packQueryHeads, kvCache);
}

} // namespace flashtile::decode
