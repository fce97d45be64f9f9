//===- Interpreter.cpp - executes tile programs on the CPU ----------------===//
//
// One program instance per (batch, query head, Q tile) walks the function body with an environment mapping
// SSA values to scalars, tiles and softmax states. Tile ops follow TileOps.td (numerics in TileMath.cpp),
// arith/math ops ScalarOps.cpp, and pipelined programs replay their copies through AsyncCopies. The backward's
// programs run on the same machinery, their instances owning a Q tile (preprocess, postprocess) or a K/V tile (main);
// the backward's ops' numerics are BackwardMath.cpp's.
//===----------------------------------------------------------------------===//
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

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::interp {

namespace {

using TilePtr = std::shared_ptr<const Tile>;
using StatsPtr = std::shared_ptr<const RowStats>;
using AccPtr = std::shared_ptr<const Accumulator>;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

RoundFn roundFor(Type type) {
  if (type.isBF16())
    return roundToBf16;
  if (type.isF16())
    return roundToF16;
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
bool isQuerySide(Operand operand) { return operand != Operand::K && operand != Operand::V; }

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
Instance sequenceOf(const Problem &p, int64_t b) {
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
int64_t longestSeqlenQ(const Problem &p) {
  int64_t longest = p.isVarlen() ? 0 : p.seqlenQ;
  for (size_t b = 0; p.isVarlen() && b + 1 < p.cuSeqlensQ.size(); ++b)
    longest = std::max<int64_t>(longest, p.cuSeqlensQ[b + 1] - p.cuSeqlensQ[b]);
  return longest;
}

int64_t longestSeqlenK(const Problem &p) {
  int64_t longest = p.isVarlen() ? 0 : p.seqlenK;
  for (size_t b = 0; p.isVarlen() && b + 1 < p.cuSeqlensK.size(); ++b)
    longest = std::max<int64_t>(longest, p.cuSeqlensK[b + 1] - p.cuSeqlensK[b]);
  return longest;
}

/// The Q tile's static row count after scheduling (of the loads of query rows: Q, or the backward's O, dO, ...);
/// unscheduled, `tileRows` rows, or the whole query sequence as one tile when it is 0.
int64_t qTileRows(FuncOp func, int64_t seqlenQ, int64_t tileRows) {
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
int64_t kvTileRows(Operation *scope, int64_t seqlenK, int64_t tileRows) {
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
        roundOut(roundFor(func.getDtype())), blockM(qTileRows(func, longestSeqlenQ(problem), problem.tileRowsQ)),
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

  FuncOp func;
  const Problem &problem;
  Tensor q, k, v;
  RoundFn roundOut;
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
  }
  llvm_unreachable("a tile.dim the interpreter does not know");
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
  scalars[op.getResult()] = Scalar::real(op.getInverse() ? 1.0f / problem.softmaxScale : problem.softmaxScale);
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
      out[d] = roundOut(o->at(r, d));
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

//===----------------------------------------------------------------------===//
// Math on tiles
//===----------------------------------------------------------------------===//

LogicalResult Interpreter::exec(QkOp op) {
  FailureOr<TilePtr> qt = tile(op, op.getQ()), kt = tile(op, op.getK());
  if (failed(qt) || failed(kt))
    return failure();
  if ((*qt)->cols != (*kt)->cols)
    return fail(op, "Q has " + Twine((*qt)->cols) + " columns but K has " + Twine((*kt)->cols));
  if (failed(define(op, op.getS(), qk(**qt, **kt))))
    return failure();
  if (Value token = op.getToken())
    return startMma(op, token, tiles[op.getS()].get(), {qt->get(), kt->get()});
  return success();
}

LogicalResult Interpreter::exec(ScaleOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS());
  if (failed(s))
    return failure();
  Tile out = **s;
  for (float &x : out.data)
    x *= problem.softmaxScale;
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(ScoreModOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS());
  if (failed(s))
    return failure();
  Tile out = **s;
  Block &body = op.getBody().front();
  SmallVector<Scalar, 1> result;
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) {
      // A tile's padding key past seqlen_k (its score is masked later) reaches the region as the last key, so
      // per-key input reads stay in range; the CUDA printer does the same.
      int64_t kv = std::min<int64_t>(out.colBase + c, std::max<int64_t>(inst.seqlenK - 1, 0));
      auto [query, head] = rowOf(out.rowBase + r);
      Scalar args[] = {Scalar::real(out.at(r, c)), Scalar::integer(inst.b), Scalar::integer(head),
                       Scalar::integer(query), Scalar::integer(kv)};
      if (failed(evalRegion(body, args, result)))
        return failure();
      out.at(r, c) = result[0].f;
    }
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(MaskOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS());
  if (failed(s))
    return failure();
  Tile out = **s;
  Block &body = op.getBody().front();
  SmallVector<Scalar, 1> keep;
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) {
      int64_t kv = out.colBase + c;
      bool kept = kv < inst.seqlenK; // keys past the sequence are always dropped
      if (kept) {
        auto [query, head] = rowOf(out.rowBase + r);
        Scalar args[] = {Scalar::integer(inst.b), Scalar::integer(head), Scalar::integer(query), Scalar::integer(kv)};
        if (failed(evalRegion(body, args, keep)))
          return failure();
        kept = keep[0].isTrue();
      }
      if (!kept)
        out.at(r, c) = -std::numeric_limits<float>::infinity();
    }
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(SoftmaxUpdateOp op) {
  // The softmax reads and writes m and l only: an asynchronous P·V may still be writing the accumulator (FA3's
  // intra-warpgroup overlap).
  FailureOr<TilePtr> s = tile(op, op.getS());
  FailureOr<StatsPtr> st = rowStats(op, op.getStats());
  if (failed(s) || failed(st))
    return failure();
  if ((*s)->rows != (*st)->rows)
    return fail(op, "the score tile has " + Twine((*s)->rows) + " rows but the row statistics " +
                        Twine((*st)->rows));
  RoundFn roundP = roundFor(cast<RankedTensorType>(op.getP().getType()).getElementType());
  float c = std::numbers::log2e_v<float>;
  if (op.getFoldScale())
    c = problem.softmaxScale * std::numbers::log2e_v<float>;
  SoftmaxStep step = softmaxUpdate(**s, **st, c, roundP, static_cast<int>(op.getRescaleThreshold().value_or(0)));
  if (failed(define(op, op.getP(), std::move(step.p))) || failed(define(op, op.getAlpha(), std::move(step.alpha))))
    return failure();
  return define(op, op.getNewStats(), std::move(step.stats));
}

LogicalResult Interpreter::exec(RescaleOp op) {
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  FailureOr<TilePtr> alpha = tile(op, op.getAlpha());
  if (failed(acc) || failed(alpha))
    return failure();
  if ((*alpha)->rows != (*acc)->rows)
    return fail(op, "alpha has " + Twine((*alpha)->rows) + " rows but the accumulator " + Twine((*acc)->rows));
  return define(op, op.getResult(), rescale(**acc, **alpha));
}

LogicalResult Interpreter::exec(PvOp op) {
  FailureOr<TilePtr> p = tile(op, op.getP()), vt = tile(op, op.getV());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(p) || failed(vt) || failed(acc))
    return failure();
  const Tile &pT = **p, &vT = **vt;
  const Accumulator &a = **acc;
  if (pT.cols != vT.rows || pT.rows != a.rows || vT.cols != a.cols)
    return fail(op, "P is " + Twine(pT.rows) + "x" + Twine(pT.cols) + ", V " + Twine(vT.rows) + "x" + Twine(vT.cols) +
                        " and the accumulator " + Twine(a.rows) + "x" + Twine(a.cols) +
                        ": P·V does not fit the accumulator");
  // P and V must come from the same K/V tile.
  if (pT.colBase != vT.rowBase)
    return fail(op, "P covers keys from " + Twine(pT.colBase) + " but V rows from " + Twine(vT.rowBase));
  if (failed(define(op, op.getResult(), pv(pT, vT, a))))
    return failure();
  if (Value token = op.getToken())
    return startMma(op, token, accs[op.getResult()].get(), {p->get(), vt->get()});
  return success();
}

LogicalResult Interpreter::exec(FinalizeOp op) {
  FailureOr<StatsPtr> st = rowStats(op, op.getStats());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(st) || failed(acc))
    return failure();
  std::optional<float> sink;
  if (op.hasSink() && packed)
    return fail(op, "has a sink in a program that packs query heads; the sink joins at tile.store_split there");
  if (op.hasSink()) {
    SmallVector<Scalar, 1> logit;
    if (failed(evalRegion(op.getSink().front(), {Scalar::integer(inst.b), Scalar::integer(inst.h)}, logit)))
      return failure();
    sink = logit[0].f;
  }
  Finalized out = finalize(**st, **acc, sink);
  if (failed(define(op, op.getO(), std::move(out.o))))
    return failure();
  return define(op, op.getLse(), std::move(out.lse));
}

LogicalResult Interpreter::checkStateRows(Operation *op, Value acc) {
  auto type = cast<AccType>(acc.getType());
  if (type.hasStaticRows() && type.getRows() != inst.rows)
    return fail(op, "the state has " + Twine(type.getRows()) + " rows but the program instance owns " +
                        Twine(inst.rows) + " query rows");
  return success();
}

LogicalResult Interpreter::defineEmptyState(Operation *op, Value stats, Value acc) {
  if (failed(define(op, stats, RowStats::empty(inst.rows))))
    return failure();
  return define(op, acc, Accumulator::zeros(inst.rows, cast<AccType>(acc.getType()).getCols()));
}

LogicalResult Interpreter::exec(InitStateOp op) {
  if (failed(checkStateRows(op, op.getAcc())))
    return failure();
  return defineEmptyState(op, op.getStats(), op.getAcc());
}

LogicalResult Interpreter::exec(StateLoadOp op) {
  if (failed(checkStateRows(op, op.getAcc())))
    return failure();
  if (kvStep == 0)
    return defineEmptyState(op, op.getStats(), op.getAcc());
  auto it = stepStates.find({inst.b, inst.h, inst.qTile});
  if (it == stepStates.end() || it->second.step != kvStep - 1)
    return fail(op, "K/V step " + Twine(kvStep) + " reads a state that step " + Twine(kvStep - 1) +
                        " did not store (tile.state_store) for these rows");
  if (failed(define(op, op.getStats(), it->second.stats)))
    return failure();
  return define(op, op.getAcc(), it->second.acc);
}

LogicalResult Interpreter::exec(StateStoreOp op) {
  FailureOr<StatsPtr> st = rowStats(op, op.getStats());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(st) || failed(acc))
    return failure();
  stepStates[{inst.b, inst.h, inst.qTile}] = {kvStep, **st, **acc};
  if (failed(define(op, op.getStatsOut(), **st)))
    return failure();
  return define(op, op.getAccOut(), **acc);
}

