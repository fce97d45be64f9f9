//===- InterpreterMemory.cpp - data movement and the memory layer -------===//
//
// The Interpreter's ops that move data (InterpreterState.h): loads (rotary included), buffers and slots, async
// copies and their waits, barriers and roles, stores of O and LSE (whole or split, and the split combine), and the
// memory layer: tensor memory, buffers, channels, MMAs completed by a commit.
//===----------------------------------------------------------------------===//
#include "interpreter/InterpreterState.h"

namespace flashtile::interp::detail {

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

Tensor *Interpreter::tensorOf(Operand operand) {
  if (!backward) {
    switch (operand) {
    case Operand::Q:
      return &q;
    case Operand::K:
      return &k;
    case Operand::V:
      return &v;
    default:
      return nullptr;
    }
  }
  // A backward program reads its kind's tensors only (the op verifiers check this; unverified IR may not).
  const ProgramKind *kind = lookupProgramKind(func.getKind());
  if (!kind || !kind->readsTensor(stringifyOperand(operand)))
    return nullptr;
  switch (operand) {
  case Operand::Q:
    return &q;
  case Operand::K:
    return &k;
  case Operand::V:
    return &v;
  case Operand::O:
    return &backward->o;
  case Operand::DO:
    return &backward->dO;
  case Operand::Lse:
    return &backward->lse;
  case Operand::Delta:
    return &backward->delta;
  case Operand::DqAccum:
    return &backward->dqAccum;
  }
  llvm_unreachable("a tensor the interpreter does not know");
}

LogicalResult Interpreter::exec(LoadOp op) {
  auto type = cast<RankedTensorType>(op.getType());
  StringRef name = stringifyOperand(op.getOperand());
  const bool querySide = isQuerySide(op.getOperand());
  const Tensor *source = tensorOf(op.getOperand());
  if (!source)
    return fail(op, "loads " + name + ", which a " + func.getKind() + " program does not read");
  // The instance's own tile (no index): its Q tile's rows, or the main program's K/V tile; else tile `index` of the
  // sequence, of the type's rows (dynamic: the program's tile rows).
  int64_t index = querySide ? inst.qTile : inst.kvTile, rows = querySide ? inst.rows : inst.kvRows;
  int64_t first = querySide ? inst.m0 : inst.n0;
  const int64_t seqlen = querySide ? rowCount() : inst.seqlenK;
  if (!op.getIndex()) {
    if (!type.isDynamicDim(0) && type.getDimSize(0) != rows)
      return fail(op, "loads " + Twine(querySide ? "a " : "a K/V ") + name + " tile of " + Twine(type.getDimSize(0)) +
                          " rows but the program instance owns " + Twine(rows));
  } else {
    FailureOr<Scalar> j = scalar(op, op.getIndex());
    if (failed(j))
      return failure();
    index = j->i;
    if (!type.isDynamicDim(0))
      rows = type.getDimSize(0);
    else
      rows = querySide ? blockM : kvTileRows(op, inst.seqlenK, problem.tileRowsK);
    if (op.getPred()) {
      FailureOr<Scalar> pred = scalar(op, op.getPred());
      if (failed(pred))
        return failure();
      if (!pred->isTrue()) {
        // No such tile: what a target reads here is unspecified, and nothing computed from it may reach the
        // output. NaNs make any leak visible in the result.
        Tile t = Tile::zeros(rows, source->width);
        t.rowBase = index * rows;
        std::fill(t.data.begin(), t.data.end(), std::numeric_limits<float>::quiet_NaN());
        return define(op, op.getResult(), std::move(t));
      }
    }
    int64_t count = rows > 0 ? ceilDiv(seqlen, rows) : 0;
    if (index < 0 || index >= count)
      return fail(op, "load of " + name + " tile " + Twine(index) + " outside the " + (querySide ? "query" : "key") +
                          " sequence: seqlen_" + (querySide ? "q" : "k") + " = " + Twine(seqlen) + " makes " +
                          Twine(count) + " tiles of " + Twine(rows) + " rows");
    first = index * rows;
    if (op.getOperand() == Operand::K && kTileLoads)
      ++*kTileLoads;
    if (op.getOperand() == Operand::K && kTileWalk)
      kTileWalk->push_back(index);
  }
  if (Value slot = op.getSlot()) {
    if (!slots.contains(slot))
      return fail(op, "reads a slot no tile.slot selected");
    if (auto hazard = copies.load(op.getOperand(), index, slots.lookup(slot), role))
      return fail(op, *hazard);
  }
  // Rows past the sequence read as zero; LSE's as -inf, rows that saw no key (tile.probs gives them P = 0).
  Tile t = Tile::zeros(rows, source->width);
  if (op.getOperand() == Operand::Lse)
    std::fill(t.data.begin(), t.data.end(), -std::numeric_limits<float>::infinity());
  t.rowBase = first;
  const int64_t row0 = querySide ? inst.qRow0 : inst.kRow0;
  for (int64_t r = 0; r < rows && first + r < seqlen; ++r) {
    // Query rows are (query row, head) pairs under GQA packing.
    auto [row, rowHead] = querySide ? rowOf(first + r) : std::pair<int64_t, int64_t>{first + r, inst.hKv};
    for (int64_t d = 0; d < source->width; ++d)
      t.at(r, d) = source->at(inst.entry, row0 + row, rowHead, d);
  }
  if (std::optional<Rotary> rotary = rotaryOf(op); rotary && failed(rotate(op, *rotary, t)))
    return failure();
  if (failed(define(op, op.getResult(), std::move(t))))
    return failure();
  if (Value slot = op.getSlot()) {
    loadedFrom[tiles[op.getResult()].get()] = slots.lookup(slot);
    loadedFills[tiles[op.getResult()].get()] = copies.fills(slots.lookup(slot));
  }
  return success();
}

LogicalResult Interpreter::rotate(LoadOp op, const Rotary &rotary, Tile &t) {
  const int64_t half = problem.rotaryDim / 2, cached = inst.seqlenK - problem.seqlenNew;
  for (int64_t r = 0; r < t.rows && t.rowBase + r < rowCount(); ++r) {
    const int64_t position = cached + (rotary.perRow ? rowOf(t.rowBase + r).first : 0);
    if (position < 0 || position >= problem.seqlenRo)
      return fail(op, "rotates query row " + Twine(rowOf(t.rowBase + r).first) + " at position " + Twine(position) +
                          ", outside the " + Twine(problem.seqlenRo) + " rows of the cos/sin tables");
    for (int64_t i = 0; i < half; ++i) {
      const int64_t c0 = rotary.interleaved ? 2 * i : i, c1 = rotary.interleaved ? 2 * i + 1 : i + half;
      const float cos = roundOut(problem.rotaryCos[position * half + i]);
      const float sin = roundOut(problem.rotarySin[position * half + i]);
      const float x0 = t.at(r, c0), x1 = t.at(r, c1);
      t.at(r, c0) = roundOut(x0 * cos - x1 * sin);
      t.at(r, c1) = roundOut(x0 * sin + x1 * cos);
    }
  }
  return success();
}

LogicalResult Interpreter::exec(BufferOp op) {
  int64_t number = static_cast<int64_t>(buffers.size());
  buffers[op.getResult()] = number;
  return success();
}

LogicalResult Interpreter::exec(SlotOp op) {
  if (!buffers.contains(op.getBuffer()))
    return fail(op, "selects a slot of a value that is not a tile.buffer");
  int64_t n = op.getBuffer().getType().getSlots(), index = 0;
  if (op.getIndex()) {
    FailureOr<Scalar> j = scalar(op, op.getIndex());
    if (failed(j))
      return failure();
    index = ((j->i % n) + n) % n;
  }
  slots[op.getResult()] = {buffers.lookup(op.getBuffer()), index};
  return success();
}

LogicalResult Interpreter::exec(CopyAsyncOp op) {
  int64_t index = inst.qTile;
  bool pred = true;
  if (op.getIndex()) {
    FailureOr<Scalar> j = scalar(op, op.getIndex());
    if (failed(j))
      return failure();
    index = j->i;
  }
  if (op.getPred()) {
    FailureOr<Scalar> p = scalar(op, op.getPred());
    if (failed(p))
      return failure();
    pred = p->isTrue();
  }
  // Loads check the upper end of the range; a copy has no tile type to derive the tile count from.
  if (pred && index < 0)
    return fail(op, "copy of " + stringifyOperand(op.getOperand()) + " tile " + Twine(index) + " outside the sequence");
  if (!slots.contains(op.getSlot()))
    return fail(op, "copies into a slot no tile.slot selected");
  int64_t token = AsyncCopies::kNoToken;
  if (Value full = op.getFull()) {
    FailureOr<Scalar> position = scalar(op, op.getPosition());
    if (failed(position))
      return failure();
    if (!barriers.contains(full))
      return fail(op, "arrives on a value that is not a tile.barrier");
    if (auto hazard = copies.copyArriving(op.getOperand(), index, slots.lookup(op.getSlot()), pred,
                                          barriers.lookup(full), position->i, role, token))
      return fail(op, *hazard);
  } else if (auto hazard = copies.copy(op.getOperand(), index, slots.lookup(op.getSlot()), pred, token)) {
    return fail(op, *hazard);
  }
  tokens[op.getResult()] = token;
  return success();
}

LogicalResult Interpreter::exec(KvWalkOp op) {
  FailureOr<Scalar> lo = scalar(op, op.getLower()), hi = scalar(op, op.getUpper());
  if (failed(lo) || failed(hi))
    return failure();
  bool descending = op.getOrder() == KvOrder::Descending;
  for (int64_t step = 0; step < hi->i - lo->i; ++step) {
    scalars[op.getTileIndex()] = Scalar::integer(descending ? hi->i - 1 - step : lo->i + step);
    if (failed(execBlock(op.getBody().front())))
      return failure();
  }
  return success();
}

LogicalResult Interpreter::exec(BarrierOp op) {
  if (!buffers.contains(op.getBuffer()))
    return fail(op, "is the barrier of a value that is not a tile.buffer");
  int64_t number = static_cast<int64_t>(barriers.size());
  barriers[op.getResult()] = number;
  copies.addBarrier(number, buffers.lookup(op.getBuffer()), op.getBuffer().getType().getSlots(),
                    op.isFull() ? 0 : static_cast<int64_t>(*op.getArrivals()));
  return success();
}

LogicalResult Interpreter::exec(BarrierWaitOp op) {
  if (auto channel = channelBarriers.find(op.getBarrier()); channel != channelBarriers.end()) {
    FailureOr<Scalar> position = scalar(op, op.getPosition());
    if (failed(position))
      return failure();
    const int barrier = channel->second;
    const int64_t at = position->i;
    return waitUntil(
        op, [&, me = role] { return memory.ready(barrier, at, me); },
        [&] { return memory.describeWait(barrier, at); });
  }
  if (!barriers.contains(op.getBarrier()))
    return fail(op, "waits on a value that is not a tile.barrier");
  FailureOr<Scalar> position = scalar(op, op.getPosition());
  if (failed(position))
    return failure();
  return waitFor(op, barriers.lookup(op.getBarrier()), position->i);
}

LogicalResult Interpreter::waitFor(Operation *op, int64_t barrier, int64_t at) {
  return waitUntil(
      op, [&, me = role] { return copies.barrierReady(barrier, at, me); },
      [&] { return copies.describeWait(barrier, at); });
}

LogicalResult Interpreter::waitUntil(Operation *op, llvm::function_ref<bool()> ready,
                                     llvm::function_ref<std::string()> describeWaited) {
  const int me = role;
  while (!ready()) {
    // Another role may complete the phase; with none left that can, the program deadlocks.
    std::string waited = describeWaited();
    if (!roles)
      return fail(op, "pipeline deadlock: waits for " + waited + ", which nothing before it completes");
    RoleScheduler::Resumed resumed = whileOthersRun([&] { return roles->yieldBlocked(me, opsExecuted); });
    if (resumed == RoleScheduler::Resumed::Aborted)
      return failure(); // another role failed and said why
    if (resumed == RoleScheduler::Resumed::Deadlock)
      return fail(op, "pipeline deadlock: every role waits on a barrier no other role will complete; this one waits "
                      "for " + waited);
  }
  return success();
}

LogicalResult Interpreter::exec(BarrierArriveOp op) {
  if (auto channel = channelBarriers.find(op.getBarrier()); channel != channelBarriers.end()) {
    FailureOr<Scalar> position = scalar(op, op.getPosition());
    if (failed(position))
      return failure();
    if (auto hazard = memory.arrive(channel->second, position->i, role))
      return fail(op, *hazard);
    // As for a ring's release: the other roles run on at once, so that a hand-over that came too early shows.
    if (roles && !whileOthersRun([&, me = role] { return roles->yieldAfterRelease(me); }))
      return failure(); // another role failed and said why
    return success();
  }
  if (!barriers.contains(op.getBarrier()))
    return fail(op, "arrives on a value that is not a tile.barrier");
  FailureOr<Scalar> position = scalar(op, op.getPosition());
  if (failed(position))
    return failure();
  int64_t barrier = barriers.lookup(op.getBarrier());
  if (AsyncCopies::enabled())
    for (const auto &[id, used] : mmaSlots)
      for (AsyncCopies::Slot slot : used)
        if (copies.isSlotOf(barrier, position->i, slot))
          return fail(op, "pipeline hazard: releases slot " + Twine(slot.second) + " of buffer " + Twine(slot.first) +
                              " while an asynchronous MMA still reads it (no tile.mma_wait on its token)");
  if (auto hazard = copies.barrierArrive(barrier, position->i, role))
    return fail(op, *hazard);
  if (roles && !whileOthersRun([&, me = role] { return roles->yieldAfterRelease(me); }))
    return failure(); // another role failed and said why
  return success();
}

LogicalResult Interpreter::execRoles(ArrayRef<RoleOp> roleOps) {
  if (roles)
    return fail(roleOps.front(), "roles do not nest");
  RoleScheduler scheduler(static_cast<int>(roleOps.size()));
  roles = &scheduler;
  const Instance blockInstance = inst;
  std::vector<LogicalResult> results(roleOps.size(), success());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < roleOps.size(); ++i)
    threads.emplace_back([&, i] {
      int me = static_cast<int>(i) + 1; // role 0 is the block outside roles
      if (!scheduler.enter(me - 1)) {
        results[i] = failure();
        return;
      }
      role = me;
      RoleOp op = roleOps[i];
      // Every role starts on the block's instance; a role of part of its query rows (`q_rows = [first, count]`,
      // e.g. fa4's epilogue of one Q tile) stores those rows only.
      inst = blockInstance;
      if (auto rows = op->getAttrOfType<DenseI64ArrayAttr>(kRoleQueryRowsAttr)) {
        if (rows.size() != 2 || rows[0] < 0 || rows[1] < 1 || rows[0] + rows[1] > blockInstance.rows) {
          results[i] = fail(op, Twine("has a ") + kRoleQueryRowsAttr + " that is not [first, count] inside the block's " +
                                    Twine(blockInstance.rows) + " rows");
          scheduler.abort();
          scheduler.finish(me - 1);
          return;
        }
        inst.m0 += rows[0];
        inst.rows = rows[1];
      }
      results[i] = execBlock(op.getBody().front());
      if (failed(results[i]))
        scheduler.abort();
      scheduler.finish(me - 1);
    });
  for (std::thread &t : threads)
    t.join();
  roles = nullptr;
  role = 0;
  inst = blockInstance;
  return failure(llvm::any_of(results, [](LogicalResult r) { return failed(r); }));
}

