//===- InterpreterState.h - the interpreter's program instance, shared by its files -===//
//
// Private to interpreter/: the Interpreter class (one program instance: its environment, roles, barriers, tensors)
// that Interpreter.cpp (running instances, values, program structure, the entry points), InterpreterMemory.cpp
// (data movement and the memory layer) and InterpreterMath.cpp (math on tiles, the backward's ops) define between
// them, and the helpers they share. run and runBackward (Interpreter.h) are the entry points.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_INTERPRETERSTATE_H
#define FLASHTILE_INTERPRETER_INTERPRETERSTATE_H

#include "interpreter/Interpreter.h"
#include "interpreter/AsyncCopies.h"
#include "interpreter/BackwardMath.h"
#include "interpreter/MemoryProtocol.h"
#include "interpreter/ScalarOps.h"
#include "interpreter/TileMath.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileCtaPair.h"
#include "passes/IR/TileDialect.h"
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

namespace flashtile::interp::detail {

using namespace mlir;
using namespace flashtile::tile;


using TilePtr = std::shared_ptr<const Tile>;
using StatsPtr = std::shared_ptr<const RowStats>;
using AccPtr = std::shared_ptr<const Accumulator>;

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline RoundFn roundFor(Type type) {
  if (type.isBF16())
    return roundToBf16;
  if (type.isF16())
    return roundToF16;
  if (isa<Float8E4M3FNType>(type))
    return roundToE4m3;
  return nullptr;
}

/// A packed row-major BSHD tensor, already rounded to the program's dtype.
struct Tensor {
  std::vector<float> data;
  int64_t seqlen = 0, heads = 0, width = 0;
  float at(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return data[((b * seqlen + s) * heads + h) * width + d];
  }
  float &at(int64_t b, int64_t s, int64_t h, int64_t d) { return data[((b * seqlen + s) * heads + h) * width + d]; }
};

/// The tensors the backward's programs share, as its kernels share global memory: O and dO (rounded to the dtype),
/// LSE, D and the dQ accumulator (fp32; LSE and D as tensors of width 1), dQ (values of the dtype), and the
/// per-query-head fp32 parts of dK and dV (entries x seqlen_k x heads_q x width), summed over a K/V head's group after
/// the main program.
struct BackwardState {
  Tensor o, dO, lse, delta, dqAccum, dq, dkParts, dvParts;
  /// The gradients of the variant's inputs (tile.input_grad, tile.sink_grad), in the tile.func's order: fp32, sized
  /// as each f32 input, empty for an i32 one.
  std::vector<std::vector<float>> inputGrads{};
};

/// Whether a named tensor has a row per query row (Q, O, dO, LSE, D, the dQ accumulator) rather than per key (K, V).
inline bool isQuerySide(Operand operand) { return operand != Operand::K && operand != Operand::V; }

/// The thread block that owns query rows [m0, m0 + rows) of head h (K/V head hKv) in batch b. Its sequence has
/// seqlenQ queries and seqlenK keys, from rows qRow0 and kRow0 of the tensors' batch entry `entry` (dense: entry b,
/// rows 0; varlen: entry 0, rows from cu_seqlens).
struct Instance {
  int64_t b = 0, h = 0, hKv = 0, qTile = 0, m0 = 0, rows = 0;
  int64_t seqlenQ = 0, seqlenK = 0, entry = 0, qRow0 = 0, kRow0 = 0;
  int64_t split = 0, splitBegin = 0, splitEnd = 0; ///< split-KV: this instance's split and its keys
  /// The backward's main program: the instance's K/V tile and its keys [n0, n0 + kvRows).
  int64_t kvTile = 0, n0 = 0, kvRows = 0;
};

/// The sequence of batch b, as an instance with no head or tile yet.
inline Instance sequenceOf(const Problem &p, int64_t b) {
  Instance seq;
  seq.b = b;
  if (!p.isVarlen()) {
    seq.seqlenQ = p.seqlenQ;
    seq.seqlenK = p.seqlenK;
    seq.entry = b;
    return seq;
  }
  seq.qRow0 = p.cuSeqlensQ[b];
  seq.kRow0 = p.cuSeqlensK[b];
  seq.seqlenQ = p.cuSeqlensQ[b + 1] - seq.qRow0;
  seq.seqlenK = p.cuSeqlensK[b + 1] - seq.kRow0;
  return seq;
}

/// The longest query sequence: all of them have seqlenQ rows unless the problem is varlen.
inline int64_t longestSeqlenQ(const Problem &p) {
  int64_t longest = p.isVarlen() ? 0 : p.seqlenQ;
  for (size_t b = 0; p.isVarlen() && b + 1 < p.cuSeqlensQ.size(); ++b)
    longest = std::max<int64_t>(longest, p.cuSeqlensQ[b + 1] - p.cuSeqlensQ[b]);
  return longest;
}

inline int64_t longestSeqlenK(const Problem &p) {
  int64_t longest = p.isVarlen() ? 0 : p.seqlenK;
  for (size_t b = 0; p.isVarlen() && b + 1 < p.cuSeqlensK.size(); ++b)
    longest = std::max<int64_t>(longest, p.cuSeqlensK[b + 1] - p.cuSeqlensK[b]);
  return longest;
}

/// The Q tile's static row count after scheduling (of the loads of query rows: Q, or the backward's O, dO, ...);
/// unscheduled, `tileRows` rows, or the whole query sequence as one tile when it is 0.
inline int64_t qTileRows(FuncOp func, int64_t seqlenQ, int64_t tileRows) {
  int64_t rows = ShapedType::kDynamic;
  func.walk([&](LoadOp load) {
    if (isQuerySide(load.getOperand()) && !cast<RankedTensorType>(load.getType()).isDynamicDim(0))
      rows = cast<RankedTensorType>(load.getType()).getDimSize(0);
  });
  if (rows != ShapedType::kDynamic)
    return rows;
  if (ScheduleAttr schedule = func.getScheduleAttr())
    return schedule.getBlockM();
  return tileRows > 0 ? tileRows : seqlenQ;
}

/// Keys per K/V tile of `scope` (an unbounded loop, or the backward's main program): the static row count of its
/// K/V loads, else the schedule's block_n, else `tileRows`, else the whole sequence.
inline int64_t kvTileRows(Operation *scope, int64_t seqlenK, int64_t tileRows) {
  int64_t rows = ShapedType::kDynamic;
  scope->walk([&](LoadOp load) {
    if (!isQuerySide(load.getOperand()))
      rows = cast<RankedTensorType>(load.getType()).getDimSize(0);
  });
  if (rows != ShapedType::kDynamic)
    return rows;
  auto func = isa<FuncOp>(scope) ? cast<FuncOp>(scope) : scope->getParentOfType<FuncOp>();
  if (ScheduleAttr schedule = func ? func.getScheduleAttr() : ScheduleAttr())
    return schedule.getBlockN();
  return tileRows > 0 ? tileRows : seqlenK;
}

/// Runs the roles of a thread block one at a time, each on its own thread: a role runs until it finishes or waits on
/// a barrier phase that has not completed, then hands over to the next role. When every live role has waited
/// without any op running in between, no role can complete another's phase: a deadlock.
class RoleScheduler {
public:
  explicit RoleScheduler(int count) : finished(count, false), live(count) {}