//===----------------------------------------------------------------------===//
// The backward's ops
//===----------------------------------------------------------------------===//

LogicalResult Interpreter::storeBackward(StoreOp op) {
  const Output output = op.getOperand();
  StringRef name = stringifyOutput(output);
  if (!backward || op.getStaging())
    return fail(op, "stores " + name +
                        (backward ? " through a slot, which the interpreter stages for O only"
                                  : ", which a forward program does not write"));
  ++backwardStores[output];
  if (output == Output::Dk || output == Output::Dv) {
    // The main program's accumulator of its K/V tile: this query head's part of the K/V head's gradient.
    FailureOr<AccPtr> acc = accumulator(op, op.getValue());
    if (failed(acc))
      return failure();
    Tensor &parts = output == Output::Dk ? backward->dkParts : backward->dvParts;
    if ((*acc)->rows != inst.kvRows || (*acc)->cols != parts.width)
      return fail(op, "stores a " + Twine((*acc)->rows) + "x" + Twine((*acc)->cols) + " " + name +
                          " accumulator but the program instance owns " + Twine(inst.kvRows) + " keys of " +
                          Twine(parts.width) + " values");
    // Keys past the sequence are not written.
    for (int64_t r = 0; r < (*acc)->rows && inst.n0 + r < inst.seqlenK; ++r)
      for (int64_t d = 0; d < parts.width; ++d)
        parts.at(inst.entry, inst.kRow0 + inst.n0 + r, inst.h, d) = (*acc)->acc[r * parts.width + d];
    return success();
  }
  FailureOr<TilePtr> value = tile(op, op.getValue());
  if (failed(value))
    return failure();
  const Tile &t = **value;
  // D (fp32 rows) of the preprocess, dQ (converted to the dtype) of the postprocess: the instance's Q tile.
  Tensor &out = output == Output::Delta ? backward->delta : backward->dq;
  if (t.rows != inst.rows || t.cols != out.width)
    return fail(op, "stores a " + Twine(t.rows) + "x" + Twine(t.cols) + " " + name +
                        " tile but the program instance owns " + Twine(inst.rows) + " query rows of " +
                        Twine(out.width) + " values");
  RoundFn round = output == Output::Dq ? roundOut : nullptr;
  for (int64_t r = 0; r < t.rows && inst.m0 + r < rowCount(); ++r) {
    auto [query, head] = rowOf(inst.m0 + r);
    for (int64_t d = 0; d < out.width; ++d)
      out.at(inst.entry, inst.qRow0 + query, head, d) = round ? round(t.at(r, d)) : t.at(r, d);
  }
  return success();
}

