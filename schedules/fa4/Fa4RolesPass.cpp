//===- Fa4RolesPass.cpp - tile-fa4-roles: FA4's own warp roles -------------===//
//
// FlashAttention-4's orchestration written with the memory layer (passes/IR/TileMemoryOps.td). After
// tile-split-boundary the program is the KV-range rules and bounds, Q's load, the K/V loop segments (descending,
// tiles [lowest, highest)), the finalize and the stores. This pass makes it, for G Q tiles of 128 rows a block (the
// schedule's softmax warpgroups), n = highest - 1 - j the walk's step and i its ring position:
//
//   tensor memory: S_g at column g·blockN, P_g over it (16-bit, half the columns), O_g after every S
//   shared memory: Q (1 slot), K and V (`stages` slots) with full/empty barriers; alpha_g (a row's rescale factor)
//     and final_g (m, l at the end); registers: stats_g (the softmax role's m and l between its segments)
//   channels: tmem (allocated / the softmax roles and the correction done), s_g (full: Q·Kᵀ landed, a commit; empty: P written over S),
//     o_g (full: P·V landed, a commit; empty: O rescaled), alpha_g (full: written; empty: read), final_g (full:
//     the last P·V landed, the last rescale done and the final m, l written)
//   "load" (1 warp): Q, then K and V of every tile into ring slots (as fa3's producer)
//   "mma" (1 warp; one thread issues every tcgen05.mma of both Q tiles): allocates tensor memory; per tile,
//     Q_g·Kᵀ into S_g for every g once P·V of the previous tile landed (o_g full), committed to s_g; K's slot
//     released by a commit; then P_g·V into O_g once P_g is written (s_g empty) and O_g rescaled (o_g empty),
//     committed to o_g; V's slot released by a commit. At the end a commit on every final_g; frees tensor memory once
//     every user is done (tmem empty)
//   "softmax<g>" (a warpgroup each): per tile, S_g once landed, the program's score_mod, mask and online softmax,
//     alpha into alpha_g, P over S_g; m and l into final_g at the end
//   "correction" (a warpgroup): zeroes every O_g (tile.init_acc); per tile and g, reads alpha_g and, once the
//     previous P·V landed, rescales O_g in tensor memory (the softmax's rescale threshold makes alpha 1 where the
//     max did not move: a target skips those rows' rescale), then releases O_g to the MMA warp; at the end, FA4's
//     correction epilogue: once final_g is full, O_g / l and the LSE of each tile's rows, stored (tile.q_rows on
//     the stores). A warp reaches a quarter of tensor memory's lanes, so the 128 rows of O_g are a warpgroup's to
//     read: FA4's epilogue warp only issues the TMA store of what the correction wrote to shared memory
//
// The protocol is checked by the interpreter (interpreter/MemoryProtocol.h), which is stricter than the hardware
// may be: an MMA writing S waits for the P·V that reads P over S to land (o_g full) even though both come from one
// thread. So Q·K(j+1)ᵀ of a Q tile runs under the other tile's softmax, not its own.
//
// Under `tile.cta_pair` (fa4's two-cta = 1, passes/IR/TileCtaPair.h) the IR is the same, one CTA's: each CTA of the
// pair runs it, and the printer makes the first CTA's MMA warp issue each MMA for both (cta_group::2) while the
// second's only allocates and frees. The channels s_g and o_g are marked `tile.pair_empty`: their empty barriers,
// which that MMA warp waits on, count both CTAs' arrivals. No SM100 GPU exists here: the
// sm100 family prints this IR (codegen/sm100/README.md), NVRTC compiles it for sm_100a, nothing has run it.
//===----------------------------------------------------------------------===//
#include "schedules/fa4/Fa4Roles.h"

#include "passes/IR/TileCtaPair.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileMemory.h"
#include "passes/Transforms/KvRing.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"

