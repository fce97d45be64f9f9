//===- Fa2Schedule.cpp - the FA2 schedule as a plug-in --------------------===//
//
// FA2 (Dao, 2023) registered with the schedule registry: its knobs, its configuration of a program (defaults per
// head dim, program traits and shape class: Fa2Config.cpp), its walk order and its pass pipeline.
//===----------------------------------------------------------------------===//
#include "schedules/fa2/Fa2Pipeline.h"
#include "schedules/fa2/Fa2Register.h"

#include "passes/IR/ProgramKinds.h"
#include "passes/Transforms/Passes.h"

#include "mlir/Transforms/Passes.h"

namespace flashtile::fa2 {
namespace {

using namespace mlir;
using namespace flashtile::tile;

/// What the defaults depend on, read off the program.
ProgramTraits traitsOf(FuncOp func) {
  ProgramTraits traits;
  traits.scoreMod = func.walk([](ScoreModOp) { return WalkResult::interrupt(); }).wasInterrupted();
  for (KvRangeOp range : func.getBody().getOps<KvRangeOp>()) {
    traits.headBoundary |= !range.lowerBoundIs(0);
    traits.growingWalks |= range.getKind() == RangeKind::May && range.upperBoundFollowsRows();
  }
  return traits;
}

class Fa2Schedule final : public schedule::Schedule {
public:
  std::string_view name() const override { return kName; }
  std::string_view summary() const override {
    return "FlashAttention-2: split-Q thread blocks walk the K/V tiles last to first, deferred normalization, "
           "cp.async double buffering (any arch, mma.sync)";
  }
  const std::vector<schedule::OptionSpec> &options() const override {
    static const std::vector<schedule::OptionSpec> specs = {
        {kBlockM, "query rows per thread block", 16, kMaxBlockM},
        {kBlockN, "keys per K/V tile", 16, kMaxBlockN},
        {kWarps, "warps per thread block; each owns block-m / warps query rows", 1, kMaxWarps},
        {kStages, "K/V buffers: 1 as in FA2, 2 also runs Q·Kᵀ one tile ahead of the softmax", kMinStages, kMaxStages},
        {kRescaleThreshold, "0: rescale acc every tile; N: only when a row max grows by more than N (log2)", 0,
         kMaxRescaleThreshold},
        {kMinBlocksPerSm, "registers capped so this many blocks fit an SM (0: no cap)", 0,
         kMaxThreadsPerSm / kWarpSize},
        {kLptGroupBlocks, "block order: 0 heaviest Q tile first per (batch, head); N across groups of >= N blocks", 0,
         kMaxLptGroupBlocks},
        {kKeyWarps, "backward only: warps splitting a K/V tile's keys for S and dP (and dQ's columns); 1: split-Q", 1,
         kMaxWarps},
    };
    return specs;
  }

  FailureOr<ScheduleAttr> configure(FuncOp func, const schedule::Knobs &knobs, ShapeClass shapeClass) const override {
    int headDim = func.getHeadDim(), headDimV = func.getHeadDimV();
    if (func.getKind() != kForwardProgram)
      return configureBackward(func, knobs);
    if (knobs.count(kKeyWarps))
      return func.emitOpError() << "fa2: " << kKeyWarps << " shapes the backward's warps only; accepted: unset for a "
                                << "forward program";
    ProgramTraits traits = traitsOf(func);
    // The knobs set override the class's defaults; a class that ends up with the default class's configuration
    // is that class (one kernel serves both).
    auto configureFor = [&](bool shortSequences) {
      Fa2Config config = Fa2Config::defaultsFor(headDim, headDimV, traits, shortSequences);
      schedule::applyKnob(knobs, kBlockM, config.blockM);
      schedule::applyKnob(knobs, kBlockN, config.blockN);
      schedule::applyKnob(knobs, kWarps, config.warps);
      schedule::applyKnob(knobs, kStages, config.stages);
      schedule::applyKnob(knobs, kRescaleThreshold, config.rescaleThreshold);
      schedule::applyKnob(knobs, kMinBlocksPerSm, config.minBlocksPerSm);
      schedule::applyKnob(knobs, kLptGroupBlocks, config.lptGroupBlocks);
      return config;
    };
    Fa2Config config = configureFor(shapeClass == ShapeClass::Short);
    ShapeClass effectiveClass = config == configureFor(false) ? ShapeClass::Default : shapeClass;
    if (auto error = config.validate(headDim, headDimV))
      return func.emitOpError() << *error;
    // Split-Q (FA2): every warp owns blockM / warps query rows (validate checked the division).
    return ScheduleAttr::get(func.getContext(), kName, config.blockM, config.blockN, config.warps, WarpLayout::SplitQ,
                             config.blockM / config.warps, config.stages, config.rescaleThreshold,
                             config.minBlocksPerSm, config.lptGroupBlocks, effectiveClass);
  }