LogicalResult Interpreter::exec(RowDotOp op) {
  FailureOr<TilePtr> a = tile(op, op.getA()), b = tile(op, op.getB());
  if (failed(a) || failed(b))
    return failure();
  if ((*a)->rows != (*b)->rows || (*a)->cols != (*b)->cols || (*a)->rowBase != (*b)->rowBase)
    return fail(op, "multiplies a " + Twine((*a)->rows) + "x" + Twine((*a)->cols) + " tile of rows from " +
                        Twine((*a)->rowBase) + " by a " + Twine((*b)->rows) + "x" + Twine((*b)->cols) +
                        " tile of rows from " + Twine((*b)->rowBase) + ": the tiles must be the same rows");
  return define(op, op.getResult(), rowDot(**a, **b));
}

LogicalResult Interpreter::exec(ZeroAccOp op) {
  auto type = cast<AccType>(op.getAcc().getType());
  // The main program's dK and dV: a row per key of the instance's K/V tile.
  const int64_t rows = mainProgram ? inst.kvRows : inst.rows;
  if (type.hasStaticRows() && type.getRows() != rows)
    return fail(op, "makes an accumulator of " + Twine(type.getRows()) + " rows but the program instance owns " +
                        Twine(rows) + (mainProgram ? " keys" : " query rows"));
  return define(op, op.getAcc(), Accumulator::zeros(rows, type.getCols()));
}

