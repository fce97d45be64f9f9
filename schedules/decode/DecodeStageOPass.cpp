//===- DecodeStageOPass.cpp - tile-decode-stage-o -------------------------===//
//
// Where a split's O leaves, the decode schedule's decision, after tile-pipeline-copies has placed Q in its slot: Q's
// tile is dead once the walk is over, so tile.store_split sends O through that slot (`through`: whole rows, 16-byte
// stores, where a thread would store 4-byte fragment pairs), unless the rows are query heads packed into one tile
// (tile.pack_query_heads: each row is stored to its own head from the registers) or O's rows are wider than Q's.
//===----------------------------------------------------------------------===//
#include "schedules/decode/DecodeRegister.h"

#include "passes/IR/TileDialect.h"
#include "passes/IR/TilePacking.h"

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::decode {
namespace {

struct DecodeStageOPass : PassWrapper<DecodeStageOPass, OperationPass<FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(DecodeStageOPass)
  StringRef getArgument() const override { return "tile-decode-stage-o"; }
  StringRef getName() const override { return "DecodeStageO"; }
  StringRef getDescription() const override {
    return "sends each split's O through Q's dead shared-memory slot (tile.store_split ... through), unless rows "
           "pack query heads or O is wider than Q";
  }

  void runOnOperation() override {
    FuncOp func = getOperation();
    auto stores = llvm::to_vector(func.getBody().getOps<StoreSplitOp>());
    if (stores.size() != 1) {
      func.emitOpError() << "must store one tile.store_split (run tile-decode-split-kv first)";
      return signalPassFailure();
    }
    LoadOp loadQ;
    for (LoadOp load : func.getBody().getOps<LoadOp>())
      if (load.getOperand() == Operand::Q)
        loadQ = load;
    if (!loadQ || !loadQ.getSlot()) {
      func.emitOpError() << "must read Q from its shared-memory slot (run tile-pipeline-copies first)";
      return signalPassFailure();
    }
    StoreSplitOp store = stores.front();
    if (store.getStaging()) {
      store.emitOpError() << "already stages O";
      return signalPassFailure();
    }
    auto q = cast<RankedTensorType>(loadQ.getType());
    if (func->hasAttr(kPackQueryHeadsAttr) || func.getHeadDimV() > q.getDimSize(1))
      return;
    store.getStagingMutable().assign(loadQ.getSlot());
  }
};

} // namespace

std::unique_ptr<Pass> createStageOPass() { return std::make_unique<DecodeStageOPass>(); }

} // namespace flashtile::decode
