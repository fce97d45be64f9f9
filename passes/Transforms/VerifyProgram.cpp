//===- VerifyProgram.cpp - tile-verify-program ----------------------------===//
#include "passes/IR/ProgramKinds.h"
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
    // FuncOp's verifier made sure the kind is registered.
    const ProgramKind *kind = lookupProgramKind(func.getKind());
    if (!kind || failed(kind->verify(func)))
      signalPassFailure();
  }
};

} // namespace