#include <bit>

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::fa4 {
namespace {

/// Rows of a Q tile: one tcgen05.mma M, one softmax warpgroup, TMEM's lanes.
constexpr int64_t kTileRows = 128;
constexpr int64_t kMinTmemColumns = 32;

struct Fa4RolesPass : PassWrapper<Fa4RolesPass, OperationPass<FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(Fa4RolesPass)
  StringRef getArgument() const override { return "tile-fa4-roles"; }
  StringRef getName() const override { return "Fa4Roles"; }
  StringRef getDescription() const override {
    return "FA4's roles on the memory layer: a load warp, one MMA warp issuing every tcgen05.mma, a softmax "
           "warpgroup per Q tile, a correction warpgroup rescaling O in tensor memory and storing each Q tile's O / l";
  }
  void getDependentDialects(DialectRegistry &registry) const override { registry.insert<arith::ArithDialect>(); }

  /// Per Q tile: its buffers and channels.
  struct Tile {
    Value s, p, o, alpha, stats, final;
    Value sFull, sEmpty, oFull, oEmpty, alphaFull, alphaEmpty, finalFull;
  };

  void runOnOperation() override;
};

/// A descending walk over [lo, hi) at `b`; `body` fills it given the tile index and the step n = highest - 1 - j.
void walk(OpBuilder &b, Location loc, Value lo, Value hi, Value highest,
          llvm::function_ref<void(OpBuilder &, Value j, Value n)> body) {
  auto w = KvWalkOp::create(b, loc, lo, hi, KvOrder::Descending);
  Block *block = new Block();
  w.getBody().push_back(block);
  Value j = block->addArgument(b.getI32Type(), loc);
  OpBuilder wb(block, block->end());
  Value one = arith::ConstantIntOp::create(wb, loc, 1, 32);
  Value n = arith::SubIOp::create(wb, loc, arith::SubIOp::create(wb, loc, highest, one), j);
  body(wb, j, n);
  YieldOp::create(wb, loc);
}

Value constant(OpBuilder &b, Location loc, int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 32); }

/// What the roles share once the buffers, tensor memory and channels exist: runOnOperation makes it, then builds each
/// role's ops into its region.
struct RoleBuilder {
  FuncOp func;
  Location loc;
  MLIRContext *ctx;
  SmallVector<KvLoopOp> loops;
  Value highest, lowest;
  LoadOp loadQ;
  FinalizeOp finalize;
  RankedTensorType kTile, vTile, sType, oType, rowType;
  StatsType statsType;
  int64_t groups, blockM, headDimV;
  KvRing ring;
  Value tmem, tmemFull, tmemEmpty;
  SmallVector<Fa4RolesPass::Tile> tiles;

  using Tile = Fa4RolesPass::Tile;
  static OpBuilder at(RoleOp role) { return OpBuilder(role.getBody().front().getTerminator()); }
  void buildLoad(RoleOp load);
  void buildMma(RoleOp mma);
  LogicalResult buildSoftmax(int64_t g, RoleOp role);
  void buildCorrection(RoleOp correction);
};

// Load: Q, then K and V of every tile (ring position n: slot n mod stages).
void RoleBuilder::buildLoad(RoleOp load) {
  OpBuilder lb = at(load);
  Value zero = constant(lb, loc, 0);
  Value qSlot = SlotOp::create(lb, loc, ring.qBuffer, Value()).getResult();
  CopyAsyncOp::create(lb, loc, Operand::Q, Value(), qSlot, ring.qFull, zero, Value());
  walk(lb, loc, lowest, highest, highest,
       [&](OpBuilder &wb, Value j, Value n) { copyKvTile(wb, loc, ring, j, n); });
}

