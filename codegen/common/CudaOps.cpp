//===- CudaOps.cpp - the forward printer's tile ops, by family ------------===//
//
// KernelPrinter's printers of the tile ops (KernelPrinter.h): the asynchronous pieces (roles, barriers, copies, waits,
// asynchronous MMAs), loads and stores, the GEMMs and the variant's math on scores, the online softmax and the
// memory layer (MMAs on buffers, tensor memory). Each family's ops, and only those, reach its printer (printOp).
//===----------------------------------------------------------------------===//
#include "codegen/common/KernelPrinter.h"

namespace flashtile::codegen::kernel {

LogicalResult KernelPrinter::printAsync(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](RoleOp role) -> LogicalResult {
        int i = roleIndex.lookup(role);
        target.openRole(w, i);
        names.push();
        LogicalResult printed = printBlock(role.getBody().front());
        names.pop();
        target.closeRole(w, i);
        return printed;
      })
      .Case([&](BarrierWaitOp wait) -> LogicalResult {
        FailureOr<std::string> position = optionalOperand(wait.getPosition(), op);
        if (failed(position))
          return failure();
        if (auto channel = channelOf.find(wait.getBarrier()); channel != channelOf.end()) {
          if (!target.channelWait(w, channel->second.first, channel->second.second, *position))
            return notPrinted(wait, "waits on a channel between roles");
          return success();
        }
        target.barrierWait(w, barrierIndex.lookup(wait.getBarrier()), *position);
        return success();
      })
      .Case([&](BarrierArriveOp arrive) -> LogicalResult {
        FailureOr<std::string> position = optionalOperand(arrive.getPosition(), op);
        if (failed(position))
          return failure();
        if (auto channel = channelOf.find(arrive.getBarrier()); channel != channelOf.end()) {
          if (!target.channelArrive(w, channel->second.first, channel->second.second, *position))
            return notPrinted(arrive, "arrives on a channel between roles");
          return success();
        }
        target.barrierArrive(w, barrierIndex.lookup(arrive.getBarrier()), *position);
        return success();
      })
      .Case([&](MmaWaitOp wait) { return printMmaWait(wait); })
      .Case([&](CopyAsyncOp copy) -> LogicalResult {
        Operand which = operandOf(copy.getOperand());
        FailureOr<std::string> tile = optionalOperand(copy.getIndex(), op);
        FailureOr<CExpr> pred = copy.getPred() ? scalars.expr(copy.getPred(), op) : CExpr{};
        if (failed(tile) || failed(pred) || failed(checkSlot(op, copy.getSlot(), copy.getIndex())))
          return failure();
        if (copy.getFull()) {
          // A one-slot buffer (Q) has one slot at every ring position (a persistent block's Q: one a tile).
          auto select = copy.getSlot().getDefiningOp<SlotOp>();
          bool oneSlot = select.getBuffer().getType().getSlots() == 1;
          if (!asyncProtocol || copy.getPred() ||
              (select.getIndex() ? select.getIndex() != copy.getPosition()
                                 : !oneSlot && !matchPattern(copy.getPosition(), m_Zero())))
            return copy.emitOpError() << "arrives on a barrier from a slot other than its ring position's, or "
                                         "under a predicate, or on a family without barriers; the CUDA printer "
                                         "copies into tile.slot %buf[%i] arriving on %full[%i]";
          FailureOr<std::string> position = optionalOperand(copy.getPosition(), op);
          if (failed(position))
            return failure();
          target.copyToSlot(w, which, *tile, *position, barrierIndex.lookup(copy.getFull()));
          return success();
        }
        if (asyncProtocol && op->getParentOfType<RoleOp>())
          return copy.emitOpError() << "copies inside a role without arriving on a barrier";
        if (!target.copyAsync(w, which, *tile, pred->text))
          return notPrinted(copy, "copies its tile without arriving on a barrier (a cp.async group)");
        return success();
      })
      .Case([&](WaitOp wait) -> LogicalResult {
        // Copies complete in the order they started (a target's copy groups): the wait covers its tokens
        // once at most `newer` copies, started after the newest of them on any path here, stay in flight.
        int64_t newer = std::numeric_limits<int64_t>::max();
        std::vector<Operand> waited;
        for (Value token : wait.getTokens()) {
          FailureOr<int64_t> since = copiesSince(token, op);
          if (failed(since))
            return failure();
          newer = std::min(newer, *since);
          for (CopyAsyncOp copy : copiesBehind(token)) {
            Operand which = operandOf(copy.getOperand());
            if (!llvm::is_contained(waited, which))
              waited.push_back(which);
          }
        }
        std::sort(waited.begin(), waited.end());
        if (!target.wait(w, waited, newer))
          return notPrinted(wait, "waits for copy groups (cp.async)");
        return success();
      })
      .Default([](Operation *) -> LogicalResult { llvm_unreachable("printOp sends only these ops here"); });
}

