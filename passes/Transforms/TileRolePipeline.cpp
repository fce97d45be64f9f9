//===- TileRolePipeline.cpp - tile-role-pipeline --------------------------===//
//
// Warp specialization (FA3's), as roles over a ring of slots, configured by a schedule (RolePipeline.h: fa3's forward,
// fa4's `roles = 0` form). After tile-split-boundary the program is: the KV-range
// rules and the walk's bounds, Q's load, the K/V loop segments (walked descending, tiles [lowest, highest)), the
// finalize and the stores. This pass makes it:
//
//   buffers: Q (1 slot), K and V (`stages` slots each); barriers: Q full, K full/empty, V full/empty
//   the rules and bounds, as before (both roles read them)
//   tile.role "producer" {warps = 4, regs = 24}:
//     copy Q, arriving on Q's full barrier
//     kv_walk j over the same tiles:  i = highest - 1 - j (ring position: slot i mod stages, round i div stages)
//       wait K's empty[i], copy K(j) into slot i, arriving on K's full[i]
//       wait V's empty[i], copy V(j) into slot i, arriving on V's full[i]
//   tile.role "consumer" {warps = 4 x consumer warpgroups, regs = 240}:
//     wait Q's full[0], read Q; the state; the segments, each iteration:
//       wait K's full[i], read K(j), S = Q·K(j)ᵀ, release K's slot (empty[i]) ... softmax ...
//       wait V's full[i], read V(j), acc += P·V(j), release V's slot
//     finalize, store
//
// Persistent blocks (`persistent`, `scheduler`): each role's ops become the body of a tile.work_loop over the
// block's tiles (loopOverWorkTiles). With the dynamic scheduler a tile.work_queue hands each tile's unit from the
// producer, which takes it from the launch's counter, to the consumer role, which releases the queue's cell at the
// start of the tile.
//
// Slots are released as soon as their GEMM has completed, so the producer runs up to `stages` tiles ahead. Each GEMM
// is waited on right after it is issued: overlapping P·V(j) with the softmax of tile j + 1 (FA3's intra-warpgroup
// overlap) needs the state's m and l apart from acc (P·V writes acc only), which the IR does not split yet. The
// consumer warpgroups are one role here: how they split the block's rows, and whether they ping-pong, is below this
// IR (the target's).
//===----------------------------------------------------------------------===//
#include "passes/Transforms/RolePipeline.h"

