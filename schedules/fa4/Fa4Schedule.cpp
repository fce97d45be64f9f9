//===- Fa4Schedule.cpp - the FA4 schedule as a plug-in --------------------===//
//
// FlashAttention-4 (flash-attention's flash_attn/cute/flash_fwd_sm100.py) registered with the schedule registry. By
// default (`roles = 1`) its roles are FA4's own, written with the memory layer by tile-fa4-roles
// (Fa4RolesPass.cpp): a load warp fills K/V ring slots with TMA behind full/empty barriers, one MMA warp issues every
// tcgen05.mma of the block's two Q tiles (S and O in tensor memory, P written over S as 16-bit), a softmax
// warpgroup per Q tile of 128 rows runs the program's math with conditional rescaling (FA4's threshold 8 by
// default), and a correction warpgroup rescales O in tensor memory and stores O / l and the LSE. tile-lower-to-target
// hands it to the sm100 family (tcgen05.mma, TMEM) on sm_100a; other architectures have no fa4 lowering.
//
// `roles = 0` keeps the first form: the role IR the generic tile-role-pipeline writes (passes/Transforms/RolePipeline.h:
// a producer role and a consumer role over a ring, configured here with its overlap, ping-pong, persistence and O
// staging off), each softmax warpgroup issuing its own MMAs
// and rescaling and storing its own O. What is not FA4 yet (schedules/fa4/README.md): 2-CTA MMAs, 128-key tiles,
// FA4's exp2 share per head dim.
//
// No SM100 GPU exists here: fa4's kernels are compiled by NVRTC for sm_100a and read as SASS, never run. Their
// manifests say so (checkAgainstOn): a runtime on sm_100 checks each against fa2 on first use.
//===----------------------------------------------------------------------===//
#include "schedules/fa4/Fa4Config.h"
#include "schedules/fa4/Fa4Register.h"
#include "schedules/fa4/Fa4Roles.h"

#include "passes/IR/TileCtaPair.h"
#include "passes/IR/TileExp2Poly.h"
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/RolePipeline.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include <string>

namespace flashtile::fa4 {
namespace {

using namespace mlir;
using namespace flashtile::tile;

/// The role pipeline's configuration for the first form (`roles = 0`; the default, `roles = 1`, does not use it):
/// a producer role of one warpgroup and a consumer role of the softmax warpgroups, every GEMM retired before the
/// next (no overlap), no turns, a block a tile, O stored from the consumers. The roles' register budgets are the
/// pass's defaults; the sm100 family keeps the launch's registers for every role (codegen/sm100/TileOpsSm100.cpp).
tile::ConsumerOrder firstFormOrder() {
  tile::ConsumerOrder order;
  order.overlap = false;
  order.pingpong = 0;
  order.persistent = 0;
  order.stageO = 0;
  return order;
}

class Fa4Schedule final : public schedule::Schedule {
public:
  std::string_view name() const override { return kName; }
  std::string_view summary() const override {
    return "FlashAttention-4: a TMA load warp, one MMA warp issuing every tcgen05.mma, softmax warpgroups of 128 rows "
           "with S and O in tensor memory, a correction warpgroup, conditional rescaling (sm_100a only; compiled, "
           "never run: no SM100 GPU)";
  }
  const std::vector<schedule::OptionSpec> &options() const override {
    static const std::vector<schedule::OptionSpec> specs = {
        {kBlockN, "keys per K/V tile, a power of two (default: 64; FA4's 128 spills registers with S in C "
                  "fragments)", 16, 256},
        {kStages, "slots of the K and V rings", 1, 8},
        {kSoftmaxWarpgroups, "Q tiles of 128 rows a block runs side by side, one softmax warpgroup each (default: 2 "
                             "while their S and O fit tensor memory, head dim v up to 192)", 1, 2},
        {kRescaleThreshold, "FA4's conditional rescaling: a warp's row maxes move (and O *= alpha runs) only when one "
                            "grew by more than N (log2 units); 0: every tile", 0, kMaxRescaleThreshold},
        {kExp2PolyShare, "of every 8 n8 tiles of a score row, how many take their exponentials from the software "
                         "exp2 on the FMA pipe (sm100::math::exp2Poly3) instead of MUFU; 0: none", 0, 8},
        {kTwoCta, "1: a cluster of two CTAs along the Q tiles, one MMA warp issuing tcgen05.mma.cta_group::2 "
                  "(M = 256) for both; head dims >= 128, a key range that does not depend on the Q tile (FA4: "
                  "non-causal); default 0", 0, 1},
        {kRoles, "1 (default): FA4's own roles on the memory layer (a load warp, one MMA warp, a softmax warpgroup per "
                 "Q tile, a correction warpgroup); 0: the first form (each softmax warpgroup issues its own MMAs, "
                 "from fa3's role pipeline)", 0, 1},
    };
    return specs;
  }