LogicalResult KernelPrinter::printLoadStore(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](LoadOp load) -> LogicalResult {
        Operand which = operandOf(load.getOperand());
        FailureOr<std::string> tile = optionalOperand(load.getIndex(), op);
        if (failed(tile))
          return failure();
        if (!load.getSlot())
          return load.emitOpError() << "reads global memory directly; the CUDA printer reads tiles from the "
                                       "shared-memory slots a pipeline filled (tile.load ... from %slot)";
        if (failed(checkSlot(op, load.getSlot(), load.getIndex())))
          return failure();
        if (load.getPred()) {
          FailureOr<CExpr> pred = scalars.expr(load.getPred(), op);
          if (failed(pred))
            return failure();
          w.comment("unless " + pred->text + ", there is no tile " + *tile +
                    ": what follows reads a stale buffer and its result is never used");
        }
        if (std::optional<Rotary> rotary = rotaryOf(load);
            rotary && !target.rotateQ(w, rotary->interleaved, rotary->perRow))
          return notPrinted(load, "rotates Q (" + Twine(kRotaryAttr) + ")");
        target.load(w, which, *tile);
        return success();
      })
      .Case([&](StoreOp store) -> LogicalResult {
        auto fin = store.getValue().getDefiningOp<FinalizeOp>();
        if (!fin)
          return store.emitOpError() << "stores a value that is not a tile.finalize result";
        if (int acc = accBuffer(fin.getAcc()); acc >= 0) {
          // The memory layer: O of an accumulator in a buffer, of the query rows the store names (tile.q_rows).
          int64_t rowOffset = 0;
          if (auto rows = store->getAttrOfType<DenseI64ArrayAttr>(kRoleQueryRowsAttr); rows && rows.size() == 2)
            rowOffset = rows[0];
          bool printed = store.getOperand() == Output::O ? target.storeOFromBuffer(w, acc, rowOffset)
                                                         : target.storeLseRows(w, acc, rowOffset);
          if (!printed)
            return notPrinted(store, "stores the finalized rows of an accumulator in a buffer");
          return success();
        }
        if (store.getOperand() == Output::O) {
          FailureOr<bool> staged = stagedInQ(store, store.getStaging());
          FailureOr<const StateNames *> st = state(store.getValue(), op);
          if (failed(staged) || failed(st))
            return failure();
          target.storeO(w, **st, *staged);
        } else
          target.storeLse(w);
        return success();
      })
      .Case([&](StoreSplitOp store) -> LogicalResult {
        auto fin = store.getO().getDefiningOp<FinalizeOp>();
        if (!fin || store.getLse().getDefiningOp<FinalizeOp>() != fin || fin.hasSink())
          return store.emitOpError() << "stores values that are not the O and LSE of one tile.finalize without a "
                                        "sink (the sink joins at tile.store_split)";
        if (func.getScheduleAttr().getLptGroupBlocks() != 0)
          return store.emitOpError() << "splits the key range, whose grid takes Q tiles per (batch, head) "
                                        "(block order lptGroupBlocks 0), but the schedule asks for "
                                     << func.getScheduleAttr().getLptGroupBlocks();
        FailureOr<bool> staged = stagedInQ(store, store.getStaging());
        FailureOr<const StateNames *> st = state(store.getO(), op);
        if (failed(staged) || failed(st))
          return failure();
        if (!target.storeSplit(w, **st, functionOf.lookup(op), *staged))
          return notPrinted(store, "stores a split of the key range (split-KV partials for a combine kernel)");
        return success();
      })
      .Case([&](StateLoadOp load) -> LogicalResult {
        FailureOr<const StateNames *> st = state(load.getAcc(), op);
        if (failed(st))
          return failure();
        if (!target.stateLoad(w, **st))
          return notPrinted(load, "reads the state from global memory (a K/V-step program)");
        return success();
      })
      .Case([&](StateStoreOp store) -> LogicalResult {
        FailureOr<const StateNames *> st = state(store.getAcc(), op);
        if (failed(st))
          return failure();
        if (!target.stateStore(w, **st))
          return notPrinted(store, "writes the state to global memory (a K/V-step program)");
        return success();
      })
      .Default([](Operation *) -> LogicalResult { llvm_unreachable("printOp sends only these ops here"); });
}

