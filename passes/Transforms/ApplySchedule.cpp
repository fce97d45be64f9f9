//===- ApplySchedule.cpp - tile-apply-schedule ----------------------------===//
//
// Fixes the `?` tile dimensions from a schedule's configuration: query rows become blockM, keys blockN; sets
// the rescale policy on the online-softmax steps.
//===----------------------------------------------------------------------===//
#include "passes/Transforms/Passes.h"
#include "schedules/fa2/Fa2Config.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILEAPPLYSCHEDULE
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile;
using namespace flashtile::tile;

namespace {

/// Fills one dynamic dimension; a static one must already agree with the schedule.
FailureOr<int64_t> fixDim(Operation *op, int64_t current, int64_t wanted, StringRef what) {
  if (current == ShapedType::kDynamic || current == wanted)
    return wanted;
  op->emitOpError() << what << " is " << current << " but the schedule makes it " << wanted;
  return failure();
}

/// The scheduled type of a value: tile roles follow from shape and element type. Rank-2 fp32 tiles with a
/// static second dim are O tiles (rows = query rows); with a dynamic one, score tiles (query rows x keys).
/// Loads are handled by the caller, since Q and K/V tiles look alike.
FailureOr<Type> scheduledType(Operation *op, Type type, int64_t blockM, int64_t blockN) {
  if (auto state = dyn_cast<StateType>(type)) {
    auto rows = fixDim(op, state.getRows(), blockM, "state rows");
    if (failed(rows))
      return failure();
    return Type(StateType::get(type.getContext(), *rows, state.getCols()));
  }
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || tensor.hasStaticShape())
    return type;
  SmallVector<int64_t, 2> shape(tensor.getShape());
  auto rows = fixDim(op, shape[0], blockM, "tile rows");
  if (failed(rows))
    return failure();
  shape[0] = *rows;
  if (shape.size() == 2 && shape[1] == ShapedType::kDynamic)
    shape[1] = blockN;
  return Type(RankedTensorType::get(shape, tensor.getElementType()));
}

struct TileApplySchedulePass : flashtile::tile::impl::TileApplyScheduleBase<TileApplySchedulePass> {
  using TileApplyScheduleBase::TileApplyScheduleBase;

  void runOnOperation() override {
    FuncOp func = getOperation();
    if (func.getSchedule()) {
      func.emitOpError() << "is already scheduled with " << *func.getSchedule();
      return signalPassFailure();
    }
    if (scheduleName != fa2::kName) {
      func.emitOpError() << "unknown schedule '" << scheduleName
                         << "'; available: fa2 (fa3 and fa4 are planned, see schedules/)";
      return signalPassFailure();
    }
    int headDim = func.getHeadDim(), headDimV = func.getHeadDimV();
    fa2::ProgramTraits traits;
    traits.scoreMod = func.walk([](ScoreModOp) { return WalkResult::interrupt(); }).wasInterrupted();
    for (KvRangeOp range : func.getBody().getOps<KvRangeOp>()) {
      traits.headBoundary |= !range.lowerBoundIs(0);
      traits.growingWalks |= range.getKind() == "may" && range.upperBoundFollowsRows();
    }
    if (shapeClass != fa2::kShapeClassDefault && shapeClass != fa2::kShapeClassShort) {
      func.emitOpError() << "unknown shape class '" << shapeClass << "'; accepted: " << fa2::kShapeClassDefault << ", "
                         << fa2::kShapeClassShort;
      return signalPassFailure();
    }
    // The knobs set here override the class's defaults; a class that ends up with the default class's
    // configuration is that class (one kernel serves both).
    auto configure = [&](bool shortSequences) {
      fa2::Fa2Config config = fa2::Fa2Config::defaultsFor(headDim, headDimV, traits, shortSequences);
      if (blockM)
        config.blockM = blockM;
      if (blockN)
        config.blockN = blockN;
      if (warps)
        config.warps = warps;
      if (stages)
        config.stages = stages;
      if (rescaleThreshold != -1) // -1: the default; other values are validated below
        config.rescaleThreshold = static_cast<int>(rescaleThreshold);
      if (minBlocksPerSm != -1)
        config.minBlocksPerSm = static_cast<int>(minBlocksPerSm);
      if (lptGroupBlocks != -1)
        config.lptGroupBlocks = static_cast<int>(lptGroupBlocks);
      return config;
    };
    fa2::Fa2Config config = configure(shapeClass == fa2::kShapeClassShort);
    StringRef effectiveClass = config == configure(false) ? fa2::kShapeClassDefault : StringRef(shapeClass);
    if (auto error = config.validate(headDim, headDimV)) {
      func.emitOpError() << *error;
      return signalPassFailure();
    }
    func.setScheduleAttr(ScheduleAttr::get(&getContext(), fa2::kName, config.blockM, config.blockN, config.warps,
                                           config.stages, config.rescaleThreshold, config.minBlocksPerSm,
                                           config.lptGroupBlocks, effectiveClass));
    // The rescale policy is the softmax step's: the interpreter and the targets read it there.
    if (config.rescaleThreshold > 0)
      func.walk([&](SoftmaxUpdateOp update) { update.setRescaleThreshold(config.rescaleThreshold); });

    WalkResult result = func.getBody().walk([&](Operation *op) -> WalkResult {
      for (Region &region : op->getRegions())
        for (BlockArgument arg : region.getArguments()) {
          auto type = scheduledType(op, arg.getType(), config.blockM, config.blockN);
          if (failed(type))
            return WalkResult::interrupt();
          arg.setType(*type);
        }
      for (OpResult res : op->getResults()) {
        FailureOr<Type> type;
        if (auto load = dyn_cast<LoadOp>(op)) {
          auto t = cast<RankedTensorType>(load.getType());
          int64_t rows = load.getOperand() == "q" ? config.blockM : config.blockN;
          auto fixed = fixDim(op, t.getDimSize(0), rows, load.getOperand().str() + " tile rows");
          if (failed(fixed))
            return WalkResult::interrupt();
          type = RankedTensorType::get({*fixed, t.getDimSize(1)}, t.getElementType());
        } else {
          type = scheduledType(op, res.getType(), config.blockM, config.blockN);
        }
        if (failed(type))
          return WalkResult::interrupt();
        res.setType(*type);
      }
      return WalkResult::advance();
    });
    // The pass manager re-verifies every op with its new types (e.g. P·V's inner dimension).
    if (result.wasInterrupted())
      return signalPassFailure();
  }
};

} // namespace