LogicalResult Interpreter::exec(WaitOp op) {
  std::vector<int64_t> waited;
  for (Value token : op.getTokens()) {
    int64_t id = tokens.lookup_or(token, AsyncCopies::kNoToken);
    if (id <= kFirstMmaToken)
      return fail(op, "waits for an asynchronous MMA's token; MMAs are waited by tile.mma_wait");
    waited.push_back(id);
  }
  if (auto hazard = copies.wait(waited))
    return fail(op, *hazard);
  return success();
}

LogicalResult Interpreter::stageO(Operation *op, Value staging) {
  if (!staging)
    return success();
  if (!slots.contains(staging))
    return fail(op, "stages O in a slot no tile.slot selected");
  AsyncCopies::Slot slot = slots.lookup(staging);
  if (AsyncCopies::enabled())
    for (const auto &[id, used] : mmaSlots)
      if (llvm::is_contained(used, slot))
        return fail(op, "pipeline hazard: tile.store stages O in slot " + Twine(slot.second) + " of buffer " +
                            Twine(slot.first) + " while an asynchronous MMA still reads it (no tile.mma_wait on its "
                            "token)");
  if (auto hazard = copies.stage(slot, role))
    return fail(op, *hazard);
  return success();
}

LogicalResult Interpreter::exec(StoreOp op) {
  if (op.getOperand() != Output::O && op.getOperand() != Output::Lse)
    return storeBackward(op);
  FailureOr<TilePtr> value = tile(op, op.getValue());
  if (failed(value) || failed(stageO(op, op.getStaging())))
    return failure();
  const Tile &t = **value;
  bool isO = op.getOperand() == Output::O;
  int64_t width = isO ? problem.headDimV : 1;
  // A store of part of the instance's rows (`tile.q_rows = [first, count]`: fa4's epilogue of one of two Q tiles).
  const Instance whole = inst;
  llvm::scope_exit restore([&] { inst = whole; });
  if (auto rows = op->getAttrOfType<DenseI64ArrayAttr>(kRoleQueryRowsAttr)) {
    if (rows.size() != 2 || rows[0] < 0 || rows[1] < 1 || rows[0] + rows[1] > inst.rows)
      return fail(op, Twine("has a ") + kRoleQueryRowsAttr + " that is not [first, count] inside the " +
                          Twine(inst.rows) + " rows of its role");
    inst.m0 += rows[0];
    inst.rows = rows[1];
  }
  if (t.rows != inst.rows || t.cols != width)
    return fail(op, "stores a " + Twine(t.rows) + "x" + Twine(t.cols) + " tile but the program instance owns " +
                        Twine(inst.rows) + " query rows of " + Twine(width) + " values");
  // Rows past the query sequence are not written.
  // O is entries x seqlenQ x headsQ x headDimV, LSE entries x headsQ x seqlenQ (varlen: 1 entry of total_q rows).
  for (int64_t r = 0; r < t.rows && inst.m0 + r < rowCount(); ++r)
    storeRow(r, isO ? &t : nullptr, isO ? nullptr : &t);
  int64_t &storedRows = isO ? storedRowsO : storedRowsLse;
  storedRows += t.rows;
  if (storedRows % std::max<int64_t>(instanceRows, 1) == 0)
    (isO ? storesO : storesLse) = static_cast<int>(storedRows / std::max<int64_t>(instanceRows, 1));
  if (persistentGrid > 0) {
    auto &stored = tileStores[{inst.b, inst.h, inst.qTile}];
    ++(isO ? stored.first : stored.second);
  }
  return success();
}

