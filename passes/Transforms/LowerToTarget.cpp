//===- LowerToTarget.cpp - tile-lower-to-target ---------------------------===//
//
// Picks the instruction family for a scheduled program: the program's schedule names the family that lowers
// it on the asked architecture, and that family (the target registry) checks that the scheduled tiles fit its
// instructions and the architecture's shared memory. Nothing here knows a particular schedule or family.
//===----------------------------------------------------------------------===//
#include "passes/IR/ProgramKinds.h"
#include "passes/Target/TargetFamily.h"
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILELOWERTOTARGET
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile;
using namespace flashtile::tile;

namespace {

struct TileLowerToTargetPass : flashtile::tile::impl::TileLowerToTargetBase<TileLowerToTargetPass> {
  using TileLowerToTargetBase::TileLowerToTargetBase;

  void runOnOperation() override {
    FuncOp func = getOperation();
    const std::string archName = arch.empty() ? schedule::Request{}.arch : std::string(arch);
    std::optional<std::string> canonical = target::canonicalArch(archName);
    if (!canonical) {
      func.emitOpError() << target::unknownArchMessage(archName);
      return signalPassFailure();
    }
    ScheduleAttr scheduleAttr = func.getScheduleAttr();
    // Forward programs are pipelined first (their copies are IR); the backward's printer makes its own copies.
    const bool forward = func.getKind() == kForwardProgram;
    if (!scheduleAttr ||
        (forward && !func.walk([](CopyAsyncOp) { return WalkResult::interrupt(); }).wasInterrupted())) {
      func.emitOpError() << "must be scheduled and pipelined before lowering to a target";
      return signalPassFailure();
    }
    const schedule::Schedule *schedule = schedule::lookupSchedule(scheduleAttr.getName());
    if (!schedule) {
      func.emitOpError() << "is scheduled with an " << schedule::unknownScheduleMessage(scheduleAttr.getName());
      return signalPassFailure();
    }
    std::string familyName = schedule->targetFamilyFor(*canonical);
    const target::TargetFamily *family = target::lookupTarget(familyName);
    std::optional<int64_t> maxSmem = family ? target::maxSmemBytes(*family, *canonical) : std::nullopt;
    if (!maxSmem) {
      func.emitOpError() << "schedule '" << scheduleAttr.getName() << "' has no lowering for " << *canonical
                         << (familyName.empty() ? " (" + std::string(schedule->summary()) + ")" : std::string());
      return signalPassFailure();
    }
    target::KernelShape shape = schedule::kernelShapeOf(func);
    if (std::optional<std::string> error = family->checkShape(shape)) {
      func.emitOpError() << *error;
      return signalPassFailure();
    }
    // The family's shared-memory rule is the forward kernel's; the backward's printer checks its own layout.
    int64_t smem = forward ? family->smemBytes(shape) : 0;
    if (smem > *maxSmem) {
      func.emitOpError() << "needs " << smem << " bytes of shared memory; " << *canonical << " allows " << *maxSmem
                         << " per block (reduce block-m, block-n or stages)";
      return signalPassFailure();
    }
    func.setTargetAttr(TargetAttr::get(&getContext(), *canonical, family->name()));
  }
};

} // namespace