LogicalResult KernelPrinter::printMath(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](QkOp qk) -> LogicalResult {
        auto q = qk.getQ().getDefiningOp<LoadOp>();
        if (!q || q.getOperand() != tile::Operand::Q)
          return qk.emitOpError() << "takes a Q operand that is not tile.load q";
        auto kLoad = qk.getK().getDefiningOp<LoadOp>();
        if (!kLoad || kLoad.getOperand() != tile::Operand::K)
          return qk.emitOpError() << "takes a K operand that is not tile.load k";
        FailureOr<std::string> kTile = slotOf(kLoad, op);
        FailureOr<std::string> s = registers(qk.getS(), op);
        if (failed(kTile) || failed(s))
          return failure();
        if (mmaTurnEdge(op, /*first=*/true))
          target.mmaTurn(w, /*begin=*/true);
        target.qk(w, *kTile, *s);
        if (mmaTurnEdge(op, /*first=*/false))
          target.mmaTurn(w, /*begin=*/false);
        return success();
      })
      .Case([&](ScaleOp scale) -> LogicalResult {
        FailureOr<std::string> s = registers(scale.getS(), op);
        if (failed(s))
          return failure();
        target.scale(w, *s);
        return success();
      })
      .Case([&](ScoreModOp mod) -> LogicalResult {
        FailureOr<std::string> kTile = kTileOf(mod.getS(), op);
        FailureOr<std::string> s = registers(mod.getS(), op);
        if (failed(kTile) || failed(s))
          return failure();
        target.scoreMod(w, *s, *kTile, functionOf.lookup(op), keyArgOf(mod.getBody()));
        return success();
      })
      .Case([&](MaskOp mask) -> LogicalResult {
        FailureOr<std::string> kTile = kTileOf(mask.getS(), op);
        FailureOr<std::string> s = registers(mask.getS(), op);
        if (failed(kTile) || failed(s))
          return failure();
        bool readsInputs = mask.getBody().walk([](InputOp) { return WalkResult::interrupt(); }).wasInterrupted();
        target.mask(w, *s, *kTile, functionOf.lookup(op), keyArgOf(mask.getBody()), readsInputs);
        return success();
      })
      .Case([&](PvOp pv) -> LogicalResult {
        auto v = pv.getV().getDefiningOp<LoadOp>();
        auto carriedP = dyn_cast<BlockArgument>(pv.getP());
        bool pCarried = asyncProtocol && carriedP && isa<KvLoopOp>(carriedP.getOwner()->getParentOp());
        if (!v || v.getOperand() != tile::Operand::V || !v.getIndex() ||
            !(pv.getP().getDefiningOp<SoftmaxUpdateOp>() || pCarried))
          return pv.emitOpError() << "needs P from tile.softmax_update (or carried by the loop, on a target with "
                                     "asynchronous MMAs) and V from tile.load v[index]";
        FailureOr<std::string> vSlot = slotOf(v, op);
        FailureOr<const StateNames *> st = state(pv.getAcc(), op);
        FailureOr<std::string> p = registers(pv.getP(), op);
        if (failed(vSlot) || failed(st) || failed(p))
          return failure();
        if (auto update = pv.getP().getDefiningOp<SoftmaxUpdateOp>()) {
          FailureOr<std::string> s = registers(update.getS(), op);
          if (failed(s))
            return failure();
          target.roundProbabilities(w, *s, *p, /*carried=*/false);
        }
        if (mmaTurnEdge(op, /*first=*/true))
          target.mmaTurn(w, /*begin=*/true);
        target.pv(w, **st, *p, *vSlot);
        if (mmaTurnEdge(op, /*first=*/false))
          target.mmaTurn(w, /*begin=*/false);
        return success();
      })
      .Default([](Operation *) -> LogicalResult { llvm_unreachable("printOp sends only these ops here"); });
}