void Interpreter::storeRow(int64_t query, int64_t head, int64_t r, const Tile *o, const Tile *lse) {
  int64_t row = inst.qRow0 + query;
  if (o) {
    float *out = &(*outO)[((inst.entry * problem.seqlenQ + row) * problem.headsQ + head) * problem.headDimV];
    for (int64_t d = 0; d < problem.headDimV; ++d)
      out[d] = roundO(o->at(r, d));
  }
  if (lse)
    (*outLse)[(inst.entry * problem.headsQ + head) * problem.seqlenQ + row] = lse->at(r, 0);
}

/// ln(e^a + e^b) and e^(a - that), exact for -inf operands: (-inf, 0) when both are -inf.
std::pair<float, float> joinLogits(float a, float b) {
  const float negInf = -std::numeric_limits<float>::infinity();
  float m = std::max(a, b);
  if (m == negInf)
    return {negInf, 0.f};
  float ea = std::exp(a - m), eb = std::exp(b - m);
  return {m + std::log(ea + eb), ea / (ea + eb)};
}

LogicalResult Interpreter::exec(StoreSplitOp op) {
  FailureOr<TilePtr> oTile = tile(op, op.getO()), lseTile = tile(op, op.getLse());
  if (failed(oTile) || failed(lseTile) || failed(stageO(op, op.getStaging())))
    return failure();
  const Tile &o = **oTile, &l = **lseTile;
  if (o.rows != inst.rows || o.cols != problem.headDimV || l.rows != inst.rows || l.cols != 1)
    return fail(op, "stores a " + Twine(o.rows) + "x" + Twine(o.cols) + " O tile and " + Twine(l.rows) +
                        " LSE rows but the program instance owns " + Twine(inst.rows) + " query rows of " +
                        Twine(problem.headDimV) + " values");
  ++storesO;
  ++storesLse;
  if (problem.numSplits == 1) {
    // Unsplit: the result, the sink joined here (tile.finalize's, moved).
    Tile out = o, outLse = l;
    if (op.hasSink()) {
      SmallVector<Scalar, 1> logit;
      for (int64_t r = 0; r < out.rows && inst.m0 + r < rowCount(); ++r) {
        // Each row's own head (GQA packing) picks its sink.
        if (failed(evalRegion(op.getSink().front(),
                              {Scalar::integer(inst.b), Scalar::integer(rowOf(inst.m0 + r).second)}, logit)))
          return failure();
        auto [joined, keep] = joinLogits(outLse.at(r, 0), logit[0].f);
        outLse.at(r, 0) = joined;
        for (int64_t d = 0; d < out.cols; ++d)
          out.at(r, d) *= keep;
      }
    }
    for (int64_t r = 0; r < out.rows && inst.m0 + r < rowCount(); ++r)
      storeRow(r, &out, &outLse);
    return success();
  }
  // The split's partials, fp32, at the LSE row of each query row.
  for (int64_t r = 0; r < o.rows && inst.m0 + r < rowCount(); ++r) {
    auto [query, head] = rowOf(inst.m0 + r);
    int64_t lseRow = (inst.entry * problem.headsQ + head) * problem.seqlenQ + inst.qRow0 + query;
    int64_t slot = inst.split * lseRows + lseRow;
    lseAccum[slot] = l.at(r, 0);
    for (int64_t d = 0; d < o.cols; ++d)
      oAccum[slot * problem.headDimV + d] = o.at(r, d);
  }
  return success();
}

