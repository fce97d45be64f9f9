//===- VerifyProgram.cpp - tile-verify-program ----------------------------===//
#include "passes/Transforms/Passes.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILEVERIFYPROGRAM
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

struct TileVerifyProgramPass : flashtile::tile::impl::TileVerifyProgramBase<TileVerifyProgramPass> {
  void runOnOperation() override {
    FuncOp func = getOperation();
    int qLoads = 0, inits = 0, finalizes = 0, loops = 0;
    bool storesO = false, storesLse = false;
    bool ok = true;
    auto fail = [&](Operation *op, const Twine &message) {
      op->emitOpError() << message;
      ok = false;
    };
    for (Operation &op : func.getBodyBlock()) {
      if (auto load = dyn_cast<LoadOp>(op)) {
        if (load.getOperand() != Operand::Q)
          fail(load, "K/V tiles can only be loaded inside a tile.kv_loop");
        ++qLoads;
      } else if (isa<InitStateOp>(op)) {
        ++inits;
      } else if (isa<FinalizeOp>(op)) {
        ++finalizes;
      } else if (auto store = dyn_cast<StoreOp>(op)) {
        (store.getOperand() == Output::O ? storesO : storesLse) = true;
      } else if (auto loop = dyn_cast<KvLoopOp>(op)) {
        ++loops;
        loop.getBody().walk([&](LoadOp load) {
          if (load.getOperand() == Operand::Q)
            fail(load, "the Q tile is loaded once, outside the K/V loop");
          else if (load.getIndex() != loop.getTileIndex())
            fail(load, "must load the loop's own tile (the loop's first block argument)");
        });
      }
    }
    if (qLoads != 1)
      fail(func, "must load the Q tile exactly once, found " + Twine(qLoads));
    if (inits != 1)
      fail(func, "must initialize the softmax state exactly once, found " + Twine(inits));
    if (loops < 1)
      fail(func, "has no tile.kv_loop");
    if (finalizes != 1)
      fail(func, "must finalize the softmax state exactly once, found " + Twine(finalizes));
    if (!storesO || !storesLse)
      fail(func, "must store both O and LSE");
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