  /// Blocks until role `me` runs; false when the run was aborted.
  bool enter(int me) {
    std::unique_lock<std::mutex> lock(mutex);
    ready.wait(lock, [&] { return current == me || aborted; });
    return !aborted;
  }
  enum class Resumed { Running, Deadlock, Aborted };
  /// Role `me` (1-based, as the interpreter numbers roles) waits on a phase that has not completed: hands over and
  /// blocks until it runs again. Every live role waiting with no op run since the first of those waits (the state
  /// they all checked is the same) is a deadlock.
  Resumed yieldBlocked(int me, uint64_t opsExecuted) {
    std::unique_lock<std::mutex> lock(mutex);
    waitsInARow = opsExecuted == opsAtLastWait ? waitsInARow + 1 : 1;
    opsAtLastWait = opsExecuted;
    if (waitsInARow >= live) {
      aborted = true;
      ready.notify_all();
      return Resumed::Deadlock;
    }
    handOver(me - 1);
    ready.wait(lock, [&] { return current == me - 1 || aborted; });
    return aborted ? Resumed::Aborted : Resumed::Running;
  }
  /// Role `me` (1-based) released a slot: the other roles run until they wait (a producer refills the slot at once,
  /// the worst case for a release that came too early), then `me` continues. False when the run was aborted.
  bool yieldAfterRelease(int me) {
    std::unique_lock<std::mutex> lock(mutex);
    if (live <= 1)
      return !aborted;
    waitsInARow = 0;
    handOver(me - 1);
    ready.wait(lock, [&] { return current == me - 1 || aborted; });
    return !aborted;
  }
  void finish(int me) {
    std::unique_lock<std::mutex> lock(mutex);
    finished[me] = true;
    --live;
    waitsInARow = 0;
    handOver(me);
  }
  void abort() {
    std::unique_lock<std::mutex> lock(mutex);
    aborted = true;
    ready.notify_all();
  }

private:
  /// The next unfinished role after `me` runs (round robin).
  void handOver(int me) {
    int n = static_cast<int>(finished.size());
    current = -1;
    for (int step = 1; step <= n; ++step)
      if (int next = (me + step) % n; !finished[next]) {
        current = next;
        break;
      }
    ready.notify_all();
  }