LogicalResult Interpreter::combineSplits(StoreSplitOp store) {
  const float negInf = -std::numeric_limits<float>::infinity();
  const int64_t width = problem.headDimV, splits = problem.numSplits;
  for (int64_t b = 0; b < problem.batch; ++b)
    for (int64_t h = 0; h < problem.headsQ; ++h) {
      inst = sequenceOf(problem, b);
      inst.h = h;
      inst.m0 = inst.qTile = 0;
      inst.rows = inst.seqlenQ;
      float sink = negInf;
      if (store.hasSink()) {
        SmallVector<Scalar, 1> logit;
        if (failed(evalRegion(store.getSink().front(), {Scalar::integer(b), Scalar::integer(h)}, logit)))
          return failure();
        sink = logit[0].f;
      }
      Tile o = Tile::zeros(inst.seqlenQ, width), lse = Tile::zeros(inst.seqlenQ, 1);
      for (int64_t r = 0; r < inst.seqlenQ; ++r) {
        int64_t lseRow = (inst.entry * problem.headsQ + h) * problem.seqlenQ + inst.qRow0 + r;
        // LSE = ln(Σ e^LSE_s + e^sink); O = Σ e^(LSE_s − LSE)·O_s. An empty split's LSE is -inf: weight 0.
        float joined = sink;
        for (int64_t s = 0; s < splits; ++s)
          joined = joinLogits(joined, lseAccum[s * lseRows + lseRow]).first;
        lse.at(r, 0) = joined;
        for (int64_t s = 0; s < splits && joined != negInf; ++s) {
          int64_t slot = s * lseRows + lseRow;
          float weight = std::exp(lseAccum[slot] - joined);
          for (int64_t d = 0; d < width; ++d)
            o.at(r, d) += weight * oAccum[slot * width + d];
        }
      }
      for (int64_t r = 0; r < inst.seqlenQ; ++r)
        storeRow(r, h, r, &o, &lse);
    }
  return success();
}

