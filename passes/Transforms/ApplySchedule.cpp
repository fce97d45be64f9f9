//===- ApplySchedule.cpp - tile-apply-schedule ----------------------------===//
//
// Asks the schedule named by the `schedule` option (ScheduleRegistry.h) for the program's configuration, attaches
// it as `#tile.schedule`, fixes the `?` tile dimensions (query rows become blockM, keys blockN) and sets the
// rescale policy on the online-softmax steps. Nothing here knows a particular schedule.
//===----------------------------------------------------------------------===//
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileKvDtype.h"
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"

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
/// Accumulators have `accRows` rows (blockM: O; blockN: the backward's dK and dV).
FailureOr<Type> scheduledType(Operation *op, Type type, int64_t blockM, int64_t blockN, int64_t accRows) {
  if (auto stats = dyn_cast<StatsType>(type)) {
    auto rows = fixDim(op, stats.getRows(), blockM, "row statistics rows");
    if (failed(rows))
      return failure();
    return Type(stats.withRows(*rows));
  }
  if (auto acc = dyn_cast<AccType>(type)) {
    auto rows = fixDim(op, acc.getRows(), accRows, "accumulator rows");
    if (failed(rows))
      return failure();
    return Type(acc.withRows(*rows));
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
    const std::string name = scheduleName.empty() ? schedule::Request{}.schedule : std::string(scheduleName);
    const schedule::Schedule *schedule = schedule::lookupSchedule(name);
    if (!schedule) {
      func.emitOpError() << schedule::unknownScheduleMessage(name);
      return signalPassFailure();
    }
    std::string error;
    FailureOr<schedule::Knobs> set =
        schedule::parseKnobs(*schedule, std::vector<std::string>(knobs.begin(), knobs.end()), error);
    if (failed(set)) {
      func.emitOpError() << error;
      return signalPassFailure();
    }
    std::optional<ShapeClass> shape = symbolizeShapeClass(shapeClass);
    if (!shape) {
      InFlightDiagnostic diag = func.emitOpError() << "unknown shape class '" << shapeClass << "'; accepted: ";
      for (uint32_t c = 0; c <= getMaxEnumValForShapeClass(); ++c)
        diag << (c ? ", " : "") << stringifyShapeClass(static_cast<ShapeClass>(c));
      return signalPassFailure();
    }
    if (std::optional<std::string> refusal = schedule->refusesDtype(dtypeName(func.getDtype()))) {
      func.emitOpError() << *refusal;
      return signalPassFailure();
    }
    if (hasKvDtype(func))
      if (std::optional<std::string> refusal = schedule->refusesKvDtype(dtypeName(kvDtypeOf(func)))) {
        func.emitOpError() << *refusal;
        return signalPassFailure();
      }
    FailureOr<ScheduleAttr> configured = schedule->configure(func, *set, *shape);
    if (failed(configured))
      return signalPassFailure();
    ScheduleAttr config = *configured;
    func.setScheduleAttr(config);
    // The rescale policy is the softmax step's: the interpreter and the targets read it there.
    if (int64_t threshold = config.getRescaleThreshold(); threshold > 0)
      func.walk([&](SoftmaxUpdateOp update) { update.setRescaleThreshold(threshold); });

    // A backward_main instance owns a K/V tile: its accumulators (dK, dV) have the tile's blockN rows.
    const int64_t accRows = func.getKind() == kBackwardMain ? config.getBlockN() : config.getBlockM();
    WalkResult result = func.getBody().walk([&](Operation *op) -> WalkResult {
      for (Region &region : op->getRegions())
        for (BlockArgument arg : region.getArguments()) {
          auto type = scheduledType(op, arg.getType(), config.getBlockM(), config.getBlockN(), accRows);
          if (failed(type))
            return WalkResult::interrupt();
          arg.setType(*type);
        }
      for (OpResult res : op->getResults()) {
        FailureOr<Type> type;
        if (auto load = dyn_cast<LoadOp>(op)) {
          auto t = cast<RankedTensorType>(load.getType());
          // K and V tiles have blockN rows; Q tiles and every other per-row tensor (O, dO, LSE, D, the dQ
          // accumulator) blockM.
          bool keyRows = load.getOperand() == Operand::K || load.getOperand() == Operand::V;
          int64_t rows = keyRows ? config.getBlockN() : config.getBlockM();
          auto fixed = fixDim(op, t.getDimSize(0), rows, (stringifyOperand(load.getOperand()) + " tile rows").str());
          if (failed(fixed))
            return WalkResult::interrupt();
          SmallVector<int64_t, 2> shape(t.getShape());
          shape[0] = *fixed;
          type = RankedTensorType::get(shape, t.getElementType());
        } else {
          type = scheduledType(op, res.getType(), config.getBlockM(), config.getBlockN(), accRows);
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