  std::mutex mutex;
  std::condition_variable ready;
  std::vector<bool> finished;
  int live;
  int current = 0;
  bool aborted = false;
  int waitsInARow = 0;
  uint64_t opsAtLastWait = ~uint64_t(0);
};

class Interpreter {
public:
  /// `backward`: the backward's tensors, for a program of one of its kinds (Q, K, V are then its, and q, k, v empty).
  Interpreter(FuncOp func, const Problem &problem, Tensor q, Tensor k, Tensor v, BackwardState *backward = nullptr)
      : func(func), problem(problem), q(std::move(q)), k(std::move(k)), v(std::move(v)),
        roundOut(roundFor(func.getDtype())), roundO(roundFor(func.getOutputType())), blockM(qTileRows(func, longestSeqlenQ(problem), problem.tileRowsQ)),
        backward(backward) {
    packed = func->hasAttr(tile::kPackQueryHeadsAttr);
    group = problem.headsKv > 0 ? problem.headsQ / problem.headsKv : 1;
    mainProgram = func.getKind() == kBackwardMain;
  }

  LogicalResult run(std::vector<float> &o, std::vector<float> &lse, RunStats *stats);
  /// Runs every instance of a backward program (its kind's) on the backward's tensors; counts the main program's
  /// Q-tile visits into `visits` when given.
  LogicalResult runBackwardProgram(int64_t *visits = nullptr);

private:
  /// Runs the program for the block `inst` names (a persistent block: its work tiles); `checkStores`: the block's
  /// one tile stored O and LSE once each.
  LogicalResult runInstance(bool checkStores = true);
  /// A persistent program (tile.work_loop): runs its blocks, then checks that every tile stored O and LSE once.
  LogicalResult runPersistent(int64_t qTiles);
  /// Work tile `work` of a persistent launch as this instance (batch, head, Q tile), in the kernel's order (the
  /// CUDA printer's printWorkTile); false for a tile past its sequence's rows (varlen), which no block runs.
  bool decodeWorkTile(int64_t work, int64_t qTiles);
  /// Unit `unit` of a dynamic work loop as this instance (the CUDA printer's printDynamicWorkTile: Q tile
  /// qTiles - 1 - unit / pairs of pair unit % pairs); false for a tile past its sequence's rows (varlen).
  bool decodeDynamicUnit(int64_t unit, int64_t qTiles);
  /// Q tile `t` of (batch, head) pair `pair` (query head fastest) as this instance, for both orders above; false
  /// when the tile starts past its sequence's rows.
  bool enterTile(int64_t pair, int64_t t, int64_t qTiles);
  /// Whether the program's work loops take their units at run time (tile.work_loop dynamic).
  bool dynamicWorkLoops() {
    return func.walk([](WorkLoopOp loop) { return loop.isDynamic() ? WalkResult::interrupt() : WalkResult::advance(); })
        .wasInterrupted();
  }
  /// A dynamic loop's iterations: the taking role takes units, the others receive them from the work queue.
  LogicalResult execDynamic(WorkLoopOp op, SmallVectorImpl<int64_t> &carried);
  /// One work tile of a work loop: binds its tile count and carried values, runs the body, takes the yielded values.
  LogicalResult runWorkTile(WorkLoopOp op, int64_t count, SmallVectorImpl<int64_t> &carried);
  /// Waits (handing over to the other roles) until phase `position` of barrier `barrier` completes, for `op`.
  LogicalResult waitFor(Operation *op, int64_t barrier, int64_t position);
  LogicalResult execBlock(Block &block);
  LogicalResult exec(Operation &op);
  LogicalResult execScalar(Operation &op);
  /// Runs a region's block on scalar arguments and returns what it yields.
  LogicalResult evalRegion(Block &block, ArrayRef<Scalar> args, SmallVectorImpl<Scalar> &results);
  /// A region of (score, b, h, q, kv) (tile.score_grad's, tile.input_grad's) at element (r, c) of the scores `s`;
  /// as tile.score_mod, a padding key reaches the region as the last key.
  LogicalResult evalScoreRegion(Block &block, const Tile &s, int64_t r, int64_t c, SmallVectorImpl<Scalar> &results) {
    int64_t kv = std::min<int64_t>(s.colBase + c, std::max<int64_t>(inst.seqlenK - 1, 0));
    auto [query, head] = rowOf(s.rowBase + r);
    Scalar args[] = {Scalar::real(s.at(r, c)), Scalar::integer(inst.b), Scalar::integer(head), Scalar::integer(query),
                     Scalar::integer(kv)};
    return evalRegion(block, args, results);
  }

