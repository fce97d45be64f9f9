//===- Fa1Schedule.cpp - the FA1 teaching schedule as a plug-in -----------===//
//
// FlashAttention-1's orchestration (Fa1Config.h) registered with the schedule registry: its knobs, its configuration
// of a program, its walk order and its pass pipeline. The pipeline reads like Algorithm 1 of the paper:
//   tile-fa1-kv-steps     the outer loop: one K/V tile a launch, the state (m, l, O) read from and written back to
//                         global memory around it (Fa1KvStepsPass.cpp)
//   tile-split-boundary   the step's one tile is masked or not as the variant's KV-range rules say
//   tile-pipeline-copies  copies through shared memory, one K and one V buffer (the generic copy pipeline, as fa2's
//                         with stages = 1: fa1 has no pipelining of its own to teach)
//   tile-lower-to-target  the sm80 family (mma.sync, ldmatrix, cp.async) on every arch
//===----------------------------------------------------------------------===//
#include "schedules/fa1/Fa1Config.h"
#include "schedules/fa1/Fa1Register.h"

#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "mlir/Transforms/Passes.h"

namespace flashtile::fa1 {
namespace {

using namespace mlir;
using namespace flashtile::tile;

class Fa1Schedule final : public schedule::Schedule {
public:
  std::string_view name() const override { return kName; }
  std::string_view summary() const override {
    return "FlashAttention-1 (teaching): the K/V loop outside (one launch per K/V tile), the Q tiles inside, the "
           "row statistics and O written back to global memory every step (any arch, mma.sync; not tuned)";
  }
  const std::vector<schedule::OptionSpec> &options() const override {
    static const std::vector<schedule::OptionSpec> specs = {
        {kBlockM, "query rows per thread block (a multiple of 16 x warps)", kMmaRows, kMaxBlockM},
        {kBlockN, "keys per K/V tile: one launch each (a multiple of 16)", 16, kMaxBlockN},
        {kWarps, "warps per thread block; each owns block-m / warps query rows", 1, kMaxWarps},
    };
    return specs;
  }

  FailureOr<ScheduleAttr> configure(FuncOp func, const schedule::Knobs &knobs, ShapeClass) const override {
    int headDim = func.getHeadDim(), headDimV = func.getHeadDimV();
    Fa1Config config = Fa1Config::defaultsFor(headDim, headDimV);
    schedule::applyKnob(knobs, kBlockM, config.blockM);
    schedule::applyKnob(knobs, kBlockN, config.blockN);
    schedule::applyKnob(knobs, kWarps, config.warps);
    if (auto error = config.validate(headDim, headDimV))
      return func.emitOpError() << *error;
    // One tiling for every shape class; one K and one V buffer; every tile rescaled; no occupancy request; Q tiles
    // in grid order (the steps, not the blocks, are what is ordered).
    // Split-Q as fa2: every warp owns blockM / warps query rows.
    return ScheduleAttr::get(func.getContext(), kName, config.blockM, config.blockN, config.warps, WarpLayout::SplitQ,
                             config.blockM / config.warps, /*stages=*/1, /*rescaleThreshold=*/0, /*minBlocksPerSm=*/0,
                             /*lptGroupBlocks=*/0, ShapeClass::Default);
  }

  // A step visits at most one tile, so the order only matters to tile-pipeline-copies, which walks descending.
  bool walkDescending() const override { return true; }

  std::string targetFamilyFor(std::string_view) const override { return "sm80"; }

  void buildPipeline(OpPassManager &pm, const schedule::Request &request) const override {
    OpPassManager &func = pm.nest<FuncOp>();
    schedule::addApplySchedule(func, kName, request);
    func.addPass(createKvStepsPass());
    func.addPass(createTileSplitBoundary());
    func.addPass(createTilePipelineCopies());
    func.addPass(createTileLowerToTarget(TileLowerToTargetOptions{request.arch}));
    func.addPass(createCanonicalizerPass());
    func.addPass(createCSEPass());
  }
};

} // namespace

void registerSchedule() {
  schedule::registerSchedule(std::make_unique<Fa1Schedule>());
  mlir::registerPass([] { return createKvStepsPass(); });
}

} // namespace flashtile::fa1