//===----------------------------------------------------------------------===//
// The memory layer: tensor memory, buffers, channels, MMAs completed by a commit
//===----------------------------------------------------------------------===//

LogicalResult Interpreter::exec(TmemOp op) {
  tmemRegions[op.getResult()] = memory.addTmem(op.getType().getColumns());
  return success();
}

LogicalResult Interpreter::exec(TmemAllocOp op) {
  if (!tmemRegions.contains(op.getTmem()))
    return fail(op, "allocates a value that is not a tile.tmem");
  if (auto hazard = memory.alloc(tmemRegions.lookup(op.getTmem()), role))
    return fail(op, *hazard);
  return success();
}

LogicalResult Interpreter::exec(TmemFreeOp op) {
  if (!tmemRegions.contains(op.getTmem()))
    return fail(op, "frees a value that is not a tile.tmem");
  if (auto hazard = memory.free(tmemRegions.lookup(op.getTmem()), role))
    return fail(op, *hazard);
  return success();
}

namespace {
/// A buffer's name in messages: the tile it holds and where.
std::string bufferName(MemBufType type, StringRef label) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << label << " (" << type << ")";
  return text;
}
} // namespace

LogicalResult Interpreter::exec(TmemBufferOp op) {
  if (!tmemRegions.contains(op.getTmem()))
    return fail(op, "cuts a buffer from a value that is not a tile.tmem");
  MemBufType type = op.getBuffer().getType();
  std::string label = "tensor-memory buffer at column " + std::to_string(op.getColumn());
  memBuffers[op.getResult()] = memory.addTmemBuffer(tmemRegions.lookup(op.getTmem()), op.getColumn(),
                                                    type.tmemColumns(), bufferName(type, label));
  return success();
}