LogicalResult Interpreter::exec(QLoopOp op) {
  SmallVector<AccPtr> carried;
  for (Value init : op.getInits()) {
    FailureOr<AccPtr> acc = accumulator(op, init);
    if (failed(acc))
      return failure();
    carried.push_back(*acc);
  }
  // Unbounded: every Q tile of the sequence; bounded: the schedule's [from, to), ascending.
  int64_t from = 0, to = blockM > 0 ? ceilDiv(rowCount(), blockM) : 0;
  if (op.isBounded()) {
    FailureOr<Scalar> lo = scalar(op, op.getLower()), hi = scalar(op, op.getUpper());
    if (failed(lo) || failed(hi))
      return failure();
    from = lo->i;
    to = hi->i;
  }
  Block &body = op.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  for (int64_t i = from; i < to; ++i) {
    if (qTileVisits)
      ++*qTileVisits;
    scalars[op.getTileIndex()] = Scalar::integer(i);
    for (auto [arg, acc] : llvm::zip_equal(op.getAccArgs(), carried))
      accs[arg] = acc;
    if (failed(execBlock(body)))
      return failure();
    for (auto [slot, value] : llvm::zip_equal(carried, yield.getValues())) {
      FailureOr<AccPtr> next = accumulator(yield, value);
      if (failed(next))
        return failure();
      slot = *next;
    }
  }
  for (auto [result, acc] : llvm::zip_equal(op.getResults(), carried))
    accs[result] = acc;
  return success();
}