  FailureOr<ScheduleAttr> configure(FuncOp func, const schedule::Knobs &knobs, ShapeClass shapeClass) const override {
    std::string error;
    std::optional<Fa4Config> c = fa4::configure(func.getHeadDim(), func.getHeadDimV(), knobs, error);
    if (!c)
      return func.emitOpError() << error;
    if (c->twoCta == 1) {
      // The pair's MMAs walk one K/V range for both CTAs: a rule that bounds keys by the Q tile's rows (causal,
      // windows, documents) would give the two CTAs different walks. FA4 pairs CTAs only without a causal mask.
      KvRangeOp byRows;
      func.walk([&](KvRangeOp range) {
        Block &body = range.getRule().front();
        if (body.getNumArguments() >= 2 && (!body.getArgument(0).use_empty() || !body.getArgument(1).use_empty()))
          byRows = range;
      });
      if (byRows)
        return func.emitOpError() << "fa4: two-cta = 1 needs a key range that does not depend on the Q tile (the two "
                                     "CTAs of a pair walk the same K/V tiles), but variant '"
                                  << func.getVariant() << "' bounds keys by query rows (tile.kv_range); accepted for "
                                     "it: two-cta = 0";
      func->setAttr(kCtaPairAttr, UnitAttr::get(func.getContext()));
    }
    // The share of software exponentials is the printer's business, not the program's: a func attribute.
    if (c->exp2PolyShare > 0)
      func->setAttr(kExp2PolyShareAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), c->exp2PolyShare));
    // Split-Q over the softmax warpgroups: a warp holds its TMEM lane quarter, 32 rows.
    const int64_t warpRows = kRowsPerWarpgroup / kWarpgroupWarps;
    return ScheduleAttr::get(func.getContext(), kName, c->blockM, c->blockN, c->warps(), WarpLayout::SplitQ, warpRows,
                             c->stages, c->rescaleThreshold, /*minBlocksPerSm=*/0, /*lptGroupBlocks=*/0, shapeClass);
  }

  bool walkDescending() const override { return true; }

  std::string targetFamilyFor(std::string_view arch) const override {
    // tcgen05 and tensor memory are sm_100a's alone.
    return arch == "sm_100a" ? "sm100" : "";
  }

  /// Offered on sm_100a when named only: no fa4 kernel has run on a GPU, so it replaces no proven schedule.
  DispatchRule dispatchRule(std::string_view) const override { return {}; }

  /// Never run on SM100 hardware: a runtime checks each fa4 kernel against fa2's on first use.
  std::string checkAgainstOn(std::string_view arch) const override { return arch == "sm_100a" ? "fa2" : ""; }

  void buildPipeline(OpPassManager &pm, const schedule::Request &request) const override {
    OpPassManager &func = pm.nest<FuncOp>();
    schedule::addApplySchedule(func, kName, request);
    func.addPass(tile::createTileSplitBoundary());
    if (auto roles = request.knobs.find(kRoles); roles == request.knobs.end() || roles->second != 0) {
      func.addPass(createRolesPass());
      func.addPass(tile::createTileLowerToTarget(tile::TileLowerToTargetOptions{request.arch}));
      return;
    }
    func.addPass(tile::createTileRolePipeline({0, 0}, firstFormOrder()));
    func.addPass(tile::createTileLowerToTarget(tile::TileLowerToTargetOptions{request.arch}));
  }
};

} // namespace

void registerSchedule() {
  schedule::registerSchedule(std::make_unique<Fa4Schedule>());
  mlir::registerPass([] { return createRolesPass(); }); // tile-fa4-roles, for flashtile-opt
}

} // namespace flashtile::fa4