// MMA: one thread issues every GEMM of both Q tiles.
void RoleBuilder::buildMma(RoleOp mma) {
  OpBuilder mb = at(mma);
  Value zero = constant(mb, loc, 0), one = constant(mb, loc, 1);
  TmemAllocOp::create(mb, loc, tmem);
  BarrierArriveOp::create(mb, loc, tmemFull, zero);
  BarrierWaitOp::create(mb, loc, ring.qFull, zero);
  Value qSlot = SlotOp::create(mb, loc, ring.qBuffer, Value()).getResult();
  Value q = LoadOp::create(mb, loc, loadQ.getType(), Operand::Q, Value(), qSlot, Value()).getResult();
  walk(mb, loc, lowest, highest, highest, [&](OpBuilder &wb, Value j, Value n) {
    Value previous = arith::SubIOp::create(wb, loc, n, one);
    Value next = arith::AddIOp::create(wb, loc, n, one);
    BarrierWaitOp::create(wb, loc, ring.kFull, n);
    Value kSlot = SlotOp::create(wb, loc, ring.kBuffer, n).getResult();
    Value k = LoadOp::create(wb, loc, kTile, Operand::K, j, kSlot, Value()).getResult();
    for (int64_t g = 0; g < groups; ++g) {
      // S_g (and P_g over it) is free once the previous P·V of this tile landed.
      BarrierWaitOp::create(wb, loc, tiles[g].oFull, previous);
      MmaQkOp::create(wb, loc, q, k, tiles[g].s, wb.getI64IntegerAttr(g * kTileRows));
      MmaCommitOp::create(wb, loc, tiles[g].sFull, n);
    }
    MmaCommitOp::create(wb, loc, ring.kEmpty, n);
    BarrierWaitOp::create(wb, loc, ring.vFull, n);
    Value vSlot = SlotOp::create(wb, loc, ring.vBuffer, n).getResult();
    Value v = LoadOp::create(wb, loc, vTile, Operand::V, j, vSlot, Value()).getResult();
    for (int64_t g = 0; g < groups; ++g) {
      BarrierWaitOp::create(wb, loc, tiles[g].sEmpty, next);  // P_g written over S_g
      BarrierWaitOp::create(wb, loc, tiles[g].oEmpty, next);  // O_g rescaled
      MmaPvOp::create(wb, loc, tiles[g].p, v, tiles[g].o);
      MmaCommitOp::create(wb, loc, tiles[g].oFull, n);
    }
    MmaCommitOp::create(wb, loc, ring.vEmpty, n);
  });
  for (int64_t g = 0; g < groups; ++g)
    MmaCommitOp::create(mb, loc, tiles[g].finalFull, zero);
  BarrierWaitOp::create(mb, loc, tmemEmpty, one);
  TmemFreeOp::create(mb, loc, tmem);
}

// Softmax g: each segment's math on S_g, m and l in a registers buffer between segments.
LogicalResult RoleBuilder::buildSoftmax(int64_t g, RoleOp role) {
  const Tile &t = tiles[g];
  OpBuilder sb = at(role);
  Value zero = constant(sb, loc, 0);
  BarrierWaitOp::create(sb, loc, tmemFull, zero);
  Value empty = InitStatsOp::create(sb, loc, statsType).getResult();
  MemStoreOp::create(sb, loc, empty, t.stats);
  for (KvLoopOp loop : loops) {
    bool ok = true;
    walk(sb, loc, loop.getLower(), loop.getUpper(), highest, [&](OpBuilder &wb, Value j, Value n) {
      BarrierWaitOp::create(wb, loc, t.sFull, n);
      Value s = MemLoadOp::create(wb, loc, sType, t.s).getResult();
      Value stats = MemLoadOp::create(wb, loc, statsType, t.stats).getResult();
      IRMapping map;
      map.map(loop.getTileIndex(), j);
      map.map(loop.getStatsArg(), stats);
      for (Operation &op : loop.getBody().front()) {
        if (isa<LoadOp, RescaleOp, PvOp, YieldOp>(op))
          continue;
        if (auto qk = dyn_cast<QkOp>(op)) {
          map.map(qk.getS(), s);
          continue;
        }
        Operation *copy = wb.clone(op, map);
        // Scores of 128 rows, not the block's.
        for (Value result : copy->getResults())
          if (auto type = dyn_cast<RankedTensorType>(result.getType()); type && type.getRank() >= 1 &&
                                                                        type.getDimSize(0) == blockM)
            result.setType(type.clone([&] {
              SmallVector<int64_t> shape(type.getShape());
              shape[0] = kTileRows;
              return shape;
            }()));
          else if (isa<StatsType>(result.getType()))
            result.setType(statsType);
        if (auto update = dyn_cast<SoftmaxUpdateOp>(copy)) {
          MemStoreOp::create(wb, loc, update.getNewStats(), t.stats);
          BarrierWaitOp::create(wb, loc, t.alphaEmpty, n);
          MemStoreOp::create(wb, loc, update.getAlpha(), t.alpha);
          BarrierArriveOp::create(wb, loc, t.alphaFull, n);
          MemStoreOp::create(wb, loc, update.getP(), t.p);
          BarrierArriveOp::create(wb, loc, t.sEmpty, n);
        }
      }
      ok &= llvm::any_of(loop.getBody().front(), [](Operation &op) { return isa<SoftmaxUpdateOp>(op); });
    });
    if (!ok) {
      return loop.emitOpError() << "fa4 roles: a K/V segment without tile.softmax_update";
    }
  }
  Value last = MemLoadOp::create(sb, loc, statsType, t.stats).getResult();
  MemStoreOp::create(sb, loc, last, t.final);
  BarrierArriveOp::create(sb, loc, t.finalFull, zero);
  BarrierArriveOp::create(sb, loc, tmemEmpty, zero);
  return success();
}