LogicalResult KernelPrinter::printSoftmax(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](InitStateOp init) -> LogicalResult {
        FailureOr<const StateNames *> st = state(init.getAcc(), op);
        if (failed(st))
          return failure();
        target.initState(w, **st);
        return success();
      })
      .Case([&](SoftmaxUpdateOp update) -> LogicalResult {
        if (cast<RankedTensorType>(update.getP().getType()).getElementType() != func.getDtype())
          return update.emitOpError() << "rounds P to a type other than the program's dtype " << func.getDtype()
                                      << "; the CUDA printer feeds P to the same MMA as V";
        FailureOr<const StateNames *> st = state(update.getStats(), op);
        FailureOr<std::string> s = registers(update.getS(), op), p = registers(update.getP(), op);
        if (failed(st) || failed(s) || failed(p))
          return failure();
        target.softmaxUpdate(w, **st, *s, *p, update.getFoldScale(), update.getRescaleThreshold().value_or(0));
        return success();
      })
      .Case([&](RescaleOp rescale) -> LogicalResult {
        if (int acc = accBuffer(rescale.getAcc()); acc >= 0) {
          // The memory layer: O rescaled where it lives, by rescale factors read from a buffer; the rescaled
          // accumulator is stored back into the same buffer.
          auto store = rescale->hasOneUse() ? dyn_cast<MemStoreOp>(*rescale->user_begin()) : MemStoreOp();
          auto alpha = rowsOf.find(rescale.getAlpha());
          if (!store || accBuffer(rescale.getAcc()) != memBufferIndex.lookup(store.getBuffer()) ||
              alpha == rowsOf.end())
            return rescale.emitOpError() << "rescales an accumulator read from a buffer without storing it back "
                                            "into that buffer, or by factors not read from a buffer; the CUDA "
                                            "printer rescales a buffer in place";
          if (!target.rescaleInPlace(w, acc, alpha->second, /*onlyWhenMoved=*/true))
            return notPrinted(rescale, "rescales an accumulator in a buffer");
          return success();
        }
        FailureOr<const StateNames *> st = state(rescale.getAcc(), op);
        if (failed(st))
          return failure();
        auto update = rescale.getAlpha().getDefiningOp<SoftmaxUpdateOp>();
        target.rescale(w, **st, update && update.getRescaleThreshold());
        return success();
      })
      .Case([&](FinalizeOp fin) -> LogicalResult {
        if (int acc = accBuffer(fin.getAcc()); acc >= 0) {
          FailureOr<const StateNames *> st = state(fin.getStats(), op);
          if (failed(st))
            return failure();
          if (!target.finalizeBuffer(w, **st, acc, functionOf.lookup(op)))
            return notPrinted(fin, "finalizes an accumulator in a buffer");
          return success();
        }
        FailureOr<const StateNames *> st = state(fin.getAcc(), op);
        if (failed(st))
          return failure();
        target.finalize(w, **st, functionOf.lookup(op));
        return success();
      })
      .Default([](Operation *) -> LogicalResult { llvm_unreachable("printOp sends only these ops here"); });
}

FailureOr<int> KernelPrinter::memBuffer(Value v, Operation *user) {
  auto it = memBufferIndex.find(v);
  if (it == memBufferIndex.end())
    return user->emitOpError() << "uses a buffer that is not a top-level tile.tmem_buffer or tile.smem_buffer";
  return it->second;
}

int KernelPrinter::accBuffer(Value acc) {
  if (!isa<AccType>(acc.getType()))
    return -1;
  if (auto load = acc.getDefiningOp<MemLoadOp>()) {
    auto it = memBufferIndex.find(load.getBuffer());
    return it == memBufferIndex.end() ? -1 : it->second;
  }
  if (auto rescale = acc.getDefiningOp<RescaleOp>())
    return accBuffer(rescale.getAcc());
  return -1;
}