LogicalResult Interpreter::exec(SmemBufferOp op) {
  MemBufType type = op.getBuffer().getType();
  memBuffers[op.getResult()] = memory.addBuffer(type.getSpace() == MemorySpace::Registers,
                                                bufferName(type, "buffer '" + op.getName().str() + "'"));
  return success();
}

LogicalResult Interpreter::exec(ChannelOp op) {
  int full = memory.addChannel(op.getName().str(), op.getFullArrivals(), op.getEmptyArrivals());
  channelBarriers[op.getFull()] = full;
  channelBarriers[op.getEmpty()] = full + 1;
  return success();
}

FailureOr<int> Interpreter::memBuffer(Operation *user, Value buffer) {
  auto it = memBuffers.find(buffer);
  if (it == memBuffers.end())
    return fail(user, "uses a buffer that no tile.tmem_buffer or tile.smem_buffer made");
  return it->second;
}

void Interpreter::hold(int buffer, Held value) {
  for (int other : memory.aliases(buffer)) {
    Held &clobbered = held[other];
    if (clobbered.tile)
      std::fill(clobbered.tile->data.begin(), clobbered.tile->data.end(), std::numeric_limits<float>::quiet_NaN());
  }
  held[buffer] = std::move(value);
}

LogicalResult Interpreter::exec(MmaQkOp op) {
  FailureOr<TilePtr> qt = tile(op, op.getQ()), kt = tile(op, op.getK());
  FailureOr<int> s = memBuffer(op, op.getS());
  if (failed(qt) || failed(kt) || failed(s))
    return failure();
  if (auto hazard = memory.mma({}, *s, role, "tile.mma_qk"))
    return fail(op, *hazard);
  // The Q tile's rows [offset, offset + rows of S).
  const Tile &q = **qt;
  const int64_t rows = op.getS().getType().getRows(), offset = op.getQRowOffset();
  if (offset + rows > q.rows || q.cols != (*kt)->cols)
    return fail(op, "reads Q rows [" + Twine(offset) + ", " + Twine(offset + rows) + ") of a " + Twine(q.rows) + "x" +
                        Twine(q.cols) + " Q tile against a K tile of " + Twine((*kt)->cols) + " columns");
  Tile part = Tile::zeros(rows, q.cols);
  part.rowBase = q.rowBase + offset;
  part.colBase = q.colBase;
  std::copy(q.data.begin() + offset * q.cols, q.data.begin() + (offset + rows) * q.cols, part.data.begin());
  hold(*s, Held{qk(part, **kt), std::nullopt});
  return success();
}