// Correction: O_g zeroed, then rescaled by every tile's alpha_g once the previous P·V landed.
void RoleBuilder::buildCorrection(RoleOp correction) {
  OpBuilder cb = at(correction);
  Value zero = constant(cb, loc, 0), one = constant(cb, loc, 1);
  auto accType = AccType::get(ctx, kTileRows, headDimV, MemorySpace::Tensor);
  BarrierWaitOp::create(cb, loc, tmemFull, zero);
  for (const Tile &t : tiles)
    MemStoreOp::create(cb, loc, InitAccOp::create(cb, loc, accType).getResult(), t.o);
  walk(cb, loc, lowest, highest, highest, [&](OpBuilder &wb, Value, Value n) {
    Value previous = arith::SubIOp::create(wb, loc, n, one);
    for (const Tile &t : tiles) {
      BarrierWaitOp::create(wb, loc, t.alphaFull, n);
      Value alpha = MemLoadOp::create(wb, loc, rowType, t.alpha).getResult();
      BarrierArriveOp::create(wb, loc, t.alphaEmpty, n);
      BarrierWaitOp::create(wb, loc, t.oFull, previous);
      Value o = MemLoadOp::create(wb, loc, accType, t.o).getResult();
      Value scaled = RescaleOp::create(wb, loc, accType, o, alpha).getResult();
      MemStoreOp::create(wb, loc, scaled, t.o);
      BarrierArriveOp::create(wb, loc, t.oEmpty, n);
    }
  });
  for (const Tile &t : tiles)
    BarrierArriveOp::create(cb, loc, t.finalFull, zero);

  // The epilogue of each Q tile (FA4's correction epilogue): once final_g is full (m and l, the last P·V, the
  // last rescale), O_g / l and the LSE of the tile's rows, stored (tile.q_rows on the stores: which rows).
  for (int64_t g = 0; g < groups; ++g) {
    const Tile &t = tiles[g];
    BarrierWaitOp::create(cb, loc, t.finalFull, zero);
    Value stats = MemLoadOp::create(cb, loc, statsType, t.final).getResult();
    Value o = MemLoadOp::create(cb, loc, accType, t.o).getResult();
    auto fin = FinalizeOp::create(cb, loc, oType, rowType, stats, o);
    if (finalize.hasSink()) {
      IRMapping map;
      finalize.getSink().cloneInto(&fin.getSink(), map);
    }
    for (StoreOp store : func.getBody().getOps<StoreOp>()) {
      auto copy = StoreOp::create(cb, loc, store.getOperand(),
                                  store.getOperand() == Output::O ? fin.getO() : fin.getLse(), Value());
      copy->setAttr(kRoleQueryRowsAttr, cb.getDenseI64ArrayAttr({g * kTileRows, kTileRows}));
    }
  }
  BarrierArriveOp::create(cb, loc, tmemEmpty, zero);
}