  LogicalResult exec(DimOp op);
  LogicalResult exec(ParamOp op);
  LogicalResult exec(SoftmaxScaleOp op);
  LogicalResult exec(InputOp op);
  LogicalResult exec(KvRangeOp op);
  LogicalResult exec(LoadOp op);
  /// Rotates the rows of Q tile `t` that `op` (tile.load q {tile.rotary}) loaded, in place.
  LogicalResult rotate(LoadOp op, const Rotary &rotary, Tile &t);
  LogicalResult exec(BufferOp op);
  LogicalResult exec(SlotOp op);
  LogicalResult exec(CopyAsyncOp op);
  LogicalResult exec(WaitOp op);
  LogicalResult exec(BarrierOp op);
  LogicalResult exec(WorkQueueOp op);
  LogicalResult exec(KvWalkOp op);
  LogicalResult exec(WorkLoopOp op);
  LogicalResult exec(MmaWaitOp op);
  /// An asynchronous MMA (a tile.qk / tile.pv with a token) issued: its result `data` is pending until its token is
  /// waited on, and the slots its operands were read from stay in use.
  /// A shared-memory operand (a tile read from a slot) must still be in its slot: a slot released and refilled
  /// since the tile.load would feed the MMA the next tile's data.
  LogicalResult startMma(Operation *op, Value token, const void *data, std::initializer_list<const void *> operands);
  LogicalResult exec(BarrierWaitOp op);
  LogicalResult exec(BarrierArriveOp op);
  // The memory layer (TileMemoryOps.td; the protocol is MemoryProtocol's).
  LogicalResult exec(TmemOp op);
  LogicalResult exec(TmemAllocOp op);
  LogicalResult exec(TmemFreeOp op);
  LogicalResult exec(TmemBufferOp op);
  LogicalResult exec(SmemBufferOp op);
  LogicalResult exec(ChannelOp op);
  LogicalResult exec(MmaQkOp op);
  LogicalResult exec(MmaPvOp op);
  LogicalResult exec(MmaCommitOp op);
  LogicalResult exec(MemLoadOp op);
  LogicalResult exec(MemStoreOp op);
  LogicalResult exec(InitStatsOp op);
  LogicalResult exec(InitAccOp op);
  /// The buffer number of a tile.tmem_buffer / tile.smem_buffer value, or an error at `user`.
  FailureOr<int> memBuffer(Operation *user, Value buffer);
  /// What buffer `buffer` holds (a tile, an accumulator as a tile, or row statistics); NaN where a write to an
  /// overlapping buffer clobbered it.
  struct Held {
    std::optional<Tile> tile;
    std::optional<RowStats> stats;
  };
  /// Writes `held` into `buffer` and clobbers the buffers that overlap it.
  void hold(int buffer, Held held);
  /// Runs `ready` until it holds, handing over to the other roles meanwhile; `waited` says what for (deadlocks).
  LogicalResult waitUntil(Operation *op, llvm::function_ref<bool()> ready, llvm::function_ref<std::string()> waited);
  /// Hands over to the other roles (`handOver` blocks until this role runs again) and returns what it returned.
  /// They run on their own tiles meanwhile (persistent blocks): this role's role number, instance and counter come
  /// back with it.
  template <typename HandOver> auto whileOthersRun(HandOver handOver) {
    const int me = role;
    Instance mine = inst;
    int64_t *myLoads = kTileLoads;
    auto result = handOver();
    role = me;
    inst = mine;
    kTileLoads = myLoads;
    return result;
  }
  /// Runs the roles of a block side by side (RoleScheduler), each on its own thread, one at a time.
  LogicalResult execRoles(ArrayRef<RoleOp> roles);
  LogicalResult exec(StoreOp op);
  LogicalResult exec(StoreSplitOp op);
  /// `through %slot` of a store of O: the slot's tile must be dead (AsyncCopies::stage), and no asynchronous MMA
  /// may still read it.
  LogicalResult stageO(Operation *op, Value staging);
  LogicalResult exec(QkOp op);
  LogicalResult exec(ScaleOp op);
  LogicalResult exec(ScoreModOp op);
  LogicalResult exec(MaskOp op);
  LogicalResult exec(SoftmaxUpdateOp op);
  LogicalResult exec(RescaleOp op);
  LogicalResult exec(PvOp op);
  LogicalResult exec(FinalizeOp op);
  LogicalResult exec(InitStateOp op);
  LogicalResult exec(StateLoadOp op);
  LogicalResult exec(StateStoreOp op);
  LogicalResult exec(KvLoopOp op);
  // The backward's ops.
  LogicalResult exec(RowDotOp op);
  LogicalResult exec(ZeroAccOp op);
  LogicalResult exec(QLoopOp op);
  LogicalResult exec(ProbsOp op);
  LogicalResult exec(DotTnOp op);
  LogicalResult exec(SoftmaxGradOp op);
  LogicalResult exec(ScoreGradOp op);
  LogicalResult exec(AccumulateOp op);
  LogicalResult exec(InputGradOp op);
  LogicalResult exec(SinkGradOp op);
  /// Element `index` of the gradient of input `name`, or an error at `op`.
  FailureOr<float *> inputGradAt(Operation *op, StringRef name, int64_t index);
  /// A store of the backward's (D, dQ, dK, dV) by this instance.
  LogicalResult storeBackward(StoreOp op);
  /// The tensor `operand` names for this program (the forward's Q, K, V; the backward's), or null.
  Tensor *tensorOf(Operand operand);
  /// The rows of the tensor a load names: the instance's own tile (no index), or tile `index` of the sequence.
  struct TileRows {
    int64_t index, first, rows;
  };

