//===- LowerToTarget.cpp - tile-lower-to-target ---------------------------===//
//
// Picks the instruction family for a scheduled program and checks that the schedule fits it. The FA2
// schedule is written for the SM80 family (mma.sync, ldmatrix, cp.async), which SM90 and SM100 also run.
//===----------------------------------------------------------------------===//
#include "passes/Transforms/Passes.h"
#include "schedules/fa2/Fa2Config.h"

#include "llvm/ADT/TypeSwitch.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILELOWERTOTARGET
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

struct ArchInfo {
  llvm::StringLiteral name;
  int64_t maxSmemBytes; // per-block opt-in dynamic shared memory limit
};
constexpr ArchInfo kArchs[] = {{"sm_80", 163 * 1024}, {"sm_90a", 227 * 1024}, {"sm_100a", 227 * 1024}};

constexpr llvm::StringLiteral kInstAttr = "tile.inst";

struct TileLowerToTargetPass : flashtile::tile::impl::TileLowerToTargetBase<TileLowerToTargetPass> {
  using TileLowerToTargetBase::TileLowerToTargetBase;

  void runOnOperation() override {
    FuncOp func = getOperation();
    const ArchInfo *info = llvm::find_if(kArchs, [&](const ArchInfo &a) { return a.name == arch; });
    if (info == std::end(kArchs)) {
      func.emitOpError() << "unknown arch '" << arch << "'; accepted: sm_80, sm_90a, sm_100a";
      return signalPassFailure();
    }
    ScheduleAttr schedule = func.getScheduleAttr();
    if (!schedule || func.getBody().getOps<CopyAsyncOp>().empty()) {
      func.emitOpError() << "must be scheduled and pipelined before lowering to a target";
      return signalPassFailure();
    }
    if (schedule.getName() != flashtile::fa2::kName) {
      func.emitOpError() << "schedule '" << schedule.getName() << "' has no lowering for " << arch;
      return signalPassFailure();
    }
    int64_t rowsPerWarp = schedule.getBlockM() / schedule.getWarps();
    if (rowsPerWarp % 16 != 0 || schedule.getBlockN() % 16 != 0 || func.getHeadDim() % 16 != 0 ||
        func.getHeadDimV() % 8 != 0) {
      func.emitOpError() << "mma.sync.m16n8k16 needs 16-row warp tiles, 16-key tiles, head_dim % 16 == 0 and "
                            "head_dim_v % 8 == 0; got "
                         << rowsPerWarp << " rows per warp, block-n " << schedule.getBlockN() << ", head dims "
                         << func.getHeadDim() << "/" << func.getHeadDimV();
      return signalPassFailure();
    }
    flashtile::fa2::Fa2Config config{static_cast<int>(schedule.getBlockM()), static_cast<int>(schedule.getBlockN()),
                                     static_cast<int>(schedule.getWarps()), static_cast<int>(schedule.getStages())};
    int64_t smem = config.smemBytes(func.getHeadDim(), func.getHeadDimV());
    if (smem > info->maxSmemBytes) {
      func.emitOpError() << "needs " << smem << " bytes of shared memory; " << arch << " allows " << info->maxSmemBytes
                         << " per block (reduce block-m or block-n)";
      return signalPassFailure();
    }

    MLIRContext *ctx = &getContext();
    func.setTargetAttr(TargetAttr::get(ctx, arch, "sm80"));
    auto mark = [&](Operation *op, StringRef inst) { op->setAttr(kInstAttr, StringAttr::get(ctx, inst)); };
    func.walk([&](Operation *op) {
      llvm::TypeSwitch<Operation *, void>(op)
          .Case<QkOp, PvOp>([&](auto o) { mark(o, "mma.sync.aligned.m16n8k16.row.col.f32"); })
          .Case<CopyAsyncOp>([&](auto o) { mark(o, "cp.async.cg.shared.global.16"); })
          .Case<WaitAsyncOp>([&](auto o) { mark(o, "cp.async.wait_group+bar.sync"); })
          .Case<LoadOp>([&](LoadOp o) { mark(o, o.getOperand() == "v" ? "ldmatrix.x4.trans" : "ldmatrix.x4"); })
          .Case<SoftmaxUpdateOp>([&](auto o) { mark(o, "ex2.approx.f32+shfl.bfly"); });
    });
  }
};

} // namespace