  /// The backward's three programs share one configuration (the main program's tiles: blockM-row Q tiles, blockN-key
  /// K/V tiles; the preprocess and postprocess take Q tiles of blockM rows). block-m, block-n, warps and stages apply
  /// (stages: Q-tile buffers, 2 copies each Q tile one tile ahead: tile-pipeline-q-loop).
  FailureOr<ScheduleAttr> configureBackward(FuncOp func, const schedule::Knobs &knobs) const {
    // The forward's policies have no counterpart in the backward: refused by name, never silently ignored.
    for (const char *forwardKnob : {kRescaleThreshold, kMinBlocksPerSm, kLptGroupBlocks})
      if (knobs.count(forwardKnob))
        return func.emitOpError() << "fa2 backward: the knob " << forwardKnob
                                  << " shapes the forward's kernel only; the backward accepts block-m, block-n, "
                                     "warps, stages and key-warps";
    int headDim = func.getHeadDim(), headDimV = func.getHeadDimV();
    Fa2Config config = Fa2Config::backwardDefaultsFor(headDim, headDimV);
    schedule::applyKnob(knobs, kBlockM, config.blockM);
    schedule::applyKnob(knobs, kBlockN, config.blockN);
    schedule::applyKnob(knobs, kWarps, config.warps);
    schedule::applyKnob(knobs, kStages, config.stages);
    schedule::applyKnob(knobs, kKeyWarps, config.keyWarps);
    if (auto error = config.validateBackward(headDim, headDimV))
      return func.emitOpError() << *error;
    // The warps' split of S's keys is the printer's business, not the program's: a func attribute (split-Q without).
    if (config.keyWarps > 1)
      func->setAttr(kKeyWarpsAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), config.keyWarps));
    // Split-Q by row groups: a warp computes S and dP for its group's backwardWarpRows() query rows (all of a
    // tile's keys without key-warps).
    return ScheduleAttr::get(func.getContext(), kName, config.blockM, config.blockN, config.warps, WarpLayout::SplitQ,
                             config.backwardWarpRows(), config.stages, /*rescaleThreshold=*/0,
                             /*minBlocksPerSm=*/0, /*lptGroupBlocks=*/0, ShapeClass::Default);
  }

  bool walkDescending() const override { return true; }

  bool schedulesKind(std::string_view kind) const override {
    return kind == "forward" || kind == std::string_view(kBackwardModule);
  }

  std::string targetFamilyFor(std::string_view) const override {
    // mma.sync, ldmatrix and cp.async run on every architecture from sm_80 on.
    return "sm80";
  }

  DispatchRule dispatchRule(std::string_view) const override {
    // Runs on every arch, proven on the GPU machine: the schedule every call naming none can fall back to.
    return {.calls = DefaultCalls::All};
  }

  void buildPipeline(OpPassManager &pm, const schedule::Request &request) const override {
    OpPassManager &func = pm.nest<FuncOp>();
    if (request.kind == kBackwardModule) {
      // The backward (docs/backward.md): the main program walks the Q tiles that see its K/V tile, masked only on
      // the boundary segments; its tiles stay in shared memory for the whole walk (the printer's copies). One staging
      // barrier a Q tile, and with two buffers (stages = 2) each tile's copies issued a tile ahead.
      schedule::addApplySchedule(func, kName, request);
      func.addPass(createTileBoundQLoop());
      func.addPass(createTileLowerToTarget(TileLowerToTargetOptions{request.arch}));
      func.addPass(createCanonicalizerPass());
      func.addPass(createCSEPass());
      func.addPass(createTilePipelineQLoop());
      return;
    }
    schedule::addApplySchedule(func, kName, request);
    func.addPass(createTileSplitBoundary());
    func.addPass(createTilePipelineCopies());
    func.addPass(createTileLowerToTarget(TileLowerToTargetOptions{request.arch}));
    func.addPass(createCanonicalizerPass());
    func.addPass(createCSEPass());
  }
};

} // namespace

void registerSchedule() { schedule::registerSchedule(std::make_unique<Fa2Schedule>()); }

schedule::Request Fa2Options::request() const {
  schedule::Request r;
  r.schedule = kName;
  r.arch = arch;
  r.shapeClass = shapeClass;
  for (auto [knob, value, unset] : {std::tuple{kBlockM, blockM, 0},
                                    {kBlockN, blockN, 0},
                                    {kWarps, warps, 0},
                                    {kStages, stages, 0},
                                    {kRescaleThreshold, rescaleThreshold, -1},
                                    {kMinBlocksPerSm, minBlocksPerSm, -1},
                                    {kLptGroupBlocks, lptGroupBlocks, -1}})
    if (value != unset)
      r.knobs[knob] = value;
  return r;
}

void buildPipeline(OpPassManager &pm, const Fa2Options &options) {
  static const Fa2Schedule fa2;
  fa2.buildPipeline(pm, options.request());
}

} // namespace flashtile::fa2