LogicalResult Interpreter::exec(ProbsOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS()), lse = tile(op, op.getLse());
  if (failed(s) || failed(lse))
    return failure();
  if ((*s)->rows != (*lse)->rows || (*s)->rowBase != (*lse)->rowBase)
    return fail(op, "the scores are " + Twine((*s)->rows) + " rows from query row " + Twine((*s)->rowBase) +
                        " but the LSE " + Twine((*lse)->rows) + " rows from " + Twine((*lse)->rowBase));
  return define(op, op.getP(), probs(**s, **lse));
}

LogicalResult Interpreter::exec(SoftmaxGradOp op) {
  FailureOr<TilePtr> p = tile(op, op.getP()), dp = tile(op, op.getDp()), delta = tile(op, op.getDelta());
  if (failed(p) || failed(dp) || failed(delta))
    return failure();
  const Tile &pT = **p, &dpT = **dp, &dT = **delta;
  if (pT.rows != dpT.rows || pT.cols != dpT.cols || pT.rowBase != dpT.rowBase || pT.colBase != dpT.colBase)
    return fail(op, "P is " + Twine(pT.rows) + "x" + Twine(pT.cols) + " at (" + Twine(pT.rowBase) + ", " +
                        Twine(pT.colBase) + ") but dP " + Twine(dpT.rows) + "x" + Twine(dpT.cols) + " at (" +
                        Twine(dpT.rowBase) + ", " + Twine(dpT.colBase) + "): the same query rows and keys");
  if (dT.rows != pT.rows || dT.rowBase != pT.rowBase)
    return fail(op, "D has " + Twine(dT.rows) + " rows from query row " + Twine(dT.rowBase) + " but P " +
                        Twine(pT.rows) + " from " + Twine(pT.rowBase));
  return define(op, op.getDs(), softmaxGrad(pT, dpT, dT));
}

LogicalResult Interpreter::exec(ScoreGradOp op) {
  FailureOr<TilePtr> ds = tile(op, op.getDs()), s = tile(op, op.getS());
  if (failed(ds) || failed(s))
    return failure();
  const Tile &sT = **s;
  if ((*ds)->rows != sT.rows || (*ds)->cols != sT.cols || (*ds)->rowBase != sT.rowBase || (*ds)->colBase != sT.colBase)
    return fail(op, "dS' and the scores the derivative is taken at are not the same query rows and keys");
  Tile out = **ds;
  Block &body = op.getBody().front();
  SmallVector<Scalar, 1> result;
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) {
      // Where dS' is 0 (a masked score, a padded row: P = 0) dS is 0, whatever the derivative is there.
      if (out.at(r, c) == 0.f)
        continue;
      if (failed(evalScoreRegion(body, sT, r, c, result)))
        return failure();
      out.at(r, c) *= result[0].f;
    }
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(DotTnOp op) {
  FailureOr<TilePtr> a = tile(op, op.getA()), b = tile(op, op.getB());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(a) || failed(b) || failed(acc))
    return failure();
  const Tile &aT = **a, &bT = **b;
  const Accumulator &accT = **acc;
  if (aT.rows != bT.rows || aT.cols != accT.rows || bT.cols != accT.cols)
    return fail(op, "A is " + Twine(aT.rows) + "x" + Twine(aT.cols) + ", B " + Twine(bT.rows) + "x" + Twine(bT.cols) +
                        " and the accumulator " + Twine(accT.rows) + "x" + Twine(accT.cols) +
                        ": Aᵀ·B does not fit the accumulator");
  // A and B are the same query rows; A's columns are the keys of the instance's K/V tile, the accumulator's rows.
  if (aT.rowBase != bT.rowBase)
    return fail(op, "A covers query rows from " + Twine(aT.rowBase) + " but B rows from " + Twine(bT.rowBase));
  if (mainProgram && aT.colBase != inst.n0)
    return fail(op, "A covers keys from " + Twine(aT.colBase) + " but the program instance's K/V tile starts at key " +
                        Twine(inst.n0));
  RoundFn roundA = roundFor(cast<RankedTensorType>(op.getB().getType()).getElementType());
  return define(op, op.getResult(), dotTn(aT, roundA, bT, accT));
}