#include "passes/IR/TileDialect.h"
#include "passes/Transforms/KvRing.h"
#include "passes/Transforms/LoopCarry.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::tile {
namespace {

struct TileRolePipeline : PassWrapper<TileRolePipeline, OperationPass<FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TileRolePipeline)
  TileRolePipeline() = default;
  TileRolePipeline(const TileRolePipeline &other) : PassWrapper(other) {}
  explicit TileRolePipeline(RoleRegisters regs, ConsumerOrder order) {
    producerRegs = regs.producer;
    consumerRegs = regs.consumer;
    overlap = order.overlap;
    pingpong = order.pingpong;
    persistent = order.persistent;
    scheduler = order.dynamic ? "dynamic" : "static";
    stageO = order.stageO;
  }
  StringRef getArgument() const override { return "tile-role-pipeline"; }
  StringRef getName() const override { return "TileRolePipeline"; }
  StringRef getDescription() const override {
    return "Warp specialization: a producer role fills K/V ring slots (tile.copy_async arriving on full "
           "barriers, after the slot's empty barrier), a consumer role computes (waits on full barriers, releases "
           "slots on empty barriers)";
  }
  void getDependentDialects(DialectRegistry &registry) const override { registry.insert<arith::ArithDialect>(); }

  Option<int> producerRegs{*this, "producer-regs",
                           llvm::cl::desc("registers per producer thread (0: the default for the consumer warpgroups)"),
                           llvm::cl::init(0)};
  Option<int> consumerRegs{*this, "consumer-regs",
                           llvm::cl::desc("registers per consumer thread (0: the default for the consumer warpgroups)"),
                           llvm::cl::init(0)};
  Option<bool> overlap{*this, "intra-wg-overlap",
                       llvm::cl::desc("run P·V of tile j + 1 under the softmax of tile j (FA3's intra-warpgroup overlap)"),
                       llvm::cl::init(true)};
  Option<int> pingpong{*this, "pingpong",
                       llvm::cl::desc("the consumer warpgroups take turns issuing their GEMMs (FA3's ping-pong): 1, 0, "
                                      "or -1 where FA3 does (two or more consumer warpgroups, head dims up to 128)"),
                       llvm::cl::init(-1)};

  Option<int> persistent{*this, "persistent",
                         llvm::cl::desc("each role loops over the work tiles of a persistent thread block "
                                        "(tile.work_loop): Q gets an empty barrier, ring positions run on. 1, 0, or -1 "
                                        "where it measured faster (walks of one length, or the short shape class)"),
                         llvm::cl::init(-1)};
  Option<std::string> scheduler{
      *this, "scheduler",
      llvm::cl::desc("how persistent blocks get their Q tiles: static (a fixed assignment) or "
                     "dynamic (a per-launch counter, heaviest tiles first; implies "
                     "persistent blocks)"),
      llvm::cl::init("static")};

  Option<int> stageO{*this, "stage-o",
                     llvm::cl::desc("O leaves through the consumer's Q rows of shared memory (tile.store o ... through; a "
                                    "persistent block then releases Q after it): 1, 0, or -1 where it measured faster "
                                    "(a block a tile; persistent blocks above head dim 64)"),
                     llvm::cl::init(-1)};

  /// Persistent pipelines: stand-ins for the ring position of this tile's first K/V tile and for the number of tiles
  /// the block ran before it (Q's ring position), replaced by each role's tile.work_loop arguments; null otherwise.
  Value ringBase, tileCount;

  /// The K/V rings: their buffers and full/empty barriers.
  struct Ring {
    Value kBuffer, vBuffer, kFull, kEmpty, vFull, vEmpty;
  };

  /// A K/V loop segment and its K and V loads.
  struct Body {
    KvLoopOp loop;
    LoadOp k, v;
  };

  void runOnOperation() override {
    FuncOp func = getOperation();
    FailureOr<SplitProgram> program = splitProgram(func, "pipelining");
    if (failed(program) || failed(checkProgram(func, *program)))
      return signalPassFailure();
    ScheduleAttr schedule = program->schedule;
    SmallVector<KvLoopOp> loops = program->loops;
    Value highest = loops.front().getUpper(), lowest = loops.back().getLower();
    const bool dynamic = scheduler == "dynamic";
    LoadOp loadQ = program->loadQ;
    Location loc = loadQ.getLoc();
    MLIRContext *ctx = &getContext();

    // The K and V loads of each segment, before anything moves.
    FailureOr<SmallVector<Body>> bodies = kvBodies(loops);
    if (failed(bodies))
      return signalPassFailure();

    // Buffers and barriers at the top.
    Block &top = func.getBody().front();
    OpBuilder b(&top, top.begin());
    const KvRing ring = createKvRing(b, loc, loadQ.getType(), bodies->front().k.getType(), bodies->front().v.getType(),
                                     schedule.getStages());
    // A persistent block copies Q once a tile into its one slot: the consumers release it like a K/V slot.
    const bool loopsOverTiles = dynamic || persistent == 1 || (persistent < 0 && persistentByDefault(func));
    Value qEmpty = loopsOverTiles ? emptyBarrier(b, loc, ring.qBuffer) : Value();
    if (loopsOverTiles) {
      ringBase = arith::ConstantIntOp::create(b, loc, 0, 32);
      tileCount = arith::ConstantIntOp::create(b, loc, 0, 32);
    }

    // The consumer's ops: the state, Q, the segments, finalize and the stores; the rest (rules, bounds, scalars)
    // stays in front of the roles.
    SmallVector<Operation *> consumerOps;
    for (Operation &op : top)
      if (isa<InitStateOp, LoadOp, KvLoopOp, FinalizeOp, StoreOp>(op))
        consumerOps.push_back(&op);

    b.setInsertionPointToEnd(&top);
    RoleRegisters budget = defaultRegisters((schedule.getWarps() - 4) / 4);
    RoleOp producer = makeRole(b, loc, "producer", 4, producerRegs ? producerRegs : budget.producer);
    RoleOp consumer =
        makeRole(b, loc, "consumer", schedule.getWarps() - 4, consumerRegs ? consumerRegs : budget.consumer);
    bool turns = pingpong == 1 || (pingpong < 0 && schedule.getWarps() - 4 >= 8 &&
                                   std::max(func.getHeadDim(), func.getHeadDimV()) <= 128);
    if (turns) {
      if (schedule.getWarps() - 4 < 8) {
        func.emitOpError() << "tile-role-pipeline: pingpong needs at least two consumer warpgroups";
        return signalPassFailure();
      }
      consumer.setPingpong(true);
    }

    fillProducer(producer, ring, qEmpty, loopsOverTiles, highest, lowest, loc);
    const bool staged =
        fillConsumer(func, consumer, consumerOps, loadQ, ring, *bodies, highest, lowest, loopsOverTiles, loc);
    if (loopsOverTiles) {
      // Dynamic: the producer takes each unit and hands it to the consumers through a work queue (its own
      // full/empty barrier pair, like a one-slot ring); the consumers release it once they have read it.
      WorkQueueOp queue;
      if (dynamic) {
        OpBuilder qb(producer);
        Type one = BarrierType::get(ctx, 1);
        queue = WorkQueueOp::create(qb, loc, one, one, qb.getI64IntegerAttr(1));
      }
      loopOverWorkTiles(func, {producer, consumer}, qEmpty, highest, lowest, staged, queue);
    }
  }

  /// The checks of the split program and of the options, before anything changes: warps for a producer and a
  /// consumer warpgroup, K/V loop bounds computed in the body, a known scheduler that persistent blocks allow.
  LogicalResult checkProgram(FuncOp func, SplitProgram &program) {
    ScheduleAttr schedule = program.schedule;
    if (schedule.getWarps() < 8 || schedule.getWarps() % 4 != 0)
      return func.emitOpError() << "has " << schedule.getWarps()
                                << " warps; the role pipeline needs a producer warpgroup and at least one consumer "
                                   "warpgroup (4 warps each)";
    Value highest = program.loops.front().getUpper(), lowest = program.loops.back().getLower();
    if (!highest.getDefiningOp() || !lowest.getDefiningOp())
      return func.emitOpError() << "K/V loop bounds must be computed in the program body";
    if (scheduler != "static" && scheduler != "dynamic")
      return func.emitOpError() << "tile-role-pipeline: scheduler = '" << scheduler
                                << "' is not accepted; accepted: static, dynamic";
    if (scheduler == "dynamic" && persistent == 0)
      return func.emitOpError()
             << "tile-role-pipeline: scheduler = dynamic hands tiles to persistent blocks, but persistent = 0";
    return success();
  }

  /// Each K/V loop segment with its K and V loads, each read by one GEMM.
  static FailureOr<SmallVector<Body>> kvBodies(ArrayRef<KvLoopOp> loops) {
    SmallVector<Body> bodies;
    for (KvLoopOp loop : loops) {
      Body b{loop, {}, {}};
      for (LoadOp load : loop.getBody().front().getOps<LoadOp>())
        (load.getOperand() == Operand::K ? b.k : b.v) = load;
      if (!b.k || !b.v || !b.k->hasOneUse() || !b.v->hasOneUse() || !isa<QkOp>(*b.k->user_begin()) ||
          !isa<PvOp>(*b.v->user_begin()))
        return loop.emitOpError() << "must load K for one tile.qk and V for one tile.pv";
      bodies.push_back(b);
    }
    return bodies;
  }

  /// The producer role: Q (after Q's empty barrier, where the block loops over tiles), then every tile of the walk
  /// in order, each into its ring slot.
  void fillProducer(RoleOp producer, const KvRing &ring, Value qEmpty, bool loopsOverTiles, Value highest, Value lowest,
                    Location loc) {
    OpBuilder pb(producer.getBody().front().getTerminator());
    Value zero = arith::ConstantIntOp::create(pb, loc, 0, 32);
    Value one = arith::ConstantIntOp::create(pb, loc, 1, 32);
    Value qSlot = SlotOp::create(pb, loc, ring.qBuffer, Value()).getResult();
    Value qPosition = loopsOverTiles ? tileCount : zero;
    if (loopsOverTiles)
      BarrierWaitOp::create(pb, loc, qEmpty, qPosition);
    CopyAsyncOp::create(pb, loc, Operand::Q, Value(), qSlot, ring.qFull, qPosition, Value());
    auto walk = KvWalkOp::create(pb, loc, lowest, highest, KvOrder::Descending);
    Block *walkBody = new Block();
    walk.getBody().push_back(walkBody);
    Value j = walkBody->addArgument(pb.getI32Type(), loc);
    OpBuilder wb(walkBody, walkBody->end());
    copyKvTile(wb, loc, ring, j, ringPosition(wb, loc, highest, j, one));
    YieldOp::create(wb, loc);
  }

  /// The consumer role: the program's ops, with the waits and releases around each read (the GEMMs overlapped or
  /// each waited on), and O's store staged through Q's slot where that pays. Returns whether O is staged.
  bool fillConsumer(FuncOp func, RoleOp consumer, ArrayRef<Operation *> consumerOps, LoadOp loadQ, const KvRing &ring,
                    MutableArrayRef<Body> bodies, Value highest, Value lowest, bool loopsOverTiles, Location loc) {
    Operation *consumerEnd = consumer.getBody().front().getTerminator();
    for (Operation *op : consumerOps)
      op->moveBefore(consumerEnd);
    OpBuilder cb(loadQ);
    BarrierWaitOp::create(cb, loc, ring.qFull,
                          loopsOverTiles ? tileCount : arith::ConstantIntOp::create(cb, loc, 0, 32));
    loadQ.getSlotMutable().assign(SlotOp::create(cb, loc, ring.qBuffer, Value()).getResult());
    const Ring kv{ring.kBuffer, ring.vBuffer, ring.kFull, ring.kEmpty, ring.vFull, ring.vEmpty};
    if (overlap)
      overlapSoftmaxWithPv(bodies, highest, lowest, kv);
    else
      waitEachGemm(bodies, highest, kv);
    // O staging: Q's tile is dead after the last Q·Kᵀ, so O can leave through its shared memory. A persistent block
    // releases Q's slot for the next tile's Q: after its last Q·Kᵀ when O is stored from the registers, after O
    // left through the slot when staged (the next tile's Q then lands after this tile's epilogue). Measured on the
    // H200 (bench/NOTES.md v22): a block a tile +2-11% (head dim 256 most), persistent blocks +1-2% at head dim 128
    // but -7% at 64 for 1k sequences (a short walk waits for Q behind the epilogue), so those store directly.
    // An e4m3 program's Q tile holds half of O's bf16 bytes: its O leaves from the registers.
    const bool e4m3 = isa<Float8E4M3FNType>(func.getDtype());
    const bool staged =
        !e4m3 && (stageO == 1 ||
                  (stageO < 0 && (!loopsOverTiles || std::max(func.getHeadDim(), func.getHeadDimV()) > 64)));
    if (staged)
      for (StoreOp store : consumer.getBody().front().getOps<StoreOp>())
        if (store.getOperand() == Output::O)
          store.getStagingMutable().assign(loadQ.getSlot());
    return staged;
  }

  /// Persistent blocks where they measured faster on the H200 (2026-12-01, bench/NOTES.md v17), at head dims up to 128:
  /// programs whose every Q tile walks the same keys (no KV-range rule reads the query rows: the tiles cost the same,
  /// so a static assignment is balanced; +2-4% at 2k-16k, +6-13% at 1k), and the short shape class (sequences up to
  /// 1k: causal +7% at hd128, +21% at hd64). Causal and banded programs of the default class keep a block a tile: the
  /// hardware's block scheduler balances their uneven tiles better than a static assignment (causal 16k: 1.09x cuDNN
  /// against 0.83x). At head dim 256 persistent blocks measured 0-6% slower.
  static bool persistentByDefault(FuncOp func) {
    if (std::max(func.getHeadDim(), func.getHeadDimV()) > 128)
      return false;
    if (func.getScheduleAttr().getShapeClass() == ShapeClass::Short)
      return true;
    return llvm::all_of(func.getBody().getOps<KvRangeOp>(), [](KvRangeOp range) {
      Block &rule = range.getRule().front();
      return rule.getArgument(0).use_empty() && rule.getArgument(1).use_empty();
    });
  }

  /// Whether a role computes (has the state, tile.init_state) rather than only moving tiles.
  static bool computes(RoleOp role) {
    return role.walk([](InitStateOp) { return WalkResult::interrupt(); }).wasInterrupted();
  }

  /// Each GEMM waited on right after it is issued.
  void waitEachGemm(MutableArrayRef<Body> bodies, Value highest, const Ring &ring) {
    for (Body &body : bodies) {
      Location loc = body.loop.getLoc();
      Block &block = body.loop.getBody().front();
      OpBuilder lb(&block, block.begin());
      Value i = ringPosition(lb, loc, highest, body.loop.getTileIndex(), arith::ConstantIntOp::create(lb, loc, 1, 32));
      readSlot(body.k, ring.kBuffer, ring.kFull, ring.kEmpty, i);
      // V is read right before P·V (the softmax does not wait for it).
      body.v->moveBefore(*body.v->user_begin());
      readSlot(body.v, ring.vBuffer, ring.vFull, ring.vEmpty, i);
    }
  }

  /// A persistent block: each role's ops become the body of a tile.work_loop, preceded by a copy of the per-tile
  /// ops before the roles (the KV-range rules and the walk's bounds, which read the iteration's tile). Ring positions
  /// continue from tile to tile (the loop carries the first position of the next tile: this one's plus the tiles it
  /// walked), Q's ring position is the loop's tile count, and the consumers release Q's slot once the last loop
  /// that reads Q (a Q·Kᵀ) is done, so that the producer copies the next tile's Q while they finish this one.
  /// A dynamic scheduler's `queue` (else null): the producer takes the units, the consumers release its cell.
  void loopOverWorkTiles(FuncOp func, ArrayRef<RoleOp> roles, Value qEmpty, Value highest, Value lowest,
                         bool oStagedInQ, WorkQueueOp queue) {
    Block &top = func.getBody().front();
    Location loc = func.getLoc();
    Type i32 = IntegerType::get(func.getContext(), 32);
    SmallVector<Operation *> perTile;
    for (Operation &op : top)
      if (!isa<BufferOp, BarrierOp, RoleOp, WorkQueueOp>(op) && &op != ringBase.getDefiningOp() &&
          &op != tileCount.getDefiningOp())
        perTile.push_back(&op);
    for (RoleOp role : roles) {
      Block &body = role.getBody().front();
      SmallVector<Operation *> ops;
      for (Operation &op : body.without_terminator())
        ops.push_back(&op);
      OpBuilder rb(&body, body.begin());
      Value zero = arith::ConstantIntOp::create(rb, loc, 0, 32);
      // The producer (the role that only moves tiles) takes the units of a dynamic loop.
      const bool takes = queue && !computes(role);
      auto loop = WorkLoopOp::create(rb, loc, TypeRange{i32}, queue ? queue.getFull() : Value(),
                                     queue ? queue.getEmpty() : Value(), takes, ValueRange{zero});
      Block *tile = new Block();
      loop.getBody().push_back(tile);
      Value count = tile->addArgument(i32, loc), base = tile->addArgument(i32, loc);
      for (Operation *op : ops)
        op->moveBefore(tile, tile->end());
      OpBuilder tb(tile, tile->begin());
      IRMapping map;
      for (Operation *op : perTile)
        tb.clone(*op, map);
      auto inLoop = [&](OpOperand &use) { return loop->isProperAncestor(use.getOwner()); };
      for (Operation *op : perTile)
        for (Value result : op->getResults())
          result.replaceUsesWithIf(map.lookup(result), inLoop);
      ringBase.replaceUsesWithIf(base, inLoop);
      tileCount.replaceUsesWithIf(count, inLoop);
      if (queue && !takes) {
        // The unit of this tile has been read (at the loop's head): the cell is free for the next one at once.
        OpBuilder ab(tile, tile->begin());
        BarrierArriveOp::create(ab, loc, queue.getEmpty(), count);
      }
      if (!tile->getOps<InitStateOp>().empty()) {
        // The consumers: Q is free after the last top-level loop with a Q·Kᵀ, or after O was staged in its slot.
        Operation *release = nullptr;
        for (KvLoopOp kv : tile->getOps<KvLoopOp>())
          if (!kv.getBody().front().getOps<QkOp>().empty())
            release = kv;
        if (oStagedInQ)
          for (StoreOp store : tile->getOps<StoreOp>())
            if (store.getStaging())
              release = store;
        if (release) {
          OpBuilder ab(release->getBlock(), std::next(release->getIterator()));
          BarrierArriveOp::create(ab, loc, qEmpty, count);
        }
      }
      OpBuilder yb(tile, tile->end());
      Value walked = arith::MaxSIOp::create(yb, loc, arith::SubIOp::create(yb, loc, map.lookup(highest),
                                                                           map.lookup(lowest)),
                                            arith::ConstantIntOp::create(yb, loc, 0, 32));
      YieldOp::create(yb, loc, ValueRange{arith::AddIOp::create(yb, loc, base, walked).getResult()});
    }
    for (Operation *op : llvm::reverse(perTile))
      op->erase();
    ringBase.getDefiningOp()->erase();
    tileCount.getDefiningOp()->erase();
  }

  /// FA3's intra-warpgroup overlap. Iteration j issues Q·K(j)ᵀ, then P(j + 1)·V(j + 1) with the probabilities the
  /// iteration before computed (carried), and runs the softmax of tile j while that P·V is in flight; only the
  /// rescale of acc waits for it:
  ///
  ///   prologue, tile highest − 1 alone (a segment of at most one tile, masked): S, softmax, P carried out
  ///   each segment, its tiles below highest − 1:
  ///     wait K full[i]; S = Q·K(j)ᵀ (async); wait V full[i − 1]; acc += P·V(j + 1) (async)
  ///     wait S; release K[i]; mask ...; softmax_update reads m and l (acc is still being written)
  ///     wait P·V; release V[i − 1]; acc *= alpha; carry P(j)
  ///   epilogue, tile lowest alone: acc += P·V(lowest)
  ///
  /// The prologue runs the first masked segment's body: a mask is exact on any tile, so a first tile that at run
  /// time belongs to an unmasked segment stays right. Empty walks run none of the three.
  void overlapSoftmaxWithPv(MutableArrayRef<Body> bodies, Value highest, Value lowest, Ring ring) {
    KvLoopOp first = bodies.front().loop;
    Location loc = first.getLoc();
    MLIRContext *ctx = first.getContext();
    OpBuilder b(first);
    Value one = arith::ConstantIntOp::create(b, loc, 1, 32);
    Value firstTile = arith::MaxSIOp::create(b, loc, arith::SubIOp::create(b, loc, highest, one), lowest);

    Body *masked = &bodies.front();
    for (Body &body : bodies)
      if (!body.loop.getBody().front().getOps<MaskOp>().empty()) {
        masked = &body;
        break;
      }
    auto update = *masked->loop.getBody().front().getOps<SoftmaxUpdateOp>().begin();
    const Overlap o{highest,
                    lowest,
                    one,
                    firstTile,
                    ring,
                    loc,
                    IntegerType::get(ctx, 32),
                    TokenType::get(ctx),
                    first.getInitStats().getType(),
                    first.getInitAcc().getType(),
                    cast<RankedTensorType>(update.getP().getType())};

    KvLoopOp prologue = overlapPrologue(b, o, *masked, first, update);
    first.getInitStatsMutable().assign(prologue.getStats());
    first.getInitAccMutable().assign(prologue.getAcc());

    // The segments, below the prologue's tile, each carrying P.
    Value carriedP = prologue.getCarriedResults().front();
    KvLoopOp last;
    for (Body &body : bodies) {
      last = overlapSegment(o, body, carriedP);
      carriedP = last.getCarriedResults().back();
    }
    overlapEpilogue(o, last, carriedP, bodies.front().v.getType());
  }

  /// What the steps of overlapSoftmaxWithPv share: the walk's bounds (and its first tile, highest − 1), the ring,
  /// and the types of a tile's values.
  struct Overlap {
    Value highest, lowest, one, firstTile;
    Ring ring;
    Location loc;
    Type i32, token, statsType, accType;
    RankedTensorType pType;
  };

  /// The prologue, before `first`: tile highest − 1 alone, the masked body without its P·V, P carried out.
  KvLoopOp overlapPrologue(OpBuilder &b, const Overlap &o, Body &masked, KvLoopOp first, SoftmaxUpdateOp update) {
    Location loc = o.loc;
    RankedTensorType pType = o.pType;
    // P before the first tile: never read (P·V(j + 1) runs only where tile j + 1 was the prologue's or a loop's).
    Value noP = arith::ConstantOp::create(
        b, loc, pType, DenseElementsAttr::get(pType, ArrayRef<Attribute>{b.getFloatAttr(pType.getElementType(), 0.0)}));

    auto prologue = KvLoopOp::create(b, loc, o.firstTile, o.highest, first.getInitStats(), first.getInitAcc(),
                                     ValueRange{noP}, masked.loop.getSegment(), KvOrder::Descending);
    Block *pro = b.createBlock(&prologue.getBody(), {}, {o.i32, o.statsType, o.accType, pType}, {loc, loc, loc, loc});
    Block &from = masked.loop.getBody().front();
    IRMapping map;
    for (unsigned arg = 0; arg < 3; ++arg) // the tile index, the row statistics, the accumulator
      map.map(from.getArgument(arg), pro->getArgument(arg));
    OpBuilder pb(pro, pro->end());
    PvOp pv = cast<PvOp>(*masked.v->user_begin());
    for (Operation &op : from.without_terminator())
      if (&op != masked.v.getOperation() && &op != pv.getOperation())
        pb.clone(op, map);
    YieldOp::create(pb, loc,
                    ValueRange{map.lookup(update.getNewStats()), map.lookup(pv.getAcc()), map.lookup(update.getP())});
    OpBuilder ib(pro, pro->begin());
    Value i = ringPosition(ib, loc, o.highest, pro->getArgument(0), o.one);
    readSlot(cast<LoadOp>(map.lookup(masked.k.getResult()).getDefiningOp()), o.ring.kBuffer, o.ring.kFull,
             o.ring.kEmpty, i);
    return prologue;
  }

  /// One segment below the prologue's tile, carrying P: wait K full[i]; S = Q·K(j)ᵀ (async); wait V full[i − 1];
  /// acc += P·V(j + 1) (async); wait S, release K[i]; ... the softmax ...; wait P·V, release V[i − 1]; acc *= alpha;
  /// carry P(j). Returns the loop, rebuilt with the carried P.
  KvLoopOp overlapSegment(const Overlap &o, Body &body, Value carriedP) {
    Location loc = o.loc;
    const Ring &ring = o.ring;
    Value one = o.one;
    KvLoopOp loop = body.loop;
    OpBuilder lb(loop);
    Value upper = arith::MinSIOp::create(lb, loc, loop.getUpper(), o.firstTile);
    Value lower = arith::MinSIOp::create(lb, loc, loop.getLower(), upper);
    loop.getLowerMutable().assign(lower);
    loop.getUpperMutable().assign(upper);
    loop = flashtile::tile::withCarried(loop, ValueRange{carriedP});
    Block &block = loop.getBody().front();
    Value j = loop.getTileIndex(), accArg = loop.getAccArg(), pArg = block.getArguments().back();
    auto qk = cast<QkOp>(*body.k->user_begin());
    auto pv = cast<PvOp>(*body.v->user_begin());
    auto upd = *block.getOps<SoftmaxUpdateOp>().begin();
    auto rescale = *block.getOps<RescaleOp>().begin();
    auto yield = cast<YieldOp>(block.getTerminator());

    OpBuilder bb(&block, block.begin());
    Value i = ringPosition(bb, loc, o.highest, j, one);
    Value iPrev = arith::SubIOp::create(bb, loc, i, one);
    Value jPrev = arith::AddIOp::create(bb, loc, j, one);
    // K(j) and the asynchronous Q·K(j)ᵀ.
    bb.setInsertionPoint(body.k);
    BarrierWaitOp::create(bb, loc, ring.kFull, i);
    body.k.getSlotMutable().assign(SlotOp::create(bb, loc, ring.kBuffer, i).getResult());
    bb.setInsertionPoint(qk);
    auto qkAsync = QkOp::create(bb, loc, qk.getS().getType(), o.token, qk.getQ(), qk.getK());
    qk.getS().replaceAllUsesWith(qkAsync.getS());
    qk.erase();
    // V(j + 1) and the asynchronous P(j + 1)·V(j + 1) into the accumulator the loop received.
    bb.setInsertionPointAfter(qkAsync);
    BarrierWaitOp::create(bb, loc, ring.vFull, iPrev);
    auto vSlot = SlotOp::create(bb, loc, ring.vBuffer, iPrev);
    body.v->moveAfter(vSlot);
    body.v.getIndexMutable().assign(jPrev);
    body.v.getSlotMutable().assign(vSlot.getResult());
    bb.setInsertionPointAfter(body.v);
    auto pvAsync = PvOp::create(bb, loc, o.accType, o.token, pArg, body.v.getResult(), accArg);
    // S is needed now; P·V stays in flight through the softmax, which reads the row statistics only.
    MmaWaitOp::create(bb, loc, ValueRange{qkAsync.getToken()});
    BarrierArriveOp::create(bb, loc, ring.kEmpty, i);
    // The rescale touches acc: after P·V completed.
    bb.setInsertionPoint(rescale);
    MmaWaitOp::create(bb, loc, ValueRange{pvAsync.getToken()});
    BarrierArriveOp::create(bb, loc, ring.vEmpty, iPrev);
    rescale.getAccMutable().assign(pvAsync.getResult());
    bb.setInsertionPoint(yield);
    YieldOp::create(bb, loc, ValueRange{upd.getNewStats(), rescale.getResult(), upd.getP()});
    yield.erase();
    pv.erase();
    return loop;
  }

  /// The epilogue, after `last`: P·V of the lowest tile (V of type `vType`), with the P `last` carried out.
  void overlapEpilogue(const Overlap &o, KvLoopOp last, Value carriedP, Type vType) {
    Location loc = o.loc;
    const Ring &ring = o.ring;
    OpBuilder eb(last->getBlock(), std::next(last->getIterator()));
    Value epilogueEnd = arith::MinSIOp::create(eb, loc, arith::AddIOp::create(eb, loc, o.lowest, o.one), o.highest);
    auto epilogue = KvLoopOp::create(eb, loc, o.lowest, epilogueEnd, last.getStats(), last.getAcc(),
                                     ValueRange{carriedP}, last.getSegment(), KvOrder::Descending);
    last.getStats().replaceAllUsesExcept(epilogue.getStats(), epilogue);
    last.getAcc().replaceAllUsesExcept(epilogue.getAcc(), epilogue);
    Block *epi =
        eb.createBlock(&epilogue.getBody(), {}, {o.i32, o.statsType, o.accType, o.pType}, {loc, loc, loc, loc});
    OpBuilder xb(epi, epi->end());
    Value i = ringPosition(xb, loc, o.highest, epi->getArgument(0), o.one);
    BarrierWaitOp::create(xb, loc, ring.vFull, i);
    Value slot = SlotOp::create(xb, loc, ring.vBuffer, i).getResult();
    auto vLoad = LoadOp::create(xb, loc, vType, Operand::V, epi->getArgument(0), slot, Value());
    auto pvAsync = PvOp::create(xb, loc, o.accType, o.token, epilogue.getCarriedArgs().front(), vLoad.getResult(),
                                epilogue.getAccArg());
    MmaWaitOp::create(xb, loc, ValueRange{pvAsync.getToken()});
    BarrierArriveOp::create(xb, loc, ring.vEmpty, i);
    YieldOp::create(xb, loc,
                    ValueRange{epilogue.getStatsArg(), pvAsync.getResult(), epilogue.getCarriedArgs().front()});
  }

  /// i = highest − 1 − j: the ring position of tile j in the descending walk from `highest` (persistent: plus the
  /// position the tile's walk starts at).
  Value ringPosition(OpBuilder &b, Location loc, Value highest, Value j, Value one) {
    Value last = arith::SubIOp::create(b, loc, highest, one);
    Value i = arith::SubIOp::create(b, loc, last, j);
    return ringBase ? arith::AddIOp::create(b, loc, ringBase, i).getResult() : i;
  }

  /// Makes `load` read position i's slot after its full barrier; its one user, the GEMM that reads it, becomes
  /// asynchronous (wgmma), and the slot is released once that GEMM completed.
  static void readSlot(LoadOp load, Value buffer, Value full, Value empty, Value i) {
    OpBuilder b(load);
    Location loc = load.getLoc();
    BarrierWaitOp::create(b, loc, full, i);
    load.getSlotMutable().assign(SlotOp::create(b, loc, buffer, i).getResult());
    Operation *gemm = *load->user_begin();
    b.setInsertionPoint(gemm);
    Type token = TokenType::get(b.getContext());
    Value done;
    if (auto qk = dyn_cast<QkOp>(gemm)) {
      auto async = QkOp::create(b, loc, qk.getS().getType(), token, qk.getQ(), qk.getK());
      qk.getS().replaceAllUsesWith(async.getS());
      done = async.getToken();
    } else {
      auto pv = cast<PvOp>(gemm);
      auto async = PvOp::create(b, loc, pv.getResult().getType(), token, pv.getP(), pv.getV(), pv.getAcc());
      pv.getResult().replaceAllUsesWith(async.getResult());
      done = async.getToken();
    }
    gemm->erase(); // before placing the builder: the op after the new GEMM is the old one
    b.setInsertionPointAfter(done.getDefiningOp());
    MmaWaitOp::create(b, loc, ValueRange{done});
    BarrierArriveOp::create(b, loc, empty, i);
  }
};

} // namespace

std::unique_ptr<Pass> createTileRolePipeline(RoleRegisters registers, ConsumerOrder order) {
  return std::make_unique<TileRolePipeline>(registers, order);
}

void registerTileRolePipeline() {
  mlir::registerPass([] { return createTileRolePipeline(); });
}

} // namespace flashtile::tile