LogicalResult KernelPrinter::printMemory(Operation *op) {
  auto kSlotOf = [&](Value k, Operation *user) -> FailureOr<std::string> {
    auto load = k.getDefiningOp<LoadOp>();
    if (!load)
      return user->emitOpError() << "takes an operand that is not a tile.load from a ring slot";
    return slotOf(load, user);
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](TmemAllocOp alloc) -> LogicalResult {
        return target.tmemAlloc(w) ? success() : notPrinted(alloc, "allocates tensor memory");
      })
      .Case([&](TmemFreeOp free) -> LogicalResult {
        return target.tmemFree(w) ? success() : notPrinted(free, "frees tensor memory");
      })
      .Case([&](MmaQkOp mma) -> LogicalResult {
        auto q = mma.getQ().getDefiningOp<LoadOp>();
        if (!q || q.getOperand() != tile::Operand::Q)
          return mma.emitOpError() << "takes a Q operand that is not tile.load q";
        FailureOr<std::string> kSlot = kSlotOf(mma.getK(), op);
        FailureOr<int> s = memBuffer(mma.getS(), op);
        if (failed(kSlot) || failed(s))
          return failure();
        return target.mmaQk(w, *kSlot, *s, static_cast<int64_t>(mma.getQRowOffset()))
                   ? success()
                   : notPrinted(mma, "issues Q·Kᵀ into a buffer");
      })
      .Case([&](MmaPvOp mma) -> LogicalResult {
        FailureOr<std::string> vSlot = kSlotOf(mma.getV(), op);
        FailureOr<int> p = memBuffer(mma.getP(), op), o = memBuffer(mma.getO(), op);
        if (failed(vSlot) || failed(p) || failed(o))
          return failure();
        return target.mmaPv(w, *p, *vSlot, *o) ? success() : notPrinted(mma, "issues P·V on buffers");
      })
      .Case([&](MmaCommitOp commit) -> LogicalResult {
        FailureOr<std::string> position = operand(commit.getPosition(), op);
        if (failed(position))
          return failure();
        int channel = -1, ring = -1;
        if (auto it = channelOf.find(commit.getBarrier()); it != channelOf.end() && it->second.second)
          channel = it->second.first;
        else if (auto ringIt = barrierIndex.find(commit.getBarrier()); ringIt != barrierIndex.end())
          ring = ringIt->second;
        else
          return commit.emitOpError() << "commits to a barrier that is neither a channel's full barrier nor a ring's";
        return target.mmaCommit(w, channel, ring, *position) ? success()
                                                             : notPrinted(commit, "commits MMAs to a barrier");
      })
      .Case([&](InitStatsOp init) -> LogicalResult {
        FailureOr<const StateNames *> st = state(init.getStats(), op);
        if (failed(st))
          return failure();
        return target.initStats(w, **st) ? success() : notPrinted(init, "declares row statistics");
      })
      .Case([&](InitAccOp init) -> LogicalResult {
        // Printed where it is stored: the accumulator is zeroed in its buffer.
        auto store = init->hasOneUse() ? dyn_cast<MemStoreOp>(*init->user_begin()) : MemStoreOp();
        if (!store)
          return init.emitOpError() << "makes an accumulator that is not stored into a buffer; the CUDA printer "
                                       "zeroes accumulators where they live";
        return success();
      })
      .Case([&](MemLoadOp load) { return printMemLoad(load); })
      .Case([&](MemStoreOp store) { return printMemStore(store); })
      .Default([](Operation *) -> LogicalResult { llvm_unreachable("printOp sends only these ops here"); });
}

LogicalResult KernelPrinter::printMemLoad(MemLoadOp load) {
  FailureOr<int> buffer = memBuffer(load.getBuffer(), load);
  if (failed(buffer))
    return failure();
  const MemBufferInfo &info = memBuffers[*buffer];
  if (info.space == MemSpace::Registers) {
    if (!stateOf.lookup(load.getValue()))
      return load.emitOpError() << "reads a registers buffer that holds no row statistics of this role";
    return success(); // the state's registers
  }
  if (isa<AccType>(load.getType()))
    return success(); // O stays in its buffer: rescaled or finalized there
  if (isa<StatsType>(load.getType())) {
    FailureOr<const StateNames *> st = state(load.getValue(), load);
    if (failed(st))
      return failure();
    return target.loadStats(w, *buffer, **st) ? success() : notPrinted(load, "reads row statistics");
  }
  if (auto rows = rowsOf.find(load.getValue()); rows != rowsOf.end())
    return target.loadRows(w, *buffer, rows->second) ? success() : notPrinted(load, "reads a value a row");
  FailureOr<std::string> s = registers(load.getValue(), load);
  if (failed(s))
    return failure();
  return target.loadScores(w, *buffer, *s) ? success() : notPrinted(load, "reads a score tile");
}