LogicalResult Interpreter::exec(AccumulateOp op) {
  FailureOr<TilePtr> a = tile(op, op.getA()), b = tile(op, op.getB());
  FailureOr<Scalar> index = scalar(op, op.getIndex());
  if (failed(a) || failed(b) || failed(index))
    return failure();
  Tensor *target = backward && op.getOperand() == Operand::DqAccum ? &backward->dqAccum : nullptr;
  if (!target)
    return fail(op, "adds into " + stringifyOperand(op.getOperand()) + ", which is not the backward's dq_accum");
  const Tile &aT = **a, &bT = **b;
  if (aT.cols != bT.rows || bT.cols != target->width)
    return fail(op, "A is " + Twine(aT.rows) + "x" + Twine(aT.cols) + " and B " + Twine(bT.rows) + "x" +
                        Twine(bT.cols) + ": A·B does not fit rows of " + Twine(target->width) + " values");
  // A's rows are Q tile `index`'s, its columns B's keys.
  if (aT.rowBase != index->i * blockM || aT.rows != blockM)
    return fail(op, "A is " + Twine(aT.rows) + " query rows from " + Twine(aT.rowBase) + " but Q tile " +
                        Twine(index->i) + " is " + Twine(blockM) + " rows from " + Twine(index->i * blockM));
  if (aT.colBase != bT.rowBase)
    return fail(op, "A covers keys from " + Twine(aT.colBase) + " but B rows from " + Twine(bT.rowBase));
  RoundFn roundA = roundFor(cast<RankedTensorType>(op.getB().getType()).getElementType());
  // Rows past the query sequence are not added.
  for (int64_t r = 0; r < aT.rows && aT.rowBase + r < rowCount(); ++r) {
    auto [query, head] = rowOf(aT.rowBase + r);
    std::vector<float> row = rowTimes(aT, roundA, bT, r);
    for (int64_t d = 0; d < target->width; ++d)
      target->at(inst.entry, inst.qRow0 + query, head, d) += row[d];
  }
  return success();
}

FailureOr<float *> Interpreter::inputGradAt(Operation *op, StringRef name, int64_t index) {
  const int64_t input = func.inputIndex(name);
  if (!backward || input < 0 || static_cast<size_t>(input) >= backward->inputGrads.size())
    return fail(op, "adds into the gradient of '" + name + "', which is not an input of the backward");
  std::vector<float> &grad = backward->inputGrads[input];
  if (index < 0 || index >= static_cast<int64_t>(grad.size()))
    return fail(op, "adds into element " + Twine(index) + " of the gradient of '" + name + "', which has " +
                        Twine(grad.size()) + " elements");
  return &grad[index];
}

LogicalResult Interpreter::exec(InputGradOp op) {
  FailureOr<TilePtr> ds = tile(op, op.getDs()), s = tile(op, op.getS());
  if (failed(ds) || failed(s))
    return failure();
  const Tile &dsT = **ds, &sT = **s;
  if (dsT.rows != sT.rows || dsT.cols != sT.cols || dsT.rowBase != sT.rowBase || dsT.colBase != sT.colBase)
    return fail(op, "dS' and the scores the derivative is taken at are not the same query rows and keys");
  Block &body = op.getBody().front();
  SmallVector<Scalar, 2> result;
  // The instance's terms, summed in fp32 per index (one index per (b, h): the verifier's rule), then added once, as
  // a kernel's block adds its partial.
  std::map<int64_t, float> sums;
  for (int64_t r = 0; r < dsT.rows; ++r)
    for (int64_t c = 0; c < dsT.cols; ++c) {
      if (dsT.at(r, c) == 0.f) // a masked score, a padded row: nothing to add
        continue;
      if (failed(evalScoreRegion(body, sT, r, c, result)))
        return failure();
      sums[result[0].i] += dsT.at(r, c) * result[1].f;
    }
  for (auto [index, sum] : sums) {
    FailureOr<float *> at = inputGradAt(op, op.getName(), index);
    if (failed(at))
      return failure();
    **at += sum;
  }
  return success();
}

