//===- OffsetPositions.cpp - tile-offset-positions -------------------------===//
//
// Makes a program a block of a larger problem (passes/IR/TilePositions.h): inside every hook region, the query
// row, key and query head arguments get the block's offsets added, the sizes the hooks read become the larger
// problem's, and a KV-range rule's key range is turned back into the block's keys (minus k_offset), so that the
// schedules' tile walk, which clamps the range to [0, seqlen_k), skips what the rule excludes at global positions.
// The rewrite is done once, on the unscheduled program: every later pass (the walk's segments, the backward's
// inverse of the rules, the derivatives) reads the rewritten hooks.
//===----------------------------------------------------------------------===//
#include "passes/IR/TilePositions.h"
#include "passes/Transforms/Passes.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILEOFFSETPOSITIONS
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

/// The size a hook reads in place of `dim` in a block of a larger problem, or nullopt for sizes that stay.
std::optional<Dim> globalDim(Dim dim) {
  switch (dim) {
  case Dim::SeqlenQ:
    return Dim::SeqlenQGlobal;
  case Dim::SeqlenK:
    return Dim::SeqlenKGlobal;
  case Dim::HeadsQ:
    return Dim::HeadsQGlobal;
  case Dim::HeadsKv:
    return Dim::HeadsKvGlobal;
  case Dim::KeyOffset:
    return Dim::KeyOffsetGlobal;
  default:
    return std::nullopt;
  }
}

/// The coordinates a hook region's block arguments carry.
struct HookArgs {
  int head = -1, query = -1, key = -1; ///< argument numbers; -1: not an argument of this hook
};

class Rewriter {
public:
  explicit Rewriter(FuncOp func) : func(func) {}

  LogicalResult run() {
    WalkResult walked = func.walk([&](Operation *op) {
      LogicalResult done = success();
      if (isa<ScoreModOp, ScoreGradOp, InputGradOp>(op)) // (score, b, h, q_idx, kv_idx)
        done = hook(op, op->getRegion(0), 5, {2, 3, 4});
      else if (isa<MaskOp>(op)) // (b, h, q_idx, kv_idx)
        done = hook(op, op->getRegion(0), 4, {1, 2, 3});
      else if (auto rule = dyn_cast<KvRangeOp>(op)) // (first row, last row, b, h) -> keys [lo, hi)
        done = kvRange(rule);
      else if (isa<FinalizeOp, StoreSplitOp, SinkGradOp>(op) && !op->getRegion(0).empty()) // (b, h)
        done = hook(op, op->getRegion(0), 2, {1, -1, -1});
      return failed(done) ? WalkResult::interrupt() : WalkResult::advance();
    });
    return failure(walked.wasInterrupted());
  }

private:
  Value dim(OpBuilder &b, Location loc, Dim which) { return DimOp::create(b, loc, which); }

  /// Adds `offset` to every use of `arg` in its region.
  void shift(OpBuilder &b, BlockArgument arg, Dim offset) {
    Location loc = arg.getLoc();
    auto sum = arith::AddIOp::create(b, loc, arg, dim(b, loc, offset));
    arg.replaceAllUsesExcept(sum, sum);
  }

  /// Sizes the region reads (defined inside it, or outside and used inside) become the larger problem's.
  void globalSizes(OpBuilder &b, Region &region) {
    region.walk([&](Operation *op) {
      for (OpOperand &use : op->getOpOperands()) {
        auto size = use.get().getDefiningOp<DimOp>();
        std::optional<Dim> global = size ? globalDim(size.getDim()) : std::nullopt;
        if (global)
          use.set(dim(b, size.getLoc(), *global));
      }
    });
  }

  LogicalResult hook(Operation *op, Region &region, unsigned arity, HookArgs args) {
    Block &block = region.front();
    if (block.getNumArguments() != arity)
      return op->emitOpError() << "has a hook region of " << block.getNumArguments() << " arguments; "
                               << "tile-offset-positions expects " << arity;
    OpBuilder b(op->getContext());
    b.setInsertionPointToStart(&block);
    globalSizes(b, region);
    b.setInsertionPointToStart(&block);
    if (args.head >= 0)
      shift(b, block.getArgument(args.head), Dim::HeadOffset);
    if (args.query >= 0)
      shift(b, block.getArgument(args.query), Dim::QOffset);
    if (args.key >= 0)
      shift(b, block.getArgument(args.key), Dim::KOffset);
    return success();
  }

  LogicalResult kvRange(KvRangeOp rule) {
    Block &block = rule.getRule().front();
    if (failed(hook(rule, rule.getRule(), 4, {3, -1, -1})))
      return failure();
    OpBuilder b(rule.getContext());
    b.setInsertionPointToStart(&block);
    shift(b, block.getArgument(0), Dim::QOffset);
    shift(b, block.getArgument(1), Dim::QOffset);
    // The rule's keys are the larger problem's: the walk takes them as the block's.
    Operation *yield = block.getTerminator();
    b.setInsertionPoint(yield);
    Value kOffset = dim(b, rule.getLoc(), Dim::KOffset);
    for (OpOperand &key : yield->getOpOperands())
      key.set(arith::SubIOp::create(b, rule.getLoc(), key.get(), kOffset));
    return success();
  }

  FuncOp func;
};

struct TileOffsetPositionsPass : flashtile::tile::impl::TileOffsetPositionsBase<TileOffsetPositionsPass> {
  void runOnOperation() override {
    FuncOp func = getOperation();
    if (func->hasAttr(kPositionOffsetsAttr)) {
      func.emitOpError() << "already takes position offsets (tile-offset-positions ran twice)";
      return signalPassFailure();
    }
    if (func.getScheduleAttr()) {
      func.emitOpError() << "is scheduled already; tile-offset-positions rewrites the unscheduled program";
      return signalPassFailure();
    }
    if (failed(Rewriter(func).run()))
      return signalPassFailure();
    func->setAttr(kPositionOffsetsAttr, UnitAttr::get(func.getContext()));
  }
};

} // namespace
