//===- ProgramKinds.cpp - the program-kind registry and the forward kind --===//
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileDialect.h"

#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <map>
#include <mutex>

using namespace mlir;
using namespace flashtile::tile;

namespace {

/// The forward program's structure: one Q load, one state initialized, K/V loops loading their own tile, one
/// finalize, O and LSE stored.
LogicalResult verifyForward(FuncOp func) {
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
  return success(ok);
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, ProgramKind, std::less<>> kinds;
  Registry() {
    kinds.emplace(kForwardProgram.str(),
                  ProgramKind{kForwardProgram.str(), "attention forward: O and LSE of a Q tile over its keys",
                              verifyForward});
  }
};

Registry &registry() {
  static Registry instance;
  return instance;
}

} // namespace

void flashtile::tile::registerProgramKind(ProgramKind kind) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.kinds.emplace(kind.name, std::move(kind));
}

const ProgramKind *flashtile::tile::lookupProgramKind(llvm::StringRef name) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.kinds.find(name);
  return it == r.kinds.end() ? nullptr : &it->second;
}

std::vector<std::string> flashtile::tile::programKindNames() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &[name, kind] : r.kinds)
    names.push_back(name);
  return names;
}