LogicalResult Interpreter::exec(SinkGradOp op) {
  FailureOr<TilePtr> delta = tile(op, op.getDelta()), lse = tile(op, op.getLse());
  if (failed(delta) || failed(lse))
    return failure();
  const Tile &dT = **delta, &lT = **lse;
  if (dT.rows != lT.rows || dT.rowBase != lT.rowBase)
    return fail(op, "D and LSE are not the same rows");
  Block &body = op.getBody().front();
  SmallVector<Scalar, 3> result;
  std::map<int64_t, float> sums;
  for (int64_t r = 0; r < dT.rows && dT.rowBase + r < rowCount(); ++r) {
    auto [query, head] = rowOf(dT.rowBase + r);
    Scalar args[] = {Scalar::integer(inst.b), Scalar::integer(head)};
    if (failed(evalRegion(body, args, result)))
      return failure();
    // dσ's term of row i: −e^(σ − LSE_i)·D_i (0 for a row that saw nothing: LSE = −inf would give e^σ·0 only with
    // a sink, whose LSE is finite).
    const float pSink = std::exp(result[0].f - lT.at(r, 0));
    sums[result[1].i] += -pSink * dT.at(r, 0) * result[2].f;
  }
  for (auto [index, sum] : sums) {
    FailureOr<float *> at = inputGradAt(op, op.getName(), index);
    if (failed(at))
      return failure();
    **at += sum;
  }
  return success();
}

LogicalResult Interpreter::runBackwardProgram(int64_t *visits) {
  qTileVisits = visits;
  StringRef kind = func.getKind();
  const std::map<Output, int> expected = kind == kBackwardPreprocess ? std::map<Output, int>{{Output::Delta, 1}}
                                         : mainProgram ? std::map<Output, int>{{Output::Dk, 1}, {Output::Dv, 1}}
                                                       : std::map<Output, int>{{Output::Dq, 1}};
  const int64_t longest = longestSeqlenQ(problem);
  if (longest > 0 && blockM <= 0)
    return func.emitError() << "the Q tile has " << blockM << " rows";
  for (int64_t b = 0; b < problem.batch; ++b)
    for (int64_t h = 0; h < problem.headsQ; ++h) {
      const Instance seq = sequenceOf(problem, b);
      // The main program: one instance per K/V tile of the sequence (none without keys), its loop over the Q tiles;
      // the others one per Q tile (varlen: none past a shorter sequence's rows, as the kernels' blocks).
      const int64_t kvRows = mainProgram ? kvTileRows(func, seq.seqlenK, problem.tileRowsK) : 0;
      const int64_t tiles = mainProgram ? (kvRows > 0 ? ceilDiv(seq.seqlenK, kvRows) : 0)
                                        : (blockM > 0 ? ceilDiv(seq.seqlenQ, blockM) : 0);
      for (int64_t t = 0; t < tiles; ++t) {
        inst = seq;
        inst.h = h;
        inst.hKv = h / group;
        inst.splitEnd = inst.seqlenK;
        if (mainProgram) {
          // Its Q rows are the whole sequence's (tile.kv_range, outside the loop, sees all of them).
          inst.kvTile = t;
          inst.n0 = t * kvRows;
          inst.kvRows = kvRows;
          inst.rows = inst.seqlenQ;
        } else {
          inst.qTile = t;
          inst.m0 = t * blockM;
          inst.rows = blockM;
        }
        if (failed(runInstance()))
          return failure();
        for (const auto &[output, count] : expected)
          if (int stored = backwardStores[output]; stored != count)
            return fail(func, "a program instance must store " + stringifyOutput(output) + " once; it stored it " +
                                  Twine(stored) + " times");
      }
    }
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
    return func.emitError() << "the interpreter runs bf16 and f16 programs, not " << func.getDtype();
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

} // namespace

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
  RoundFn round = roundFor(func.getDtype());
  Interpreter interpreter(func, problem, rounded(q, round, problem.seqlenQ, problem.headsQ, problem.headDim),
                          rounded(k, round, problem.seqlenK, problem.headsKv, problem.headDim),
                          rounded(v, round, problem.seqlenK, problem.headsKv, problem.headDimV));
  return interpreter.run(o, lse, stats);
}

} // namespace flashtile::interp