LogicalResult Interpreter::exec(MmaPvOp op) {
  FailureOr<TilePtr> vt = tile(op, op.getV());
  FailureOr<int> p = memBuffer(op, op.getP()), o = memBuffer(op, op.getO());
  if (failed(vt) || failed(p) || failed(o))
    return failure();
  if (auto hazard = memory.mma({*p}, *o, role, "tile.mma_pv"))
    return fail(op, *hazard);
  const Held &pHeld = held[*p], &oHeld = held[*o];
  if (!pHeld.tile || !oHeld.tile)
    return fail(op, Twine("reads ") + (!pHeld.tile ? "P" : "O") + " from a buffer nothing was written to");
  const Tile &pT = *pHeld.tile, &vT = **vt, &oT = *oHeld.tile;
  if (pT.cols != vT.rows || pT.rows != oT.rows || vT.cols != oT.cols)
    return fail(op, "P is " + Twine(pT.rows) + "x" + Twine(pT.cols) + ", V " + Twine(vT.rows) + "x" + Twine(vT.cols) +
                        " and O " + Twine(oT.rows) + "x" + Twine(oT.cols) + ": P·V does not fit O");
  if (pT.colBase != vT.rowBase)
    return fail(op, "P covers keys from " + Twine(pT.colBase) + " but V rows from " + Twine(vT.rowBase));
  Accumulator acc{oT.rows, oT.cols, oT.data};
  Accumulator sum = pv(pT, vT, std::move(acc));
  Tile out = oT;
  out.data = std::move(sum.acc);
  hold(*o, Held{std::move(out), std::nullopt});
  return success();
}

