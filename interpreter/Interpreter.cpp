//===- Interpreter.cpp - executes tile programs on the CPU ----------------===//
//
// One program instance per (batch, query head, Q tile) walks the function body with an environment mapping
// SSA values to scalars, tiles and softmax states. Tile ops follow TileOps.td (numerics in TileMath.cpp),
// arith/math ops ScalarOps.cpp, and pipelined programs replay their copies through AsyncCopies. The backward's
// programs run on the same machinery, their instances owning a Q tile (preprocess, postprocess) or a K/V tile (main);
// the backward's ops' numerics are BackwardMath.cpp's. The Interpreter class is shared by three files
// (InterpreterState.h): this one runs instances and holds values, the program's structure and the entry points;
// InterpreterMemory.cpp moves data (and runs the memory layer); InterpreterMath.cpp computes.
//===----------------------------------------------------------------------===//
#include "interpreter/Interpreter.h"
#include "interpreter/AsyncCopies.h"
#include "interpreter/BackwardMath.h"
#include "interpreter/InterpreterState.h"
#include "interpreter/MemoryProtocol.h"
#include "interpreter/ScalarOps.h"
#include "interpreter/TileMath.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileCtaPair.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileKvDtype.h"
#include "passes/IR/TileMemory.h"
#include "passes/IR/TilePacking.h"
#include "passes/IR/TileRotary.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <random>
#include <thread>

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::interp {

namespace detail {

LogicalResult Interpreter::fail(Operation *op, const Twine &message) {
  InFlightDiagnostic diag = op->emitError(message);
  if (mainProgram)
    diag.attachNote() << "in program instance batch " << inst.b << ", head " << inst.h << ", K/V tile " << inst.kvTile
                      << " (keys " << inst.n0 << ".." << inst.n0 + inst.kvRows - 1 << ")";
  else
    diag.attachNote() << "in program instance batch " << inst.b << ", head " << inst.h << ", Q tile " << inst.qTile
                      << " (query rows " << inst.m0 << ".." << inst.m0 + inst.rows - 1 << ")";
  return diag;
}

LogicalResult Interpreter::run(std::vector<float> &o, std::vector<float> &lse, RunStats *stats) {
  if (func.getKind() != kForwardProgram)
    return func.emitOpError() << "is a " << func.getKind()
                              << " program; interp::run runs forward programs, interp::runBackward a backward module";
  // Whatever no instance stores stays NaN, so a program that forgets rows cannot pass a comparison.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t entries = problem.isVarlen() ? 1 : problem.batch; // batch entries of the tensors
  o.assign(entries * problem.seqlenQ * problem.headsQ * problem.headDimV, nan);
  lse.assign(entries * problem.headsQ * problem.seqlenQ, nan);
  outO = &o;
  outLse = &lse;
  const int64_t longest = longestSeqlenQ(problem);
  if (longest > 0 && blockM <= 0)
    return func.emitError() << "the Q tile has " << blockM << " rows";
  // GQA packing: a sequence has seqlen_q x G rows, and instances run per K/V head.
  const int64_t rowsPerQuery = packed ? group : 1, heads = packed ? problem.headsKv : problem.headsQ;
  int64_t qTiles = longest > 0 ? ceilDiv(longest * rowsPerQuery, blockM) : 0;
  if (stats)
    *stats = RunStats{qTiles, blockM, std::vector<int64_t>(problem.batch * heads * qTiles)};
  runStats = stats;
  if (func.walk([](WorkLoopOp) { return WalkResult::interrupt(); }).wasInterrupted())
    return runPersistent(qTiles);
  auto splitStores = func.getBody().getOps<StoreSplitOp>();
  StoreSplitOp splitStore = splitStores.empty() ? StoreSplitOp() : *splitStores.begin();
  if (problem.numSplits < 1 || (!splitStore && problem.numSplits != 1))
    return func.emitError() << "num_splits = " << problem.numSplits << " is not accepted: "
                            << (splitStore ? "at least 1" : "1 (the program does not split its key range)");
  if (splitStore && !func.getScheduleAttr())
    return func.emitError() << "splits its key range (tile.store_split) but is not scheduled: splits are whole "
                               "K/V tiles of the schedule's block_n";
  const int64_t splits = problem.numSplits;
  lseRows = static_cast<int64_t>(lse.size());
  if (splits > 1) {
    oAccum.assign(splits * lseRows * problem.headDimV, nan);
    lseAccum.assign(splits * lseRows, nan);
  }
  // K/V-step programs run once per K/V tile of the longest sequence (one launch when there is no key), every
  // instance in each, as the runtime launches them; the others once.
  const bool stepped = !func.getBody().getOps<StateLoadOp>().empty();
  if (stepped && !func.getScheduleAttr())
    return func.emitError() << "walks K/V steps (tile.state_load) but is not scheduled: a step is one K/V tile of "
                               "the schedule's block_n";
  const int64_t kvSteps =
      stepped ? std::max<int64_t>(1, ceilDiv(longestSeqlenK(problem), func.getScheduleAttr().getBlockN())) : 1;
  // tile.cta_pair: blocks run as the two CTAs of a cluster pair (Q tiles 2m and 2m + 1), both or neither, even where
  // the second one's rows lie past the sequence; the pair's MMAs are issued once for both, so both must walk the
  // same K/V tiles (checked below).
  const bool ctaPair = func->hasAttr(kCtaPairAttr);
  if (ctaPair && (splitStore || stepped || packed || !func.getScheduleAttr()))
    return func.emitError() << "runs as CTA pairs (tile.cta_pair) but splits its keys, walks K/V steps, packs query "
                               "heads or is not scheduled; a pair's blocks are two whole Q tiles of one head";
  std::vector<int64_t> pairWalks[2];
  stepStates.clear();
  for (kvStep = 0; kvStep < kvSteps; ++kvStep)
    for (int64_t b = 0; b < problem.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        // Varlen: like the kernel's blocks past a shorter sequence, the tiles past it do not run.
        for (int64_t t = 0; (ctaPair ? t / 2 * 2 : t) * blockM < sequenceOf(problem, b).seqlenQ * rowsPerQuery; ++t)
          for (int64_t s = 0; s < splits; ++s) {
            inst = sequenceOf(problem, b);
            // Packed: h is the K/V head, and the instance's head (what KV-range rules see) the group's first.
            inst.h = packed ? h * group : h;
            inst.hKv = packed ? h : h / group;
            inst.qTile = t;
            inst.m0 = t * blockM;
            inst.rows = blockM;
            // As the kernel computes it: numSplits ranges of equal length in whole K/V tiles, clamped to the keys.
            inst.splitEnd = inst.seqlenK;
            if (splitStore) {
              int64_t blockN = func.getScheduleAttr().getBlockN();
              int64_t splitTiles = ceilDiv(ceilDiv(inst.seqlenK, blockN), splits);
              inst.split = s;
              inst.splitBegin = std::min(s * splitTiles * blockN, inst.seqlenK);
              inst.splitEnd = std::min(inst.splitBegin + splitTiles * blockN, inst.seqlenK);
              // Past the keys: [0, 0), empty at a tile boundary (an empty range inside a tile would still visit it).
              if (inst.splitBegin >= inst.seqlenK)
                inst.splitBegin = inst.splitEnd = 0;
            }
            kTileLoads = stats && t < qTiles ? &stats->kTileLoads[(b * heads + h) * qTiles + t] : nullptr;
            if (ctaPair) {
              kTileWalk = &pairWalks[t % 2];
              kTileWalk->clear();
            }
            if (failed(runInstance()))
              return failure();
            if (ctaPair && t % 2 == 1 && pairWalks[0] != pairWalks[1])
              return func.emitError() << "the two CTAs of a cluster pair (tile.cta_pair: Q tiles " << t - 1 << " and "
                                      << t << " of batch entry " << b << ", head " << h << ") walk different K/V "
                                      << "tiles (" << pairWalks[0].size() << " and " << pairWalks[1].size()
                                      << " K loads, or another order), but the pair's MMAs are issued once for both";
          }
  if (splits > 1)
    return combineSplits(splitStore);
  return success();
}

bool Interpreter::decodeWorkTile(int64_t work, int64_t qTiles) {
  // As the kernel numbers its tiles (printWorkTile): unit work / 2 of two Q tiles of one (batch, head) pair, the
  // heavy tile qTiles - 1 - k (even work) then the light tile k; units pair by pair, query head fastest.
  const int64_t halfTiles = (qTiles + 1) / 2, unit = work / 2, k = unit % halfTiles, pair = unit / halfTiles;
  const int64_t t = work % 2 == 0 ? qTiles - 1 - k : k;
  if (work % 2 == 1 && t == qTiles - 1 - k)
    return false; // the middle tile of an odd qTiles is a unit alone
  return enterTile(pair, t, qTiles);
}

bool Interpreter::enterTile(int64_t pair, int64_t t, int64_t qTiles) {
  const int64_t b = pair / problem.headsQ, h = pair % problem.headsQ;
  inst = sequenceOf(problem, b);
  inst.h = h;
  inst.hKv = h / group;
  inst.qTile = t;
  inst.m0 = t * blockM;
  inst.rows = blockM;
  inst.splitEnd = inst.seqlenK;
  kTileLoads = runStats ? &runStats->kTileLoads[(b * problem.headsQ + h) * qTiles + t] : nullptr;
  return t * blockM < inst.seqlenQ;
}

bool Interpreter::decodeDynamicUnit(int64_t unit, int64_t qTiles) {
  const int64_t pairs = problem.headsQ * problem.batch, t = qTiles - 1 - unit / pairs, pair = unit % pairs;
  return enterTile(pair, t, qTiles);
}

LogicalResult Interpreter::runPersistent(int64_t qTiles) {
  if (packed || problem.numSplits != 1)
    return func.emitError() << "loops over work tiles (tile.work_loop) and packs query heads or splits its keys; "
                               "the interpreter runs persistent blocks over whole Q tiles of one head";
  if (problem.persistentBlocks < 1)
    return func.emitError() << "persistent_blocks = " << problem.persistentBlocks << " is not accepted: at least 1";
  const bool dynamic = dynamicWorkLoops();
  // Static: units of two Q tiles; dynamic: one Q tile a unit.
  const int64_t pairs = problem.headsQ * problem.batch;
  const int64_t units = dynamic ? qTiles * pairs : (qTiles + 1) / 2 * pairs;
  persistentQTiles = qTiles;
  persistentGrid = std::min<int64_t>(units, problem.persistentBlocks);
  tileStores.clear();
  if (dynamic) {
    // Which block takes which counter value depends on timing on the GPU: here block g takes values g, g + blocks,
    // ... (equally fast blocks), or, with a seed, each value goes to a random block (any order is valid: every
    // tile is independent, and the roles of a block agree through the work queue).
    dealtUnits.assign(persistentGrid, {});
    std::mt19937 random(problem.workOrderSeed);
    for (int64_t value = 0; value < units; ++value)
      dealtUnits[problem.workOrderSeed == 0 ? value % persistentGrid
                                            : std::uniform_int_distribution<int64_t>(0, persistentGrid - 1)(random)]
          .push_back(value);
  }
  for (persistentBlock = 0; persistentBlock < persistentGrid; ++persistentBlock) {
    inst = Instance();
    nextDealt = 0;
    if (failed(runInstance(/*checkStores=*/false)))
      return failure();
  }
  for (int64_t work = 0; work < (dynamic ? units : 2 * units); ++work) {
    if (!(dynamic ? decodeDynamicUnit(work, qTiles) : decodeWorkTile(work, qTiles)))
      continue;
    auto stored = tileStores.find({inst.b, inst.h, inst.qTile});
    auto [o, l] = stored == tileStores.end() ? std::pair{0, 0} : stored->second;
    if (o != 1 || l != 1)
      return fail(func, "a work tile must store O and LSE once each; it stored O " + Twine(o) + " times and LSE " +
                            Twine(l) + " times");
  }
  return success();
}

LogicalResult Interpreter::runWorkTile(WorkLoopOp op, int64_t count, SmallVectorImpl<int64_t> &carried) {
  Block &body = op.getBody().front();
  scalars[op.getTileCount()] = Scalar::integer(count);
  for (auto [arg, value] : llvm::zip(op.getCarriedArgs(), carried))
    scalars[arg] = Scalar::integer(value);
  if (failed(execBlock(body)))
    return failure();
  auto yield = cast<YieldOp>(body.getTerminator());
  for (auto [i, value] : llvm::enumerate(yield.getValues())) {
    FailureOr<Scalar> next = scalar(yield, value);
    if (failed(next))
      return failure();
    carried[i] = next->i;
  }
  return success();
}

LogicalResult Interpreter::execDynamic(WorkLoopOp op, SmallVectorImpl<int64_t> &carried) {
  if (!barriers.contains(op.getQueueFull()) || !barriers.contains(op.getQueueEmpty()) ||
      !workQueueBuffers.contains(op.getQueueFull()))
    return fail(op, "loops dynamically on barriers that are not a tile.work_queue's");
  const int64_t full = barriers.lookup(op.getQueueFull()), empty = barriers.lookup(op.getQueueEmpty());
  const AsyncCopies::Slot cell{workQueueBuffers.lookup(op.getQueueFull()), 0};
  const int64_t units = persistentQTiles * problem.headsQ * problem.batch;
  const std::vector<int64_t> &mine = dealtUnits[persistentBlock];
  for (int64_t count = 0;; ++count) {
    int64_t unit = units; // past the last: the end
    if (op.getTake()) {
      // The cell of tile count - 1 must be released before it holds this tile's unit.
      if (failed(waitFor(op, empty, count)))
        return failure();
      // As the kernel's producer: take counter values until one is a tile with rows (varlen) or none is left.
      while (nextDealt < mine.size()) {
        int64_t value = mine[nextDealt++];
        if (decodeDynamicUnit(value, persistentQTiles)) {
          unit = value;
          break;
        }
      }
      int64_t token = AsyncCopies::kNoToken;
      if (auto hazard = copies.copyArriving(AsyncCopies::kWorkUnit, unit, cell, true, full, count, role, token))
        return fail(op, *hazard);
      workCell = unit;
    } else {
      if (failed(waitFor(op, full, count)))
        return failure();
      if (auto hazard = copies.load(AsyncCopies::kWorkUnit, workCell, cell, role))
        return fail(op, *hazard);
      unit = workCell;
    }
    if (unit >= units)
      break;
    if (!decodeDynamicUnit(unit, persistentQTiles))
      return fail(op, "received unit " + Twine(unit) + ", a tile past its sequence's rows, which no role runs");
    if (failed(runWorkTile(op, count, carried)))
      return failure();
  }
  return success();
}

LogicalResult Interpreter::exec(WorkQueueOp op) {
  // The cell is a one-slot buffer of its own (negative numbers: tile.buffer numbers count up from 0).
  const int64_t buffer = -1 - static_cast<int64_t>(workQueueBuffers.size());
  workQueueBuffers[op.getFull()] = buffer;
  for (auto [value, arrivals] : {std::pair{op.getFull(), int64_t(0)}, {op.getEmpty(), int64_t(op.getArrivals())}}) {
    int64_t number = static_cast<int64_t>(barriers.size());
    barriers[value] = number;
    copies.addBarrier(number, buffer, 1, arrivals);
  }
  return success();
}

LogicalResult Interpreter::exec(WorkLoopOp op) {
  SmallVector<int64_t> carried;
  for (Value init : op.getInits()) {
    FailureOr<Scalar> value = scalar(op, init);
    if (failed(value))
      return failure();
    carried.push_back(value->i);
  }
  if (op.isDynamic()) {
    if (failed(execDynamic(op, carried)))
      return failure();
    for (auto [result, value] : llvm::zip(op.getResults(), carried))
      scalars[result] = Scalar::integer(value);
    return success();
  }
  int64_t count = 0;
  // As the kernel walks them: units block, block + blocks, ..., two tiles each (decodeWorkTile).
  const int64_t units = (persistentQTiles + 1) / 2 * problem.headsQ * problem.batch;
  for (int64_t step = 0; persistentBlock + step / 2 * persistentGrid < units; ++step) {
    const int64_t unit = persistentBlock + step / 2 * persistentGrid;
    if (!decodeWorkTile(2 * unit + step % 2, persistentQTiles))
      continue;
    if (failed(runWorkTile(op, count, carried)))
      return failure();
    ++count;
  }
  for (auto [result, value] : llvm::zip(op.getResults(), carried))
    scalars[result] = Scalar::integer(value);
  return success();
}

LogicalResult Interpreter::runInstance(bool checkStores) {
  scalars.clear();
  tiles.clear();
  stats.clear();
  accs.clear();
  buffers.clear();
  slots.clear();
  tokens.clear();
  barriers.clear();
  workQueueBuffers.clear();
  pendingResults.clear();
  mmaSlots.clear();
  loadedFrom.clear();
  loadedFills.clear();
  nextMma = kFirstMmaToken;
  copies = AsyncCopies();
  memory = MemoryProtocol();
  tmemRegions.clear();
  memBuffers.clear();
  channelBarriers.clear();
  held.clear();
  storesO = storesLse = 0;
  storedRowsO = storedRowsLse = 0;
  instanceRows = inst.rows;
  backwardStores.clear();
  if (failed(execBlock(func.getBodyBlock())))
    return failure();
  if (checkStores && !backward && (storesO != 1 || storesLse != 1))
    return fail(func, "a program instance must store O and LSE once each; it stored O " + Twine(storesO) +
                          " times and LSE " + Twine(storesLse) + " times");
  return success();
}

LogicalResult Interpreter::execBlock(Block &block) {
  bool rolesRan = false;
  for (Operation &op : block) {
    if (isa<YieldOp>(op))
      continue;
    if (isa<RoleOp>(op)) {
      // The roles of a block start together, where the first one is.
      if (!rolesRan && failed(execRoles(llvm::to_vector(block.getOps<RoleOp>()))))
        return failure();
      rolesRan = true;
      continue;
    }
    ++opsExecuted;
    if (failed(exec(op)))
      return failure();
  }
  return success();
}

LogicalResult Interpreter::exec(Operation &op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case<DimOp, ParamOp, SoftmaxScaleOp, InputOp, KvRangeOp, LoadOp, BufferOp, SlotOp, CopyAsyncOp, WaitOp,
            BarrierOp, BarrierWaitOp, BarrierArriveOp, KvWalkOp, WorkLoopOp, WorkQueueOp, MmaWaitOp, StoreOp, QkOp,
            ScaleOp, ScoreModOp, MaskOp, SoftmaxUpdateOp, RescaleOp, PvOp, FinalizeOp, InitStateOp, StateLoadOp,
            StateStoreOp, KvLoopOp, StoreSplitOp, RowDotOp, ZeroAccOp, QLoopOp, ProbsOp, DotTnOp, SoftmaxGradOp,
            ScoreGradOp, AccumulateOp, InputGradOp, SinkGradOp, TmemOp, TmemAllocOp, TmemFreeOp, TmemBufferOp,
            SmemBufferOp, ChannelOp, MmaQkOp, MmaPvOp, MmaCommitOp, MemLoadOp, MemStoreOp, InitStatsOp, InitAccOp>(
          [&](auto tileOp) { return exec(tileOp); })
      .Default([&](Operation *other) -> LogicalResult {
        // A constant tile (a pipeline's carried P before the first tile): the splat value everywhere.
        if (auto constant = dyn_cast<arith::ConstantOp>(other); constant && isa<RankedTensorType>(constant.getType())) {
          auto splat = dyn_cast<SplatElementsAttr>(constant.getValue());
          auto type = cast<RankedTensorType>(constant.getType());
          if (!splat || !isa<FloatType>(type.getElementType()) || type.getRank() > 2)
            return fail(other, "is a tile constant the interpreter does not evaluate (it evaluates float splats)");
          Tile t = Tile::zeros(type.getDimSize(0), type.getRank() == 2 ? type.getDimSize(1) : 1);
          std::fill(t.data.begin(), t.data.end(), splat.getSplatValue<APFloat>().convertToFloat());
          return define(other, constant.getResult(), std::move(t));
        }
        return execScalar(*other);
      });
}

LogicalResult Interpreter::execScalar(Operation &op) {
  SmallVector<Scalar, 3> operands;
  for (Value operand : op.getOperands()) {
    auto it = scalars.find(operand);
    // Non-scalar operands are diagnosed by evalScalarOp, which names the op and the type.
    operands.push_back(it != scalars.end() ? it->second : Scalar{});
  }
  FailureOr<Scalar> result = evalScalarOp(&op, operands, [&](const Twine &message) { (void)fail(&op, message); });
  if (failed(result))
    return failure();
  scalars[op.getResult(0)] = *result;
  return success();
}

LogicalResult Interpreter::evalRegion(Block &block, ArrayRef<Scalar> args, SmallVectorImpl<Scalar> &results) {
  for (auto [arg, value] : llvm::zip_equal(block.getArguments(), args))
    scalars[arg] = value;
  if (failed(execBlock(block)))
    return failure();
  auto yield = cast<YieldOp>(block.getTerminator());
  results.clear();
  for (Value value : yield.getValues()) {
    FailureOr<Scalar> s = scalar(yield, value);
    if (failed(s))
      return failure();
    results.push_back(*s);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

template <typename Map>
FailureOr<typename Map::mapped_type> Interpreter::computed(const Map &map, Operation *user, Value value,
                                                          StringRef what) {
  auto it = map.find(value);
  if (it == map.end())
    return fail(user, "uses " + what + " the interpreter has not computed");
  return it->second;
}

bool Interpreter::readsPending(Operation *user, const void *result) const {
  // A loop carries a pending result to the next iteration, which may wait for it there.
  return !isa<YieldOp, KvLoopOp>(user) && pendingResults.contains(result) && AsyncCopies::enabled();
}

FailureOr<Scalar> Interpreter::scalar(Operation *user, Value value) {
  return computed(scalars, user, value, "a scalar");
}

FailureOr<TilePtr> Interpreter::tile(Operation *user, Value value) {
  FailureOr<TilePtr> t = computed(tiles, user, value, "a tile");
  if (succeeded(t) && readsPending(user, t->get()))
    return fail(user, "pipeline hazard: reads the result of an asynchronous MMA before tile.mma_wait on its token");
  return t;
}

FailureOr<StatsPtr> Interpreter::rowStats(Operation *user, Value value) {
  return computed(stats, user, value, "row statistics");
}

FailureOr<AccPtr> Interpreter::accumulator(Operation *user, Value value) {
  FailureOr<AccPtr> acc = computed(accs, user, value, "an accumulator");
  if (succeeded(acc) && readsPending(user, acc->get()))
    return fail(user, "pipeline hazard: reads the accumulator an asynchronous P·V writes before tile.mma_wait on "
                      "its token");
  return acc;
}

LogicalResult Interpreter::startMma(Operation *op, Value token, const void *data,
                                    std::initializer_list<const void *> operands) {
  int64_t id = nextMma--;
  tokens[token] = id;
  pendingResults[data] = id;
  for (const void *operand : operands)
    if (auto it = loadedFrom.find(operand); it != loadedFrom.end()) {
      mmaSlots[id].push_back(it->second);
      if (AsyncCopies::enabled() && copies.fills(it->second) != loadedFills.lookup(operand))
        return fail(op, "pipeline hazard: reads slot " + Twine(it->second.second) + " of buffer " +
                            Twine(it->second.first) + ", which a copy refilled after its tile.load (the slot was "
                            "released on its empty barrier before this MMA)");
    }
  return success();
}

LogicalResult Interpreter::exec(MmaWaitOp op) {
  for (Value token : op.getTokens()) {
    int64_t id = tokens.lookup_or(token, AsyncCopies::kNoToken);
    if (id > kFirstMmaToken) {
      if (AsyncCopies::enabled())
        return fail(op, "pipeline hazard: tile.mma_wait on a token that no asynchronous MMA produced");
      continue;
    }
    mmaSlots.erase(id);
    for (auto it = pendingResults.begin(); it != pendingResults.end();) {
      auto current = it++;
      if (current->second == id)
        pendingResults.erase(current);
    }
  }
  return success();
}

LogicalResult Interpreter::define(Operation *op, Value result, Tile value) {
  auto type = cast<RankedTensorType>(result.getType());
  int64_t want[2] = {type.getDimSize(0), type.getRank() == 2 ? type.getDimSize(1) : 1};
  int64_t got[2] = {value.rows, value.cols};
  for (int d = 0; d < 2; ++d)
    if (want[d] != ShapedType::kDynamic && want[d] != got[d])
      return fail(op, "computes a " + Twine(value.rows) + "x" + Twine(value.cols) +
                          " tile but its result type has dimension " + Twine(d) + " = " + Twine(want[d]));
  TilePtr &defined = tiles[result];
  defined = std::make_shared<const Tile>(std::move(value));
  // A new tile may sit where a freed one read from a slot did: it was read from no slot (yet).
  loadedFrom.erase(defined.get());
  loadedFills.erase(defined.get());
  return success();
}

LogicalResult Interpreter::define(Operation *op, Value result, RowStats value) {
  auto type = cast<StatsType>(result.getType());
  if (type.hasStaticRows() && type.getRows() != value.rows)
    return fail(op, "computes row statistics of " + Twine(value.rows) + " rows but its type says " +
                        Twine(type.getRows()));
  stats[result] = std::make_shared<const RowStats>(std::move(value));
  return success();
}

LogicalResult Interpreter::define(Operation *op, Value result, Accumulator value) {
  auto type = cast<AccType>(result.getType());
  if ((type.hasStaticRows() && type.getRows() != value.rows) || type.getCols() != value.cols)
    return fail(op, "computes an accumulator of " + Twine(value.rows) + "x" + Twine(value.cols) +
                        " but its type says " + Twine(type.hasStaticRows() ? type.getRows() : value.rows) + "x" +
                        Twine(type.getCols()));
  accs[result] = std::make_shared<const Accumulator>(std::move(value));
  return success();
}

//===----------------------------------------------------------------------===//
// Program structure
//===----------------------------------------------------------------------===//

/// Where the instance's sequence sits in the larger problem (Problem::positions), for the sizes
/// tile-offset-positions gives the hooks: as the kernels compute them from FlashtilePositions.
int64_t positionValue(Dim dim, const Problem &problem, const Instance &inst) {
  const Problem::Positions &g = problem.positions;
  const bool varlen = problem.isVarlen();
  auto at = [&](const std::vector<int32_t> &values, int64_t fallback) {
    return values.empty() ? fallback : int64_t{values[inst.b]};
  };
  auto length = [&](const std::vector<int32_t> &cu, int64_t fallback) {
    return cu.empty() ? fallback : int64_t{cu[inst.b + 1]} - cu[inst.b];
  };
  const int64_t seqlenKGlobal = varlen ? length(g.cuSeqlensKGlobal, inst.seqlenK)
                                       : (g.seqlenKGlobal ? g.seqlenKGlobal : inst.seqlenK);
  switch (dim) {
  case Dim::QOffset:
    return varlen ? at(g.qOffsets, 0) : g.qOffset;
  case Dim::KOffset:
    return varlen ? at(g.kOffsets, 0) : g.kOffset;
  case Dim::SeqlenQGlobal:
    return varlen ? length(g.cuSeqlensQGlobal, inst.seqlenQ) : (g.seqlenQGlobal ? g.seqlenQGlobal : inst.seqlenQ);
  case Dim::SeqlenKGlobal:
    return seqlenKGlobal;
  case Dim::KeyOffsetGlobal: // the larger problem's: b·seqlen_k_global dense, cu_seqlens_k_global[b] varlen
    return varlen ? at(g.cuSeqlensKGlobal, inst.kRow0) : inst.entry * seqlenKGlobal;
  case Dim::HeadOffset:
    return g.headOffset;
  case Dim::HeadsQGlobal:
    return g.headsQGlobal ? g.headsQGlobal : problem.headsQ;
  case Dim::HeadsKvGlobal:
    return g.headsKvGlobal ? g.headsKvGlobal : problem.headsKv;
  default:
    llvm_unreachable("a tile.dim the interpreter does not know");
  }
}

/// The value of a problem size for the current program instance.
int64_t dimValue(Dim dim, const Problem &problem, const Instance &inst, int64_t kvStep) {
  switch (dim) {
  case Dim::Batch:
    return problem.batch;
  case Dim::HeadsQ:
    return problem.headsQ;
  case Dim::HeadsKv:
    return problem.headsKv;
  case Dim::SeqlenQ:
    return inst.seqlenQ;
  case Dim::SeqlenK:
    return inst.seqlenK;
  case Dim::KeyOffset: // b·seqlen_k dense (entry b, row 0); cu_seqlens_k[b] varlen (entry 0, row kRow0)
    return inst.entry * problem.seqlenK + inst.kRow0;
  case Dim::SplitBegin:
    return inst.splitBegin;
  case Dim::SplitEnd:
    return inst.splitEnd;
  case Dim::KvStep:
    return kvStep;
  case Dim::BatchIndex:
    return inst.b;
  case Dim::HeadIndex:
    return inst.h;
  case Dim::KvTile: // the backward's main program: its K/V tile; other programs' instances own Q tiles
    return inst.kvTile;
  default:
    return positionValue(dim, problem, inst);
  }
}

LogicalResult Interpreter::exec(DimOp op) {
  scalars[op.getResult()] = Scalar::integer(dimValue(op.getDim(), problem, inst, kvStep));
  return success();
}

LogicalResult Interpreter::exec(ParamOp op) {
  int64_t index = func.paramIndex(op.getName());
  if (index < 0)
    return fail(op, "'" + op.getName() + "' is not a parameter of the program");
  scalars[op.getResult()] = Scalar::real(problem.params[index]);
  return success();
}

LogicalResult Interpreter::exec(SoftmaxScaleOp op) {
  const float scale = softmaxScale();
  scalars[op.getResult()] = Scalar::real(op.getInverse() ? 1.0f / scale : scale);
  return success();
}

LogicalResult Interpreter::exec(InputOp op) {
  int64_t index = func.inputIndex(op.getName());
  if (index < 0)
    return fail(op, "'" + op.getName() + "' is not an input of the program");
  FailureOr<Scalar> at = scalar(op, op.getIndex());
  if (failed(at))
    return failure();
  // The kernel cannot check this: its index rule defines the array's shape, and a read outside it is a bug.
  int64_t size =
      std::visit([](const auto &array) { return static_cast<int64_t>(array.size()); }, problem.inputs[index]);
  if (at->i < 0 || at->i >= size)
    return fail(op, "reads element " + Twine(at->i) + " of input '" + op.getName() + "', which has " + Twine(size));
  if (const auto *f32 = std::get_if<std::vector<float>>(&problem.inputs[index]))
    scalars[op.getResult()] = Scalar::real((*f32)[at->i]);
  else
    scalars[op.getResult()] = Scalar::integer(std::get<std::vector<int32_t>>(problem.inputs[index])[at->i]);
  return success();
}

LogicalResult Interpreter::exec(KvRangeOp op) {
  // The query rows the tile's rows span (packed: of the group's heads, which the rule must not tell apart).
  int64_t first = rowOf(inst.m0).first, last = rowOf(std::min<int64_t>(inst.m0 + inst.rows, rowCount()) - 1).first;
  SmallVector<Scalar, 2> range;
  Scalar args[] = {Scalar::integer(first), Scalar::integer(last), Scalar::integer(inst.b), Scalar::integer(inst.h)};
  if (failed(evalRegion(op.getRule().front(), args, range)))
    return failure();
  scalars[op.getLo()] = range[0];
  scalars[op.getHi()] = range[1];
  return success();
}

LogicalResult Interpreter::exec(KvLoopOp op) {
  FailureOr<StatsPtr> initStats = rowStats(op, op.getInitStats());
  FailureOr<AccPtr> initAcc = accumulator(op, op.getInitAcc());
  if (failed(initStats) || failed(initAcc))
    return failure();
  // Carried tiles, and tokens (the copies they stand for).
  struct Carried {
    TilePtr tile;
    int64_t token = AsyncCopies::kNoToken;
  };
  auto carriedValue = [&](Operation *user, Value v) -> FailureOr<Carried> {
    if (isa<TokenType>(v.getType()))
      return Carried{nullptr, tokens.lookup_or(v, AsyncCopies::kNoToken)};
    FailureOr<TilePtr> t = tile(user, v);
    if (failed(t))
      return failure();
    return Carried{*t};
  };
  auto bind = [&](Value v, const Carried &c) {
    if (isa<TokenType>(v.getType()))
      tokens[v] = c.token;
    else
      tiles[v] = c.tile;
  };
  SmallVector<Carried> carried;
  for (Value v : op.getCarried()) {
    FailureOr<Carried> c = carriedValue(op, v);
    if (failed(c))
      return failure();
    carried.push_back(*c);
  }
  int64_t from = 0, to = 0;
  if (op.isBounded()) {
    FailureOr<Scalar> lo = scalar(op, op.getLower()), hi = scalar(op, op.getUpper());
    if (failed(lo) || failed(hi))
      return failure();
    from = lo->i;
    to = hi->i;
  } else {
    int64_t rows = kvTileRows(op, inst.seqlenK, problem.tileRowsK);
    to = rows > 0 ? ceilDiv(inst.seqlenK, rows) : 0;
  }
  bool descending = op.getOrder() == KvOrder::Descending;
  Block &body = op.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  StatsPtr currentStats = *initStats;
  AccPtr currentAcc = *initAcc;
  for (int64_t step = 0; step < to - from; ++step) {
    scalars[op.getTileIndex()] = Scalar::integer(descending ? to - 1 - step : from + step);
    stats[op.getStatsArg()] = currentStats;
    accs[op.getAccArg()] = currentAcc;
    for (auto [arg, value] : llvm::zip(op.getCarriedArgs(), carried))
      bind(arg, value);
    if (failed(execBlock(body)))
      return failure();
    FailureOr<StatsPtr> nextStats = rowStats(yield, yield.getValues()[0]);
    FailureOr<AccPtr> nextAcc = accumulator(yield, yield.getValues()[1]);
    if (failed(nextStats) || failed(nextAcc))
      return failure();
    currentStats = *nextStats;
    currentAcc = *nextAcc;
    for (auto [i, value] : llvm::enumerate(yield.getValues().drop_front(2))) {
      FailureOr<Carried> c = carriedValue(yield, value);
      if (failed(c))
        return failure();
      carried[i] = *c;
    }
  }
  stats[op.getStats()] = currentStats;
  accs[op.getAcc()] = currentAcc;
  for (auto [result, value] : llvm::zip(op.getCarriedResults(), carried))
    bind(result, value);
  return success();
}

//===----------------------------------------------------------------------===//
// Entry point
//===----------------------------------------------------------------------===//

/// Checks the problem against the program and the buffers against the problem.
LogicalResult validate(FuncOp func, const Problem &p, size_t qSize, size_t kSize, size_t vSize) {
  if (p.batch < 0 || p.seqlenQ < 0 || p.seqlenK < 0)
    return func.emitError() << "batch and sequence lengths must be nonnegative, got batch = " << p.batch
                            << ", seqlen_q = " << p.seqlenQ << ", seqlen_k = " << p.seqlenK;
  if (p.headsQ < 1 || p.headsKv < 1 || p.headsQ % p.headsKv != 0)
    return func.emitError() << "heads_q (" << p.headsQ << ") must be a positive multiple of heads_kv (" << p.headsKv
                            << ")";
  if (p.headDim != static_cast<int64_t>(func.getHeadDim()) || p.headDimV != static_cast<int64_t>(func.getHeadDimV()))
    return func.emitError() << "the problem's head dims (" << p.headDim << ", " << p.headDimV
                            << ") differ from the program's (" << func.getHeadDim() << ", " << func.getHeadDimV()
                            << ")";
  if (!std::isfinite(p.softmaxScale) || p.softmaxScale <= 0)
    return func.emitError() << "softmax_scale must be positive and finite, got " << p.softmaxScale;
  if (p.params.size() != func.getParams().size())
    return func.emitError() << "the program takes " << func.getParams().size() << " parameters " << func.getParams()
                            << " but the problem gives " << p.params.size();
  if (p.inputs.size() != func.getInputs().size())
    return func.emitError() << "the program takes " << func.getInputs().size() << " inputs " << func.getInputs()
                            << " but the problem gives " << p.inputs.size();
  for (auto [array, attr] : llvm::zip(p.inputs, func.getInputs())) {
    auto input = cast<InputAttr>(attr);
    bool isF32 = std::holds_alternative<std::vector<float>>(array);
    if (isF32 != input.getElementType().isF32())
      return func.emitError() << "input '" << input.getName() << "' has " << input.getElementType()
                              << " elements but the problem gives " << (isF32 ? "f32" : "i32") << " values";
  }
  bool rotates = false;
  func.walk([&](LoadOp load) { rotates |= rotaryOf(load).has_value(); });
  if (rotates) {
    const size_t table =
        static_cast<size_t>(std::max(p.seqlenRo, 0)) * static_cast<size_t>(std::max(p.rotaryDim / 2, 0));
    if (p.rotaryDim < 2 || p.rotaryDim % 2 != 0 || p.rotaryDim > p.headDim)
      return func.emitError() << "rotary_dim is " << p.rotaryDim << "; a program that rotates Q (" << kRotaryAttr
                              << ") takes an even rotary_dim from 2 to head_dim = " << p.headDim;
    if (p.seqlenRo < 1 || p.rotaryCos.size() != table || p.rotarySin.size() != table)
      return func.emitError() << "rotary_cos and rotary_sin hold " << p.rotaryCos.size() << " and "
                              << p.rotarySin.size() << " values; seqlen_ro (" << p.seqlenRo
                              << ", at least 1) x rotary_dim / 2 = " << table << " each";
  }
  if (p.seqlenNew < 0 || p.seqlenNew > p.seqlenK)
    return func.emitError() << "seqlen_new is " << p.seqlenNew << "; accepted: 0 to seqlen_k = " << p.seqlenK;
  if (!roundFor(func.getDtype()))
    return func.emitError() << "the interpreter runs bf16, f16 and f8E4M3FN programs, not " << func.getDtype();
  // A descale belongs to an e4m3 tensor: q_descale to an e4m3 Q (the dtype), k_descale and v_descale to e4m3 K and
  // V (the dtype, or the kv_dtype of a program that reads an e4m3 KV cache).
  const bool e4m3 = isa<Float8E4M3FNType>(func.getDtype());
  const bool e4m3Kv = isa<Float8E4M3FNType>(kvDtypeOf(func));
  for (auto [name, values, applies] :
       {std::tuple<const char *, const std::vector<float> *, bool>{"q_descale", &p.qDescale, e4m3},
        {"k_descale", &p.kDescale, e4m3Kv},
        {"v_descale", &p.vDescale, e4m3Kv}}) {
    if (values->empty())
      continue;
    if (!applies)
      return func.emitError() << name << " is given, but descales apply to f8E4M3FN (e4m3) tensors only, and this "
                              << "program's " << (name[0] == 'q' ? "Q is " : "K and V are ")
                              << flashtile::tile::dtypeName(name[0] == 'q' ? func.getDtype() : kvDtypeOf(func));
    if (values->size() != static_cast<size_t>(p.batch) * static_cast<size_t>(p.headsKv))
      return func.emitError() << name << " holds " << values->size() << " values; a descale is empty (= 1) or "
                              << "batch x heads_kv = " << p.batch << "x" << p.headsKv << " values";
  }
  if (p.isVarlen() || !p.cuSeqlensK.empty()) {
    for (auto [name, offsets, total] :
         {std::tuple{"cu_seqlens_q", &p.cuSeqlensQ, p.seqlenQ}, std::tuple{"cu_seqlens_k", &p.cuSeqlensK, p.seqlenK}}) {
      if (offsets->size() != static_cast<size_t>(p.batch) + 1)
        return func.emitError() << name << " has " << offsets->size()
                                << " offsets; varlen needs batch + 1 = " << p.batch + 1
                                << " in both cu_seqlens_q and cu_seqlens_k";
      for (int b = 0; b <= p.batch; ++b) {
        int low = b ? (*offsets)[b - 1] : 0;
        if ((*offsets)[b] < low || (*offsets)[b] > total)
          return func.emitError() << name << "[" << b << "] = " << (*offsets)[b] << " is outside [" << low << ", "
                                  << total << "]: offsets are non-decreasing, from 0 up to the packed rows";
      }
    }
  }
  struct Operand {
    const char *name, *formula;
    size_t size;
    int64_t seqlen, heads, width;
  } operands[] = {{"q", "batch·seqlen_q·heads_q·head_dim", qSize, p.seqlenQ, p.headsQ, p.headDim},
                  {"k", "batch·seqlen_k·heads_kv·head_dim", kSize, p.seqlenK, p.headsKv, p.headDim},
                  {"v", "batch·seqlen_k·heads_kv·head_dim_v", vSize, p.seqlenK, p.headsKv, p.headDimV}};
  const int64_t entries = p.isVarlen() ? 1 : p.batch; // varlen: one entry of total_q (total_k) packed rows
  for (const Operand &o : operands) {
    int64_t expected = entries * o.seqlen * o.heads * o.width;
    if (static_cast<int64_t>(o.size) != expected)
      return func.emitError() << o.name << " holds " << o.size << " values but " << o.formula << " = " << entries << "·"
                              << o.seqlen << "·" << o.heads << "·" << o.width << " = " << expected
                              << (p.isVarlen() ? " (varlen: batch counts as 1, seqlens are the totals)" : "");
  }
  return success();
}

Tensor rounded(const std::vector<float> &data, RoundFn round, int64_t seqlen, int64_t heads, int64_t width) {
  Tensor t{data, seqlen, heads, width};
  for (float &x : t.data)
    x = round(x);
  return t;
}

/// A tensor of `seqlen` x `heads` x `width` per batch entry, every value `fill`.
Tensor filled(const Problem &p, int64_t seqlen, int64_t heads, int64_t width, float fill) {
  const int64_t entries = p.isVarlen() ? 1 : p.batch;
  return Tensor{std::vector<float>(entries * seqlen * heads * width, fill), seqlen, heads, width};
}

/// Rows laid out as LSE (entries x heads x seqlen) as a tensor of width 1 (entries x seqlen x heads), and back.
Tensor rowsAsTensor(const std::vector<float> &rows, const Problem &p) {
  Tensor t = filled(p, p.seqlenQ, p.headsQ, 1, 0.0f);
  const int64_t entries = p.isVarlen() ? 1 : p.batch;
  for (int64_t b = 0; b < entries; ++b)
    for (int64_t h = 0; h < p.headsQ; ++h)
      for (int64_t s = 0; s < p.seqlenQ; ++s)
        t.at(b, s, h, 0) = rows[(b * p.headsQ + h) * p.seqlenQ + s];
  return t;
}
std::vector<float> tensorAsRows(const Tensor &t, const Problem &p) {
  std::vector<float> rows(t.data.size());
  const int64_t entries = p.isVarlen() ? 1 : p.batch;
  for (int64_t b = 0; b < entries; ++b)
    for (int64_t h = 0; h < p.headsQ; ++h)
      for (int64_t s = 0; s < p.seqlenQ; ++s)
        rows[(b * p.headsQ + h) * p.seqlenQ + s] = t.at(b, s, h, 0);
  return rows;
}

/// The backward module's program of `kind`: exactly one.
FailureOr<FuncOp> programOfKind(ModuleOp module, StringRef kind) {
  FuncOp found;
  for (FuncOp func : module.getOps<FuncOp>()) {
    if (func.getKind() != kind)
      continue;
    if (found)
      return func.emitError() << "is a second " << kind << " program of the backward module (first: @"
                              << found.getSymName() << ")";
    found = func;
  }
  if (!found)
    return module.emitError() << "the backward module has no " << kind << " program; it needs one each of "
                              << kBackwardPreprocess << ", " << kBackwardMain << " and " << kBackwardPostprocess;
  return found;
}

} // namespace detail

using namespace detail;

LogicalResult runBackward(ModuleOp module, const Problem &problem, const BackwardTensors &tensors, Gradients &out,
                          BackwardStats *stats) {
  FailureOr<FuncOp> programs[] = {programOfKind(module, kBackwardPreprocess), programOfKind(module, kBackwardMain),
                                  programOfKind(module, kBackwardPostprocess)};
  for (const FailureOr<FuncOp> &program : programs)
    if (failed(program))
      return failure();
  FuncOp main = *programs[1];
  for (FuncOp func : {*programs[0], *programs[2]})
    if (func.getDtype() != main.getDtype() || func.getHeadDim() != main.getHeadDim() ||
        func.getHeadDimV() != main.getHeadDimV())
      return func.emitError() << "has dtype " << func.getDtype() << " and head dims (" << func.getHeadDim() << ", "
                              << func.getHeadDimV() << ") but the backward's main program " << main.getDtype()
                              << " and (" << main.getHeadDim() << ", " << main.getHeadDimV() << ")";
  for (FuncOp func : {*programs[0], *programs[1], *programs[2]})
    if (failed(validate(func, problem, tensors.q.size(), tensors.k.size(), tensors.v.size())))
      return failure();
  const Problem &p = problem;
  const int64_t entries = p.isVarlen() ? 1 : p.batch;
  const struct {
    const char *name, *formula;
    size_t size;
    int64_t expected;
  } extra[] = {{"o", "O's", tensors.o.size(), entries * p.seqlenQ * p.headsQ * p.headDimV},
               {"dO", "O's", tensors.dO.size(), entries * p.seqlenQ * p.headsQ * p.headDimV},
               {"lse", "batch·heads_q·seqlen_q", tensors.lse.size(), entries * p.headsQ * p.seqlenQ}};
  for (const auto &t : extra)
    if (static_cast<int64_t>(t.size) != t.expected)
      return main.emitError() << t.name << " holds " << t.size << " values but the backward takes " << t.formula
                              << " size, " << t.expected;
  RoundFn round = roundFor(main.getDtype());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  BackwardState state{rounded(tensors.o, round, p.seqlenQ, p.headsQ, p.headDimV),
                      rounded(tensors.dO, round, p.seqlenQ, p.headsQ, p.headDimV), rowsAsTensor(tensors.lse, p),
                      filled(p, p.seqlenQ, p.headsQ, 1, nan),
                      // The plan zeroes the dQ accumulator before the main kernel adds into it.
                      filled(p, p.seqlenQ, p.headsQ, p.headDim, 0.0f), filled(p, p.seqlenQ, p.headsQ, p.headDim, nan),
                      filled(p, p.seqlenK, p.headsQ, p.headDim, nan), filled(p, p.seqlenK, p.headsQ, p.headDimV, nan)};
  for (const InputArray &input : p.inputs) {
    const auto *f32 = std::get_if<std::vector<float>>(&input);
    state.inputGrads.emplace_back(f32 ? f32->size() : 0, 0.0f);
  }
  Tensor q = rounded(tensors.q, round, p.seqlenQ, p.headsQ, p.headDim);
  Tensor k = rounded(tensors.k, round, p.seqlenK, p.headsKv, p.headDim);
  Tensor v = rounded(tensors.v, round, p.seqlenK, p.headsKv, p.headDimV);
  if (stats)
    *stats = BackwardStats();
  // The kernels, in order: each sees what the one before wrote.
  for (FuncOp func : {*programs[0], *programs[1], *programs[2]}) {
    Interpreter interpreter(func, problem, func == main ? q : Tensor(), func == main ? k : Tensor(),
                            func == main ? v : Tensor(), &state);
    if (failed(interpreter.runBackwardProgram(stats && func == main ? &stats->qTileVisits : nullptr)))
      return failure();
  }
  // dK and dV of a K/V head: its query heads' fp32 parts summed in head order, then converted.
  const int64_t group = p.headsQ / p.headsKv;
  auto sumGroups = [&](const Tensor &parts, std::vector<float> &result) {
    Tensor sum = filled(p, p.seqlenK, p.headsKv, parts.width, 0.0f);
    for (int64_t b = 0; b < entries; ++b)
      for (int64_t s = 0; s < p.seqlenK; ++s)
        for (int64_t h = 0; h < p.headsQ; ++h)
          for (int64_t d = 0; d < parts.width; ++d)
            sum.at(b, s, h / group, d) += parts.at(b, s, h, d);
    for (float &x : sum.data)
      x = round(x);
    result = std::move(sum.data);
  };
  sumGroups(state.dkParts, out.dk);
  sumGroups(state.dvParts, out.dv);
  out.dq = std::move(state.dq.data);
  out.delta = tensorAsRows(state.delta, p);
  out.dInputs = std::move(state.inputGrads);
  return success();
}

LogicalResult run(FuncOp func, const Problem &problem, const std::vector<float> &q, const std::vector<float> &k,
                  const std::vector<float> &v, std::vector<float> &o, std::vector<float> &lse, RunStats *stats) {
  if (failed(validate(func, problem, q.size(), k.size(), v.size())))
    return failure();
  // K and V are of the program's kv_dtype (an e4m3 KV cache), Q of its dtype.
  RoundFn round = roundFor(func.getDtype()), roundKv = roundFor(kvDtypeOf(func));
  Interpreter interpreter(func, problem, rounded(q, round, problem.seqlenQ, problem.headsQ, problem.headDim),
                          rounded(k, roundKv, problem.seqlenK, problem.headsKv, problem.headDim),
                          rounded(v, roundKv, problem.seqlenK, problem.headsKv, problem.headDimV));
  return interpreter.run(o, lse, stats);
}

} // namespace flashtile::interp