void Fa4RolesPass::runOnOperation() {
  FuncOp func = getOperation();
  FailureOr<SplitProgram> program = splitProgram(func, getArgument());
  if (failed(program))
    return signalPassFailure();
  ScheduleAttr schedule = program->schedule;
  SmallVector<KvLoopOp> loops = program->loops;
  auto finalizes = llvm::to_vector(func.getBody().getOps<FinalizeOp>());
  if (finalizes.size() != 1) {
    func.emitOpError() << "fa4 roles: needs one finalize at top level";
    return signalPassFailure();
  }
  const int64_t blockM = schedule.getBlockM(), blockN = schedule.getBlockN(), headDimV = func.getHeadDimV();
  if (blockM % kTileRows != 0 || blockM / kTileRows < 1 || blockM / kTileRows > 2) {
    func.emitOpError() << "fa4 roles: block-m " << blockM << " is not one or two Q tiles of " << kTileRows << " rows";
    return signalPassFailure();
  }
  const int64_t groups = blockM / kTileRows;
  const int64_t tmemColumns =
      std::max<int64_t>(kMinTmemColumns, static_cast<int64_t>(std::bit_ceil(
                                             static_cast<uint64_t>(groups * (blockN + headDimV)))));
  if (tmemColumns > 512) {
    func.emitOpError() << "fa4 roles: " << groups << " Q tile(s) x (block-n " << blockN << " + head_dim_v "
                       << headDimV << ") columns exceed tensor memory's 512";
    return signalPassFailure();
  }
  Value highest = loops.front().getUpper(), lowest = loops.back().getLower();
  LoadOp loadQ = program->loadQ;
  FinalizeOp finalize = finalizes.front();
  Location loc = loadQ.getLoc();
  MLIRContext *ctx = &getContext();
  Type dtype = loadQ.getType().getElementType();
  RankedTensorType kTile, vTile;
  for (LoadOp load : loops.front().getBody().front().getOps<LoadOp>())
    (load.getOperand() == Operand::K ? kTile : vTile) = load.getType();
  if (!kTile || !vTile) {
    loops.front().emitOpError() << "must load K and V";
    return signalPassFailure();
  }

  // ---- Buffers, tensor memory, channels (before the roles).
  Block &top = func.getBody().front();
  OpBuilder b(&top, top.begin());
  Type oneSlot = BarrierType::get(ctx, 1);
  const KvRing ring = createKvRing(b, loc, loadQ.getType(), kTile, vTile, schedule.getStages());

  Value tmem = TmemOp::create(b, loc, TmemType::get(ctx, tmemColumns)).getResult();
  auto tmemBuffer = [&](RankedTensorType tile, int64_t column) {
    return TmemBufferOp::create(b, loc, MemBufType::get(ctx, tile, MemorySpace::Tensor), tmem,
                                b.getI64IntegerAttr(column))
        .getResult();
  };
  auto smemBuffer = [&](Type tile, MemorySpace space, std::string name) {
    return SmemBufferOp::create(b, loc, MemBufType::get(ctx, tile, space), name).getResult();
  };
  // A cluster pair (two-cta): the MMA warp of the pair's first CTA issues the MMAs of both, so the channels whose
  // empty barrier it waits on for the threads' work (P written: s_g; O rescaled: o_g) count both CTAs' arrivals.
  const bool ctaPair = func->hasAttr(kCtaPairAttr);
  auto channel = [&](std::string name, ValueRange guarded, int64_t full, int64_t empty, bool pairEmpty = false) {
    auto op = ChannelOp::create(b, loc, oneSlot, oneSlot, b.getStringAttr(name), guarded, b.getI64IntegerAttr(full),
                                b.getI64IntegerAttr(empty));
    if (ctaPair && pairEmpty)
      op->setAttr(kPairEmptyAttr, b.getUnitAttr());
    return std::pair{op.getFull(), op.getEmpty()};
  };
  auto f32 = b.getF32Type();
  auto sType = RankedTensorType::get({kTileRows, blockN}, f32);
  auto pType = RankedTensorType::get({kTileRows, blockN}, dtype);
  auto oType = RankedTensorType::get({kTileRows, headDimV}, f32);
  auto rowType = RankedTensorType::get({kTileRows}, f32);
  auto statsType = StatsType::get(ctx, kTileRows);
  // Every role but the load and MMA warps touches tensor memory: the softmax roles and the correction.
  auto [tmemFull, tmemEmpty] = channel("tmem", {}, 1, groups + 1);
  SmallVector<Tile> tiles(groups);
  for (int64_t g = 0; g < groups; ++g) {
    Tile &t = tiles[g];
    std::string suffix = std::to_string(g);
    t.s = tmemBuffer(sType, g * blockN);
    t.p = tmemBuffer(pType, g * blockN);
    t.o = tmemBuffer(oType, groups * blockN + g * headDimV);
    t.alpha = smemBuffer(rowType, MemorySpace::Shared, "alpha" + suffix);
    t.stats = smemBuffer(statsType, MemorySpace::Registers, "stats" + suffix);
    t.final = smemBuffer(statsType, MemorySpace::Shared, "final" + suffix);
    std::tie(t.sFull, t.sEmpty) = channel("s" + suffix, {t.s, t.p}, 1, 1, /*pairEmpty=*/true);
    std::tie(t.oFull, t.oEmpty) = channel("o" + suffix, {t.o}, 1, 1, /*pairEmpty=*/true);
    std::tie(t.alphaFull, t.alphaEmpty) = channel("alpha" + suffix, {t.alpha}, 1, 1);
    // The softmax role's m and l, the MMA warp's commit after the last P·V, the correction's last rescale (or its
    // zeros, when the walk is empty).
    t.finalFull = channel("final" + suffix, {t.final, t.o}, 3, 1).first;
  }

  // ---- The roles, after everything else at the top (rules, bounds).
  b.setInsertionPointToEnd(&top);
  // FA4's register budgets: 192 a softmax thread, 80 a correction thread, 48 the one-warp roles' (their warpgroup's
  // 128 threads: 8 x 192 + 4 x 80 + 4 x 48 warps' worth is the register file with two Q tiles).
  RoleOp load = makeRole(b, loc, "load", 1, 48);
  RoleOp mma = makeRole(b, loc, "mma", 1, 48);
  SmallVector<RoleOp> softmax;
  for (int64_t g = 0; g < groups; ++g)
    softmax.push_back(makeRole(b, loc, "softmax" + std::to_string(g), 4, 192));
  RoleOp correction = makeRole(b, loc, "correction", 4, 80);

  RoleBuilder roles{func, loc, ctx, loops, highest, lowest, loadQ, finalize, kTile, vTile, sType, oType, rowType,
                    statsType, groups, blockM, headDimV, ring, tmem, tmemFull, tmemEmpty, tiles};
  roles.buildLoad(load);
  roles.buildMma(mma);
  for (int64_t g = 0; g < groups; ++g)
    if (failed(roles.buildSoftmax(g, softmax[g])))
      return signalPassFailure();
  roles.buildCorrection(correction);

  // The program's own state, Q load, loops, finalize and stores are now the roles'.
  SmallVector<Operation *> dead;
  for (Operation &op : top)
    if (isa<StoreOp, FinalizeOp, KvLoopOp, InitStateOp, LoadOp>(op))
      dead.push_back(&op);
  for (Operation *op : llvm::reverse(dead))
    op->erase();
}

} // namespace

std::unique_ptr<Pass> createRolesPass() { return std::make_unique<Fa4RolesPass>(); }

} // namespace flashtile::fa4
