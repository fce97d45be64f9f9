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

/// Counts the ops of a body by what they load and store, for the backward kinds' verifiers.
struct Census {
  std::map<std::string, int> loads, stores, accumulates;
  int loops = 0;
  explicit Census(Block &block, bool nested) {
    auto count = [&](Operation *op) {
      if (auto load = dyn_cast<LoadOp>(op))
        ++loads[stringifyOperand(load.getOperand()).str()];
      else if (auto store = dyn_cast<StoreOp>(op))
        ++stores[stringifyOutput(store.getOperand()).str()];
      else if (auto add = dyn_cast<AccumulateOp>(op))
        ++accumulates[stringifyOperand(add.getOperand()).str()];
      else if (isa<QLoopOp>(op))
        ++loops;
    };
    for (Operation &op : block) {
      if (nested)
        op.walk([&](Operation *inner) { count(inner); });
      else
        count(&op);
    }
  }
};

/// Reports on `op` unless `found` == `expected`.
bool expectCount(Operation *op, int found, int expected, const Twine &what) {
  if (found == expected)
    return true;
  op->emitOpError() << "must " << what << " exactly " << (expected == 1 ? "once" : Twine(expected) + " times")
                    << ", found " << found;
  return false;
}

/// backward_preprocess: D = rowsum(dO∘O) of the instance's Q tile, O and dO loaded once, D stored once.
LogicalResult verifyBackwardPreprocess(FuncOp func) {
  Census all(func.getBodyBlock(), /*nested=*/true);
  bool ok = expectCount(func, all.loads["o"], 1, "load the O tile") &
            expectCount(func, all.loads["do"], 1, "load the dO tile") &
            expectCount(func, all.stores["delta"], 1, "store D (delta)");
  return success(ok);
}

/// backward_main: the instance's K and V tiles loaded once before one tile.q_loop; inside the loop its own Q tile's
/// Q, dO, LSE and D and one dQ accumulation into that tile's rows; dK and dV stored once after it.
LogicalResult verifyBackwardMain(FuncOp func) {
  Census top(func.getBodyBlock(), /*nested=*/false);
  bool ok = expectCount(func, top.loads["k"], 1, "load the K tile before the Q-tile loop") &
            expectCount(func, top.loads["v"], 1, "load the V tile before the Q-tile loop") &
            expectCount(func, top.stores["dk"], 1, "store dK after the Q-tile loop") &
            expectCount(func, top.stores["dv"], 1, "store dV after the Q-tile loop");
  if (top.loops < 1) {
    func.emitOpError() << "has no tile.q_loop";
    ok = false;
  }
  for (Operation &op : func.getBodyBlock()) {
    if (auto load = dyn_cast<LoadOp>(op); load && load.getIndex()) {
      load.emitOpError() << "the " << stringifyOperand(load.getOperand())
                         << " tile of a Q tile can only be loaded inside a tile.q_loop";
      ok = false;
    }
    auto loop = dyn_cast<QLoopOp>(op);
    if (!loop)
      continue;
    Census inner(loop.getBody().front(), /*nested=*/true);
    for (StringRef tensor : {"q", "do", "lse", "delta"})
      ok &= expectCount(loop, inner.loads[tensor.str()], 1, "load the Q tile's " + tensor);
    ok &= expectCount(loop, inner.accumulates["dq_accum"], 1, "accumulate into dq_accum");
    loop.getBody().walk([&](Operation *inner) {
      Value index;
      if (auto load = dyn_cast<LoadOp>(inner))
        index = load.getIndex();
      else if (auto add = dyn_cast<AccumulateOp>(inner))
        index = add.getIndex();
      else
        return;
      if (index != loop.getTileIndex()) {
        inner->emitOpError() << "must name the loop's own Q tile (the loop's first block argument)";
        ok = false;
      }
    });
  }
  return success(ok);
}

/// backward_postprocess: the instance's Q tile of the dQ accumulator loaded once, dQ stored once.
LogicalResult verifyBackwardPostprocess(FuncOp func) {
  Census all(func.getBodyBlock(), /*nested=*/true);
  bool ok = expectCount(func, all.loads["dq_accum"], 1, "load the dQ accumulator's tile") &
            expectCount(func, all.stores["dq"], 1, "store dQ");
  return success(ok);
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, ProgramKind, std::less<>> kinds;
  std::vector<std::string> order; // registration order: the order of a module's kernels
  void add(ProgramKind kind) {
    std::string name = kind.name;
    if (kinds.emplace(name, std::move(kind)).second)
      order.push_back(name);
  }
  Registry() {
    add(ProgramKind{kForwardProgram.str(),
                    "attention forward: O and LSE of a Q tile over its keys",
                    verifyForward,
                    kForwardProgram.str(),
                    {"q", "k", "v"},
                    {"q"},
                    {"o", "lse"}});
    add(ProgramKind{kBackwardPreprocess.str(),
                    "attention backward, first: D = rowsum(dO∘O) of a Q tile (and its share of a sink's gradient)",
                    verifyBackwardPreprocess,
                    kBackwardModule.str(),
                    {"o", "do", "lse"},
                    {"o", "do", "lse"},
                    {"delta"}});
    add(ProgramKind{kBackwardMain.str(),
                    "attention backward: dK and dV of a K/V tile over the Q tiles that see it, dQ added into an fp32 "
                    "accumulator",
                    verifyBackwardMain,
                    kBackwardModule.str(),
                    {"q", "k", "v", "do", "lse", "delta"},
                    {"k", "v"},
                    {"dk", "dv", "dq_accum"}});
    add(ProgramKind{kBackwardPostprocess.str(),
                    "attention backward, last: dQ of a Q tile from its fp32 accumulator",
                    verifyBackwardPostprocess,
                    kBackwardModule.str(),
                    {"dq_accum"},
                    {"dq_accum"},
                    {"dq"}});
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
  r.add(std::move(kind));
}

static bool listed(const std::vector<std::string> &list, StringRef name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}
bool ProgramKind::readsTensor(StringRef tensor) const { return listed(reads, tensor); }
bool ProgramKind::ownsTensor(StringRef tensor) const { return listed(own, tensor); }
bool ProgramKind::writesTensor(StringRef tensor) const { return listed(writes, tensor); }

std::string flashtile::tile::joinNames(const std::vector<std::string> &list) {
  std::string out;
  for (const std::string &name : list)
    out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::vector<std::string> flashtile::tile::moduleKindNames() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto &[name, kind] : r.kinds)
    if (!listed(names, kind.module))
      names.push_back(kind.module);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<const ProgramKind *> flashtile::tile::programKindsOfModule(StringRef module) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<const ProgramKind *> kinds;
  for (const std::string &name : r.order)
    if (const ProgramKind &kind = r.kinds.find(name)->second; kind.module == module)
      kinds.push_back(&kind);
  return kinds;
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