  FailureOr<Scalar> scalar(Operation *user, Value value);
  FailureOr<TilePtr> tile(Operation *user, Value value);
  FailureOr<StatsPtr> rowStats(Operation *user, Value value);
  /// What the interpreter computed for `value` in `map`, or an error at `user` naming `what`.
  template <typename Map>
  FailureOr<typename Map::mapped_type> computed(const Map &map, Operation *user, Value value, StringRef what);
  /// Whether `user` reads `result` while an asynchronous MMA still writes it (carrying it on is no read).
  bool readsPending(Operation *user, const void *result) const;
  /// An accumulator, which must not be the pending result of an asynchronous P·V (unless carried on or yielded).
  FailureOr<AccPtr> accumulator(Operation *user, Value value);
  /// Binds a computed tile (row statistics, accumulator) to a result, checking it against the result's static shape.
  LogicalResult define(Operation *op, Value result, Tile value);
  LogicalResult define(Operation *op, Value result, RowStats value);
  LogicalResult define(Operation *op, Value result, Accumulator value);
  /// A state (tile.init_state, tile.state_load) of the instance's rows.
  LogicalResult checkStateRows(Operation *op, Value acc);
  /// Binds the empty state (m = -inf, l = 0, acc = 0) of the instance's rows to `stats` and `acc`.
  LogicalResult defineEmptyState(Operation *op, Value stats, Value acc);