LogicalResult Interpreter::exec(MmaCommitOp op) {
  FailureOr<Scalar> position = scalar(op, op.getPosition());
  if (failed(position))
    return failure();
  if (auto channel = channelBarriers.find(op.getBarrier()); channel != channelBarriers.end()) {
    if (auto hazard = memory.commit(role, channel->second, position->i))
      return fail(op, *hazard);
    return success();
  }
  // A ring's empty barrier: the commit releases the slot the covered MMAs read once they completed.
  if (!barriers.contains(op.getBarrier()))
    return fail(op, "commits to a value that is not a tile.barrier or a tile.channel's barrier");
  (void)memory.commit(role, -1, 0);
  if (auto hazard = copies.barrierArrive(barriers.lookup(op.getBarrier()), position->i, role))
    return fail(op, *hazard);
  if (roles && !whileOthersRun([&, me = role] { return roles->yieldAfterRelease(me); }))
    return failure(); // another role failed and said why
  return success();
}

LogicalResult Interpreter::exec(MemLoadOp op) {
  FailureOr<int> buffer = memBuffer(op, op.getBuffer());
  if (failed(buffer))
    return failure();
  if (auto hazard = memory.threadAccess(*buffer, /*write=*/false, role, "tile.mem_load"))
    return fail(op, *hazard);
  const Held &h = held[*buffer];
  Type type = op.getValue().getType();
  if (isa<StatsType>(type)) {
    if (!h.stats)
      return fail(op, "reads row statistics from a buffer nothing was written to");
    return define(op, op.getValue(), *h.stats);
  }
  if (!h.tile)
    return fail(op, "reads a buffer nothing was written to");
  if (isa<AccType>(type))
    return define(op, op.getValue(), Accumulator{h.tile->rows, h.tile->cols, h.tile->data});
  return define(op, op.getValue(), *h.tile);
}

LogicalResult Interpreter::exec(MemStoreOp op) {
  FailureOr<int> buffer = memBuffer(op, op.getBuffer());
  if (failed(buffer))
    return failure();
  if (auto hazard = memory.threadAccess(*buffer, /*write=*/true, role, "tile.mem_store"))
    return fail(op, *hazard);
  Value value = op.getValue();
  if (isa<StatsType>(value.getType())) {
    FailureOr<StatsPtr> st = rowStats(op, value);
    if (failed(st))
      return failure();
    hold(*buffer, Held{std::nullopt, **st});
    return success();
  }
  if (isa<AccType>(value.getType())) {
    FailureOr<AccPtr> acc = accumulator(op, value);
    if (failed(acc))
      return failure();
    Tile t = Tile::zeros((*acc)->rows, (*acc)->cols);
    t.data = (*acc)->acc;
    hold(*buffer, Held{std::move(t), std::nullopt});
    return success();
  }
  FailureOr<TilePtr> t = tile(op, value);
  if (failed(t))
    return failure();
  hold(*buffer, Held{**t, std::nullopt});
  return success();
}

LogicalResult Interpreter::exec(InitStatsOp op) {
  int64_t rows = op.getStats().getType().getRows();
  return define(op, op.getStats(), RowStats::empty(rows == ShapedType::kDynamic ? inst.rows : rows));
}

LogicalResult Interpreter::exec(InitAccOp op) {
  AccType type = op.getAcc().getType();
  return define(op, op.getAcc(),
                Accumulator::zeros(type.hasStaticRows() ? type.getRows() : inst.rows, type.getCols()));
}

} // namespace flashtile::interp::detail
