//===- LowerToTarget.cpp - tile-lower-to-target ---------------------------===//
//
// Picks the instruction family for a scheduled program and checks that the schedule fits it. The FA2
// schedule is written for the SM80 family (mma.sync, ldmatrix, cp.async), which SM90 and SM100 also run.
//===----------------------------------------------------------------------===//
#include "codegen/sm80/InstructionsSm80.h"
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

namespace isa = flashtile::codegen::sm80;

constexpr llvm::StringLiteral kInstAttr = "tile.inst";

struct TileLowerToTargetPass : flashtile::tile::impl::TileLowerToTargetBase<TileLowerToTargetPass> {
  using TileLowerToTargetBase::TileLowerToTargetBase;

  void runOnOperation() override {
    FuncOp func = getOperation();
    const isa::ArchLimits *info =
        llvm::find_if(isa::kArchs, [&](const isa::ArchLimits &a) { return StringRef(a.arch) == arch; });
    if (info == std::end(isa::kArchs)) {
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
    if (rowsPerWarp % isa::kMmaM != 0 || schedule.getBlockN() % isa::kMmaK != 0 ||
        func.getHeadDim() % isa::kMmaK != 0 || func.getHeadDimV() % isa::kMmaN != 0) {
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
    func.setTargetAttr(TargetAttr::get(ctx, arch, isa::kIsa));
    auto mark = [&](Operation *op, StringRef inst) { op->setAttr(kInstAttr, StringAttr::get(ctx, inst)); };
    func.walk([&](Operation *op) {
      llvm::TypeSwitch<Operation *, void>(op)
          .Case<QkOp, PvOp>([&](auto o) { mark(o, isa::kMmaInst); })
          .Case<CopyAsyncOp>([&](auto o) { mark(o, isa::kCopyInst); })
          .Case<WaitAsyncOp>([&](auto o) { mark(o, isa::kWaitInst); })
          .Case<LoadOp>([&](LoadOp o) { mark(o, o.getOperand() == "v" ? isa::kLoadTransposedInst : isa::kLoadInst); })
          .Case<SoftmaxUpdateOp>([&](auto o) { mark(o, isa::kSoftmaxInst); });
    });
  }
};

} // namespace