  /// Reports an error at `op`, with a note naming the program instance.
  LogicalResult fail(Operation *op, const Twine &message);
  /// The query row (within the sequence) and query head of row `tileRow` (m0 + r) of this instance: itself and the
  /// instance's head, or under GQA packing (tile.pack_query_heads) row tileRow / G of head hKv·G + tileRow % G.
  std::pair<int64_t, int64_t> rowOf(int64_t tileRow) const {
    if (!packed)
      return {tileRow, inst.h};
    return {tileRow / group, inst.hKv * group + tileRow % group};
  }
  /// Rows of this instance's sequence: its query rows, times the group's heads under GQA packing.
  int64_t rowCount() const { return packed ? inst.seqlenQ * group : inst.seqlenQ; }
  /// Writes row r of tile O (rounded) and of the LSE tile of this instance to the outputs.
  void storeRow(int64_t r, const Tile *o, const Tile *lse) {
    auto [query, head] = rowOf(inst.m0 + r);
    storeRow(query, head, r, o, lse);
  }
  /// Writes row r of tile O (rounded) and of the LSE tile as query row `query` (of the sequence) of head `head`.
  void storeRow(int64_t query, int64_t head, int64_t r, const Tile *o, const Tile *lse);
  /// Split-KV: merges the partials of every row into O and LSE (the combine kernel).
  LogicalResult combineSplits(StoreSplitOp store);

  /// The instance's (batch, K/V head) entry of an FP8 descale: 1 when the problem gives none.
  float descale(const std::vector<float> &values) const {
    return values.empty() ? 1.0f : values[inst.b * problem.headsKv + inst.hKv];
  }
  /// The softmax scale of this instance: with an e4m3 program's descales folded in (q·k, as flash-attn 3).
  float softmaxScale() const { return problem.softmaxScale * descale(problem.qDescale) * descale(problem.kDescale); }

  FuncOp func;
  const Problem &problem;
  Tensor q, k, v;
  RoundFn roundOut;
  /// O's rounding: to the program's output type (bf16 for an e4m3 program, else roundOut's).
  RoundFn roundO;
  int64_t blockM;
  BackwardState *backward = nullptr;
  int64_t *qTileVisits = nullptr;       ///< the backward's main program: Q tiles its loops visited, all instances
  bool mainProgram = false;             ///< a backward_main program: instances own K/V tiles
  std::map<Output, int> backwardStores; ///< the backward's stores of this instance, by output
  bool packed = false; ///< tile.pack_query_heads: instances are (batch, K/V head, tile of the group's rows)
  int64_t group = 1;   ///< query heads per K/V head
  std::vector<float> *outO = nullptr, *outLse = nullptr;
  /// Split-KV partials: LSE of split s, LSE row r (as outLse is indexed) at s · lseRows + r; O's values of it at
  /// (s · lseRows + r) · headDimV. Rows no instance wrote stay NaN.
  std::vector<float> oAccum, lseAccum;
  int64_t lseRows = 0;
  int64_t *kTileLoads = nullptr; ///< this instance's counter in the RunStats, if any
  RunStats *runStats = nullptr;
  /// tile.cta_pair: the K tiles this instance loaded, in order (the two CTAs of a cluster pair must load the same).
  std::vector<int64_t> *kTileWalk = nullptr;