LogicalResult KernelPrinter::printMemStore(MemStoreOp store) {
  FailureOr<int> buffer = memBuffer(store.getBuffer(), store);
  if (failed(buffer))
    return failure();
  const MemBufferInfo &info = memBuffers[*buffer];
  Value value = store.getValue();
  if (info.space == MemSpace::Registers) {
    if (stateOf.lookup(value) != bufferState.lookup(store.getBuffer()))
      return store.emitOpError() << "stores row statistics into a registers buffer that holds another "
                                    "state; the CUDA printer keeps one state a registers buffer";
    return success(); // already its registers
  }
  if (value.getDefiningOp<InitAccOp>())
    return target.zeroAcc(w, *buffer) ? success() : notPrinted(store, "zeroes an accumulator in a buffer");
  if (value.getDefiningOp<RescaleOp>()) {
    if (accBuffer(value) != *buffer)
      return store.emitOpError() << "stores a rescaled accumulator into another buffer than its own";
    return success(); // rescaleInPlace wrote it
  }
  if (auto update = value.getDefiningOp<SoftmaxUpdateOp>()) {
    if (value == update.getAlpha())
      return target.storeAlpha(w, *buffer) ? success() : notPrinted(store, "stores rescale factors");
    if (value == update.getP()) {
      FailureOr<std::string> sRegs = registers(update.getS(), store), p = registers(value, store);
      if (failed(sRegs) || failed(p))
        return failure();
      return target.storeProbabilities(w, *buffer, *sRegs, *p) ? success()
                                                                : notPrinted(store, "stores P into a buffer");
    }
  }
  if (isa<StatsType>(value.getType())) {
    FailureOr<const StateNames *> st = state(value, store);
    if (failed(st))
      return failure();
    return target.storeStats(w, *buffer, **st) ? success() : notPrinted(store, "stores row statistics");
  }
  return store.emitOpError() << "stores a value the CUDA printer does not move into a buffer (it stores P and "
                                "rescale factors of a softmax step, row statistics and zeroed accumulators)";
}

/// tile.mma_wait: each token's MMA retired, with the count of MMAs issued after it (in this block, before the wait)
/// and not waited on yet left in flight.
LogicalResult KernelPrinter::printMmaWait(MmaWaitOp wait) {
  for (Value token : wait.getTokens()) {
    Operation *mma = token.getDefiningOp();
    if (!isa_and_nonnull<QkOp, PvOp>(mma))
      return wait.emitOpError() << "waits on a token that no tile.qk or tile.pv in this scope produced; the "
                                   "CUDA printer retires each MMA where it is issued";
    // MMAs issued after this one (in this block, before the wait) and not waited on yet stay in flight.
    int newer = 0;
    if (mma->getBlock() == wait->getBlock())
      for (Operation *at = mma->getNextNode(); at && at != wait.getOperation(); at = at->getNextNode()) {
        Value later = isa<QkOp>(at)   ? cast<QkOp>(at).getToken()
                      : isa<PvOp>(at) ? cast<PvOp>(at).getToken()
                                      : Value();
        bool waited =
            later && llvm::any_of(later.getUsers(), [&](Operation *user) {
              return isa<MmaWaitOp>(user) && user->getBlock() == wait->getBlock() && user->isBeforeInBlock(wait);
            });
        newer += later && !waited;
      }
    if (auto pv = dyn_cast<PvOp>(mma)) {
      FailureOr<const StateNames *> st = state(pv.getAcc(), pv);
      FailureOr<std::string> p = registers(pv.getP(), pv);
      if (failed(st) || failed(p))
        return failure();
      Block *block = wait->getBlock();
      bool afterUnmaskedSoftmax =
          block->getOps<MaskOp>().empty() &&
          llvm::any_of(block->getOps<SoftmaxUpdateOp>(), [&](SoftmaxUpdateOp u) { return u->isBeforeInBlock(wait); });
      target.mmaWait(w, MmaResult::Acc, (*st)->acc, *p, newer, afterUnmaskedSoftmax);
    } else {
      FailureOr<std::string> s = registers(cast<QkOp>(mma).getS(), mma);
      if (failed(s))
        return failure();
      target.mmaWait(w, MmaResult::Scores, *s, std::string(), newer, /*afterUnmaskedSoftmax=*/false);
    }
  }
  return success();
}

} // namespace flashtile::codegen::kernel