  /// Persistent programs: this block's number and the launch's block count; the O and LSE stores of each tile.
  int64_t persistentBlock = 0, persistentGrid = 0, persistentQTiles = 0;
  std::map<std::array<int64_t, 3>, std::pair<int, int>> tileStores;
  /// Dynamic work loops: the counter values each block takes, in order (a deal of 0 .. units - 1 that keeps each
  /// block's values increasing, as an atomic counter hands them out), the next one this block takes, and the unit in
  /// the work queue's cell.
  std::vector<std::vector<int64_t>> dealtUnits;
  size_t nextDealt = 0;
  int64_t workCell = 0;
  llvm::DenseMap<Value, int64_t> workQueueBuffers; ///< a tile.work_queue's full barrier -> its cell's buffer number

  /// K/V-step programs (tile.state_load): the launch's K/V tile, and the state each instance (batch, head, Q tile)
  /// stored last, with the step that stored it: the global-memory workspace between launches.
  int64_t kvStep = 0;
  struct StepState {
    int64_t step;
    RowStats stats;
    Accumulator acc;
  };
  std::map<std::array<int64_t, 3>, StepState> stepStates;

  Instance inst;
  AsyncCopies copies;
  MemoryProtocol memory;
  llvm::DenseMap<Value, int> tmemRegions;     ///< tile.tmem -> its region
  llvm::DenseMap<Value, int> memBuffers;      ///< tile.tmem_buffer / tile.smem_buffer -> its buffer number
  llvm::DenseMap<Value, int> channelBarriers; ///< a tile.channel's barrier -> its number in `memory`
  std::map<int, Held> held;                   ///< buffer number -> what it holds
  /// Stores of O and LSE by this instance, in whole instances' rows (a role of part of the rows, tile.role with
  /// `q_rows`, stores its part).
  int storesO = 0, storesLse = 0;
  int64_t storedRowsO = 0, storedRowsLse = 0, instanceRows = 0;
  llvm::DenseMap<Value, Scalar> scalars;
  llvm::DenseMap<Value, TilePtr> tiles;
  llvm::DenseMap<Value, StatsPtr> stats;
  llvm::DenseMap<Value, AccPtr> accs;
  llvm::DenseMap<Value, int64_t> buffers;             ///< tile.buffer -> its number
  llvm::DenseMap<Value, AsyncCopies::Slot> slots;     ///< tile.slot -> (buffer, slot)
  llvm::DenseMap<Value, int64_t> tokens;              ///< token -> the copy it stands for
  llvm::DenseMap<Value, int64_t> barriers;            ///< tile.barrier -> its number
  /// Asynchronous MMAs: tokens get ids from kFirstMmaToken down (copies count up from 0).
  static constexpr int64_t kFirstMmaToken = -2;
  int64_t nextMma = kFirstMmaToken;
  llvm::DenseMap<const void *, int64_t> pendingResults;             ///< an MMA's result -> its id, until waited
  llvm::DenseMap<int64_t, SmallVector<AsyncCopies::Slot>> mmaSlots; ///< an MMA in flight -> slots it reads
  llvm::DenseMap<const void *, AsyncCopies::Slot> loadedFrom;       ///< a tile read from a slot -> the slot
  llvm::DenseMap<const void *, int64_t> loadedFills;                ///< ... and the slot's fills when it was read
  RoleScheduler *roles = nullptr;                     ///< while roles run
  int role = 0;                                       ///< the running role (0 outside roles)
  uint64_t opsExecuted = 0;                           ///< progress, for deadlock detection
};

} // namespace flashtile::interp::detail

#endif // FLASHTILE_INTERPRETER_INTERPRETERSTATE_H
