//===- Fa3Schedule.cpp - the FA3 schedule as a plug-in --------------------===//
//
// FlashAttention-3 (Shah et al., 2024) registered with the schedule registry: warp specialization (a producer
// warpgroup moves K/V tiles through a ring of shared-memory slots, consumer warpgroups compute), full/empty barrier
// pairs per slot, register budgets per role. tile-lower-to-target hands it to the sm90 family (wgmma, TMA,
// mbarriers, setmaxnreg) on sm_90a; other architectures have no fa3 lowering.
//===----------------------------------------------------------------------===//
#include "schedules/fa3/Fa3Pipeline.h"
#include "schedules/fa3/Fa3Register.h"

#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileExp2Poly.h"
#include "passes/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace flashtile::fa3 {
namespace {

using namespace mlir;
using namespace flashtile::tile;

constexpr int kWarpgroupWarps = 4;
/// The backward's rows of a warpgroup (Q-tile rows or K/V-tile keys): a wgmma's m64.
constexpr int64_t kBackwardBlock = 64;
/// The backward's 80-row Q tile at head dim 128 (FA3's non-causal tile there): the key split with S, dP and dQ
/// transposed (the Q tile's rows on wgmma's N, which need not be a multiple of 64).
constexpr int64_t kBackwardRows80 = 80;
/// The backward's computing warpgroups a block by default (and at most).
constexpr int64_t kBackwardWarpgroups = 2;
/// The backward's intra-wg-overlap default.
constexpr int64_t kBackwardOverlap = 1;
/// The forward's rescale-threshold default with dtype e4m3 (configure).
constexpr int64_t kE4m3RescaleThreshold = 8;
/// swap-dkv: the fp32 registers a computing thread gives dKᵀ and dVᵀ (of its 240 under setmaxnreg: S and dP of 48 keys
/// take 24 each, dQ's product of 96 columns 48, the addresses the rest).
constexpr int64_t kSwapKvRegisters = 144;

/// The knob's value, else `fallback`.
int64_t knob(const schedule::Knobs &knobs, const char *name, int64_t fallback) {
  auto it = knobs.find(name);
  return it == knobs.end() ? fallback : it->second;
}

class Fa3Schedule final : public schedule::Schedule {
public:
  std::string_view name() const override { return kName; }
  std::string_view summary() const override {
    return "FlashAttention-3: a producer warpgroup fills a ring of K/V slots with TMA, guarded by full/empty "
           "barriers; consumer warpgroups compute with wgmma (sm_90a only)";
  }
  const std::vector<schedule::OptionSpec> &options() const override {
    static const std::vector<schedule::OptionSpec> specs = {
        {kBlockM, "query rows per thread block (a multiple of 64 per consumer warpgroup)", 64, 256},
        {kBlockN, "keys per K/V tile", 16, 256},
        {kStages, "slots of the K and V rings", 2, 8},
        {kConsumerWarpgroups, "consumer warpgroups (each owns block-m / consumer-warpgroups rows)", 1, 3},
        {kProducerRegs, "registers per producer thread (setmaxnreg)", 24, 256},
        {kConsumerRegs, "registers per consumer thread (setmaxnreg)", 24, 256},
        {kOverlap, "1: P·V of tile j + 1 runs under the softmax of tile j (intra-warpgroup overlap; in the "
                   "backward, a Q tile's GEMMs in flight together, each waited on where first read); 0: each GEMM "
                   "waited on when issued", 0, 1},
        {kPingpong, "1: the consumer warpgroups take turns issuing their GEMMs; 0: they issue freely (default: 1 at "
                    "head dims up to 128 with two or more consumer warpgroups)", 0, 1},
        {kPersistent, "1: about one thread block per SM, each running Q tile after Q tile, loading the next tile "
                      "under the current one; 0: a block a tile (default: 1 at head dims up to 128 where every Q tile "
                      "walks the same keys, and for the short shape class)", 0, 1},
        {kStageO, "1: O leaves through shared memory (the warp's dead Q rows, stmatrix) in 16-byte row stores (a "
                  "persistent block releases Q after it); 0: each thread stores its fragments (default: 1 where a "
                  "block runs one tile, and for persistent blocks above head dim 64)",
         0, 1},
        {kScheduler, "how persistent blocks get their Q tiles: static (a fixed assignment, two tiles a unit, the "
                     "default) or dynamic (one atomic counter per launch, heaviest tiles first; implies persistent "
                     "blocks)", kStaticScheduler, kDynamicScheduler,
         {std::begin(kSchedulerNames), std::end(kSchedulerNames)}},
        {kRescaleThreshold, "0: acc is rescaled every tile (FA3, the default; 8 with dtype e4m3); N: FA4's conditional rescaling, a warp's "
                            "row maxes move (and acc *= alpha runs) only when one grew by more than N (log2 units)",
         0, kMaxRescaleThreshold},
        {kDqWriter, "backward only: 1: each Q tile's dQ terms leave through shared memory and a writer warp of a "
                    "producer warpgroup adds them into the fp32 accumulator (one bulk reduce-add a tile), the "
                    "computing warpgroups taking consumer-regs registers (setmaxnreg); 0: each thread adds its own "
                    "(red.global.add; default: 1 with two consumer warpgroups below head dim 256)",
         0, 1},
        {kLoadWarp, "backward only: 1: a warp of the producer warpgroup loads K, V and each Q tile's Q, dO, LSE "
                    "and D (TMA into a two-stage ring with full and empty barriers), so the computing warpgroups copy "
                    "nothing; 0: the computing threads copy them (cp.async, one tile ahead; default: 1 with two "
                    "consumer warpgroups, or as dq-writer where it is given)",
         0, 1},
        {kSwapSdp, "backward only, where the warpgroups split the keys (head dims 96 and 128): 1: S and dP computed "
                   "transposed (keys on wgmma's M), so that dV's and dK's GEMMs read Pᵀ and dSᵀ from registers and "
                   "only dS is staged in shared memory (FA3's SdP_swapAB); 0: S and dP with query rows on M, P and dS "
                   "staged transposed for dV and dK",
         0, 1},
        {kDqWriterWarps, "backward only, with dq-writer 1 at head dims 96 to 192 (where a Q tile's dQ rows are padded "
                         "in shared memory and added one bulk reduce-add a row): how many warps of the producer "
                         "warpgroup share those adds (the first and the ones after the load warp; default 3 there, "
                         "else 1; deterministic mode adds with the first alone)",
         1, 3},
        {kDqSwizzle, "backward only, with dq-writer 1: 1: dq_accum's rows hold their 16-byte chunks XOR-permuted by the "
                     "row (chunk c of row i at c ^ (i % 8) within its 128 bytes; the postprocess reads them back), so "
                     "that sDq is unpadded, its fragment stores do not conflict and a Q tile is one bulk reduce-add; "
                     "0: sDq's rows padded from head dim 96 and added one at a time (dq-writer-warps) (default: 1 at head dim 64 "
                     "with dq-writer 1, else 0)",
         0, 1},
        {kEarlyDv, "backward only, where the warpgroups split the keys (head dims 96 and 128): 1: dV's GEMM issued as "
                   "soon as P is staged (a warpgroup barrier: its own keys), so that it runs under dS's math; 0: dV's "
                   "and dK's GEMMs issued together after dQ's",
         0, 1},
        {kSwapDkv, "backward only, at head dims 192 and 256: 1: dK and dV accumulated transposed (dVᵀ += dOᵀ·P, "
                   "dKᵀ += Qᵀ·dS: the head dim on wgmma's M, a warpgroup's keys on its N; FA3's dKV_swapAB), so that "
                   "the two warpgroups split the keys of K/V tiles that are not two m64s: 96 keys at 192, 64 at 256 "
                   "(block-n: a multiple of 32); 0: the column split (64-key tiles, each warpgroup all 64 keys of its "
                   "half of the columns) (default: 1 at head dim 192 unless a knob names another layout, else 0)",
         0, 1},
        {kDoBuffers, "backward only, with load-warp 1: 1: dO in one buffer of its own beside the two of Q, released "
                     "once dV's GEMM (its last reader) landed (FA3's Stages_dO = 1), which frees the shared memory the "
                     "dQ writer needs beside 96-key tiles; 2: dO in the Q tiles' ring (default: 1 with swap-dkv below "
                     "head dim 256, else 2)",
         1, 2},
        {kRotatedWalk, "backward only, with load-warp 1: 1: in deterministic mode, a walk over every Q tile (no mask "
                       "bounds it) starts at Q tile floor(n·Q/N) for K/V tile n of N and wraps, a Q tile's dQ turns "
                       "in the order the blocks reach it, where N is at most half the SMs (BackwardPrelude.h); 0: "
                       "every walk ascending, the turns in descending K/V tiles (default: 1 with load-warp 1)",
         0, 1},
        {kLptGroupBlocks, "backward only: 0: each (batch, head) pair's K/V tiles launch together, pair after pair "
                          "(the default); N: the K/V tiles of groups of pairs of at least N blocks launch tile index "
                          "by tile index, so under a causal mask every group's longest walks start first (the "
                          "forward's longest-first order); deterministic calls keep the grid's order",
         0, kMaxLptGroupBlocks},
        {kRingRows, "backward only, with load-warp 1 where the warpgroups split the Q tile's rows (head dim 64): 1: "
                    "each warpgroup's rows of the ring's first Q and dO buffers broadcast once before the walk "
                    "(fewer descriptor moves: bench/NOTES.md v44); 0: added in the loop (the default)",
         0, 1},
        {kDsBuffers, "backward only, with swap-sdp 1 and load-warp 1: 2: dS staged in two buffers, the one of the Q "
                     "tile's ring stage, so that an iteration starts without the computing warps' barrier (FA3's PdS "
                     "stages = 2); 1: one buffer, the barrier first (the default)",
         1, 2},
        {kExp2PolyShare, "FA4's partial software exp2: of every 8 n8 tiles of a score row, how many take their "
                         "exponentials from a cubic on the FMA pipe (sm90::math::exp2Poly3) instead of MUFU; 0: none "
                         "(the default)",
         0, 8},
        {kDqFragments, "backward only, with dq-writer 1 at head dim 128: 1: whole Q tiles of dq_accum in the "
                       "computing threads' fragment order (FA3's dQ accumulator: 16-byte stores into sDq without "
                       "conflicts, one bulk reduce-add a tile, no padded rows; the postprocess reads it back); 0: in "
                       "rows (the default)",
         0, 1},
        {kDkvStaged, "backward only, where a warp holds whole rows of dK and dV (head dims 64, 96 and 128): 1: dK "
                     "and dV leave through shared memory (the K/V tiles' and the ring's buffers, free once the walk is "
                     "over; padded rows), a bulk copy a row (cp.async.bulk) issued by the warp that holds it, FA3's "
                     "epilogue without tensor maps; GQA/MQA keep their fp32 adds (the default at head dims 96 and 128 "
                     "with the key split's 64-row tiles and the load warp); 0: each thread stores its fragments (the "
                     "default elsewhere)",
         0, 1},
        {kDqLastWait, "backward only, with dq-writer 1: the dQ writer's wait once the walk is over: 1: none beyond "
                      "each tile's (its bulk adds have read sDq; the grid's end makes them visible to the next "
                      "kernel, as FA3's writer and CUTLASS's TMA epilogues end); 0: it waits for its last adds to "
                      "complete (the default). Deterministic mode's turns wait for every add either way",
         0, 1},
        {kDqAddV4, "backward only, where the computing warps add dQ themselves (dq-writer 0: head dim 256 by default): "
                   "1: the two lanes of a fragment pair swap halves (two shuffles an n8 tile), so that each lane adds "
                   "four consecutive floats of one row (red.global.add.v4: half the global reductions' instructions); "
                   "0: each lane adds its pairs (red.global.add.v2, the default)",
         0, 1},
        {kLateV, "backward only, with load-warp 1: 1: the load warp brings V after the walk's first Q and dO tiles, on "
                 "a barrier of its own that the computing warps wait for before their first dP GEMM, so that the first "
                 "S GEMM waits for K, Q and dO only (a block's start); 0: K and V first, on one barrier waited for "
                 "before the walk (the default)",
         0, 1},
        {kDqSlices, "backward only, under the column split at head dim 256 (each warpgroup 128 of dQ's columns): 2: "
                    "dQ's product in two slices of 64 columns a warpgroup, each added before the next is issued "
                    "(FA3's sliced dQ at 256: half dQ's accumulator registers); 1: one product of the warpgroup's 128 "
                    "columns (the default)",
         1, 2},
        {kDescAdvance, "forward only: 1: each GEMM's wgmma descriptors made once and advanced by one 64-bit add a "
                       "k16 step (FA4's form; fewer uniform moves: bench/NOTES.md v46); 0: encoded from each step's "
                       "address (the default)",
         0, 1},
        {kMaxChains, "forward only: the softmax's row maxima over a K/V tile in this many independent chains (n8 "
                     "tiles nt % chains), combined at the end: 1 (the default) is one chain a row, as many dependent "
                     "max steps as the tile has n8 tiles; 2 or 4 cut the steps before the exponentials can start",
         1, 4},
        {kLaneVote, "forward only, with conditional rescaling (rescale-threshold > 0: e4m3's default): 1: a warp "
                    "votes whether its maxes move from each lane's own max over its keys (a row's max passes m + "
                    "threshold exactly when one of its lanes' does), so the quad's shuffles run only in a warp whose "
                    "maxes moved and the exponentials wait for the vote alone; 0: from the rows' quad maxima (the "
                    "default)",
         0, 1},
        {kLatePvWait, "forward only: 1: in the loops without a mask (interior segments), before each wait for P·V, "
                      "a branch the compiler must keep (a trap on seqlen_k < 0, never taken) ends the block of the "
                      "softmax's exponentials, so that ptxas cannot hoist the wait above them and the softmax of tile "
                      "j overlaps P·V(j + 1) as the IR orders it (ptxas placed that wait before all of the e4m3 hd128 "
                      "loop's exponentials and the bf16 loop's; ptxas spills with it in non-persistent kernels, the "
                      "causal default, and above head dim 128: bench/NOTES.md v50); 0: none (the default)",
         0, 1},
    };
    return specs;
  }

  FailureOr<ScheduleAttr> configure(FuncOp func, const schedule::Knobs &knobs, ShapeClass shapeClass) const override {
    if (func.getKind() != kForwardProgram)
      return configureBackward(func, knobs);
    for (const char *backwardKnob :
         {kDqWriter, kLoadWarp, kSwapSdp, kEarlyDv, kDqWriterWarps, kDqSwizzle, kSwapDkv, kDoBuffers, kRotatedWalk,
          kLptGroupBlocks, kRingRows, kDsBuffers, kDqFragments, kDkvStaged, kDqLastWait, kDqAddV4, kLateV,
          kDqSlices})
      if (knobs.count(backwardKnob))
        return func.emitOpError() << "fa3: " << backwardKnob << " shapes the backward's roles only; the forward takes none";
    int64_t headDim = std::max(func.getHeadDim(), func.getHeadDimV());
    // 128 query rows over two consumer warpgroups; keys per tile by head dim (the registers hold S, P and O): 128 at
    // 64, 176 at 128 (measured on the H200, 2026-12-01: +3-5% over 128 at 8k-16k with ping-pong, causal too), 80
    // above. 128 where walks are short or banded: the short class (1-2k rows), and programs whose rules bound keys
    // from below (windows, documents: every tile the band's edges cut is part waste; 176 measured 0.75x / 0.82x
    // of 128 on sliding windows at 8k).
    // At head dim 64, 192 rows over three consumer warpgroups (FA3's hdim-64 tile; measured on the H200: 16k
    // non-causal 426 -> 489 TFLOP/s, causal 424 -> 460, 4k +10% / +3%; 1k causal -6%, so the short class and
    // banded programs keep two). At 96 too, over 96-key tiles (FA4's 192-row tile there; measured on the H100,
    // 2026-12-06, bench/RESULTS.md: 8k non-causal 505 -> 531-593 TFLOP/s, 16k 516-530 -> 559-560, causal within
    // -2% / +7%; 128 keys spill with three warpgroups' 160 registers and ran 0.8x).
    // At head dim 192 (192:192) 112 keys outside the short class and banded programs (FA4's SM90 width there; measured
    // on the H100, 2026-12-07, bench/RESULTS.md: 8k +4-6%, 16k +8-17% against 80, causal too; 2k -5% non-causal, +3%
    // causal). The short class (<= 1k rows, not measured at 112) and banded programs keep 80, as do 192:128 and 256
    // (not measured at other widths).
    bool shortClass = shapeClass == ShapeClass::Short;
    bool banded = llvm::any_of(func.getBody().getOps<KvRangeOp>(), [](KvRangeOp r) { return !r.lowerBoundIs(0); });
    int64_t consumers = knobs.count(kConsumerWarpgroups)
                            ? knobs.at(kConsumerWarpgroups)
                        : knobs.count(kBlockM) && knobs.at(kBlockM) % 64 == 0 && knobs.at(kBlockM) / 64 <= 3
                            ? std::max<int64_t>(1, knobs.at(kBlockM) / 64)
                        : headDim <= 96 && !shortClass && !banded ? 3
                                                                  : 2;
    int64_t blockM = knob(knobs, kBlockM, 64 * consumers);
    // e4m3 (k32 steps of P·V: keys a multiple of 32): an e4m3 P takes half the registers of a bf16 one and the
    // tiles half the shared memory, so tiles hold as many keys or more; the widths are the widest whose kernels ptxas
    // keeps without spills in the K/V loop (SASS, 2026-12-06: 224 keys at head dim 128 spill 15 to 132 words, 160 at
    // 64 spill 40; bench/NOTES.md), validated and timed on the H100 since (bench/RESULTS.md, 2026-12-07).
    const bool e4m3 = isa<Float8E4M3FNType>(func.getDtype());
    int64_t blockN = knob(knobs, kBlockN,
                          e4m3 ? (headDim <= 64                     ? 128
                                  : headDim <= 96 && consumers == 3 ? 96
                                  : headDim <= 128                  ? (shortClass || banded ? 128 : 192)
                                  : headDim <= 192                  ? 160
                                                                    : 128)
                          : headDim <= 64                      ? 128
                          : headDim <= 96 && consumers == 3  ? 96
                          : headDim <= 128                   ? (shortClass || banded ? 128 : 176)
                          : headDim <= 192 && func.getHeadDim() == func.getHeadDimV() && !shortClass && !banded
                              ? 112
                              : 80);
    if (e4m3 && blockN % 32 != 0)
      return func.emitOpError() << "fa3: block-n = " << blockN
                                << " must be a multiple of 32 with dtype e4m3 (the k32 steps of 8-bit P·V)";
    if (e4m3 && knob(knobs, kStageO, 0) == 1)
      return func.emitOpError() << "fa3: stage-o = 1 stages O (bf16) in sQ, which holds half its bytes with dtype "
                                   "e4m3; accepted: stage-o = 0 (or unset)";
    int64_t stages = knob(knobs, kStages, 2);
    if (blockM % (64 * consumers) != 0)
      return func.emitOpError() << "fa3: block-m = " << blockM << " must be a multiple of 64 x consumer-warpgroups ("
                                << 64 * consumers << ")";
    if (blockN % 16 != 0)
      return func.emitOpError() << "fa3: block-n = " << blockN << " must be a multiple of 16";
    RoleRegisters regs = registersFor(knobs, consumers);
    for (auto [name, value] : {std::pair{kProducerRegs, regs.producer}, {kConsumerRegs, regs.consumer}})
      if (value % 8 != 0)
        return func.emitOpError() << "fa3: " << name << " = " << value << " must be a multiple of 8 (setmaxnreg)";
    // 64K registers per SM, at most one FA3 block per SM.
    int64_t total = kWarpgroupWarps * 32 * (regs.producer + consumers * regs.consumer);
    if (total > 65536)
      return func.emitOpError() << "fa3: the roles ask for " << total << " registers (producer-regs "
                                << regs.producer << ", consumer-regs " << regs.consumer << " x " << consumers
                                << " warpgroups of 128 threads); an SM has 65536";
    if (knob(knobs, kScheduler, kStaticScheduler) == kDynamicScheduler && knob(knobs, kPersistent, -1) == 0)
      return func.emitOpError() << "fa3: scheduler = dynamic hands tiles to persistent blocks, but persistent = 0; "
                                   "accepted: scheduler = static with persistent = 0, or persistent = 1 (or unset)";
    int64_t warps = kWarpgroupWarps * (consumers + 1);
    // Split-Q over the consumer role's warps (the producer warpgroup holds no rows): each consumer warpgroup owns
    // blockM / consumers rows, a quarter of them a warp.
    int64_t warpRows = blockM / (kWarpgroupWarps * consumers);
    // The share of software exponentials is the printer's business, not the program's: a func attribute.
    if (int64_t share = knob(knobs, kExp2PolyShare, 0); share > 0)
      func->setAttr(kExp2PolyShareAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), share));
    if (knob(knobs, kDescAdvance, 0) == 1)
      func->setAttr(tile::kDescAdvanceAttr, UnitAttr::get(func.getContext()));
    if (int64_t chains = knob(knobs, kMaxChains, 1); chains != 1) {
      if (chains != 2 && chains != 4)
        return func.emitOpError() << "fa3: max-chains = " << chains << " is not accepted; accepted: 1, 2 or 4";
      if (blockN / 8 < chains)
        return func.emitOpError() << "fa3: max-chains = " << chains << " needs block-n >= " << 8 * chains
                                  << " (a chain an n8 tile at least); block-n = " << blockN;
      func->setAttr(tile::kMaxChainsAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), chains));
    }
    if (knob(knobs, kLaneVote, 0) == 1) {
      if (knob(knobs, kRescaleThreshold, e4m3 ? kE4m3RescaleThreshold : 0) == 0)
        return func.emitOpError() << "fa3: lane-vote = 1 votes on conditional rescaling, which rescale-threshold = 0 "
                                     "turns off; accepted: lane-vote = 1 with rescale-threshold > 0 (e4m3's default "
                                     "is 8), or lane-vote = 0";
      func->setAttr(tile::kLaneVoteAttr, UnitAttr::get(func.getContext()));
    }
    if (knob(knobs, kLatePvWait, 0) == 1)
      func->setAttr(tile::kLatePvWaitAttr, UnitAttr::get(func.getContext()));
    // e4m3: FA4's conditional rescaling (threshold 8, the most an e4m3 P allows: 2^8 < 448) by default. With the GEMMs
    // at twice the bf16 rate the softmax's instructions bound the kernel (ncu at hd128 8k: 462 M warp instructions
    // against bf16's 567 M for 1.33x the speed, issue slots 44% active), and skipping most rescales measured +6-7% at
    // hd128 4k-16k and +0% at hd256 16k on the H100 (2026-12-07, bench/RESULTS.md); bf16 keeps 0 (NOTES v25).
    return ScheduleAttr::get(func.getContext(), kName, blockM, blockN, warps, WarpLayout::SplitQ, warpRows, stages,
                             knob(knobs, kRescaleThreshold, e4m3 ? kE4m3RescaleThreshold : 0),
                             /*minBlocksPerSm=*/0, /*lptGroupBlocks=*/0, shapeClass);
  }

  /// The backward's three programs share one configuration: W computing warpgroups (consumer-warpgroups, 1 or 2) a
  /// block with wgmma, Q, dO, LSE and D brought one Q tile ahead (stages = 2 Q-tile buffers). The layouts, by what
  /// fits a thread's registers (dK and dV in fp32 beside S and dP) and the block's shared memory:
  ///   split-Q     block-m 64·W × block-n 64·W: a warpgroup 64 query rows of S and dP, its 64 keys of dK and dV;
  ///   key split   block-m 64 × block-n 64·W (tile.key_warps = W): a warpgroup 64 keys of S, dP, dK and dV over
  ///               the whole head dim, dQ's columns shared out;
  ///   column split block-m 64 × block-n 64 (tile.key_warps = W): a warpgroup 64 / W keys of S and dP, and all 64
  ///               keys of dK and dV over head_dim / W of their columns (64 + 64 fp32 a thread at head dim 256).
  /// Defaults, two warpgroups: split-Q 128 × 128 at head dim 64, key split 64 × 128 at 96 and 128 (FA3's 128-key K/V
  /// tiles: a block adds each dQ element once per 128 keys; split-Q there would hold 64 + 64 fp32 of S and dP beside
  /// dK and dV, and its buffers pass the shared-memory limit), the column split at 192 and 256 (a warpgroup's 64 keys
  /// over 192 or 256 columns of dK and dV pass the registers). The knobs that shape the forward's roles have no
  /// meaning here and are refused by name.
  FailureOr<ScheduleAttr> configureBackward(FuncOp func, const schedule::Knobs &knobs) const {
    for (const char *roleKnob :
         {kPingpong, kPersistent, kStageO, kScheduler, kRescaleThreshold, kExp2PolyShare, kDescAdvance,
          kMaxChains, kLaneVote, kLatePvWait})
      if (knobs.count(roleKnob))
        return func.emitOpError() << "fa3 backward: the knob " << roleKnob
                                  << " shapes the forward's roles; the backward accepts block-m, block-n, stages, "
                                     "consumer-warpgroups, intra-wg-overlap, dq-writer, dq-writer-warps, dq-swizzle, load-warp, swap-sdp, "
                                     "early-dv, swap-dkv, do-buffers, rotated-walk, lpt-group-blocks, ring-rows, "
                                     "ds-buffers, dq-fragments, dkv-staged, dq-last-wait, dq-add-v4, late-v, dq-slices, "
                                     "producer-regs and consumer-regs";
    for (auto [name, value] : {std::pair{"head_dim", func.getHeadDim()}, {"head_dim_v", func.getHeadDimV()}})
      if (value != 64 && value != 96 && value != 128 && value != 192 && value != 256)
        return refuseBackward(func, name, value, "64, 96, 128, 192 or 256; the fa2 backward serves the others");
    FailureOr<BackwardLayout> layout = backwardLayout(func, knobs);
    if (failed(layout) || failed(configureBackwardRoles(func, knobs, *layout)) ||
        failed(configureBackwardOverlap(func, knobs, *layout)))
      return failure();
    // The main kernel's launch order (lpt-group-blocks, its range checked with the options; measured within the
    // rounds' spread on the H100, bench/NOTES.md v45, so 0 unless named).
    const int64_t lptGroupBlocks = knob(knobs, kLptGroupBlocks, 0);
    return ScheduleAttr::get(func.getContext(), kName, layout->blockM, layout->blockN,
                             kWarpgroupWarps * layout->consumers, WarpLayout::SplitQ, kBackwardBlock / kWarpgroupWarps,
                             layout->stages, /*rescaleThreshold=*/0,
                             /*minBlocksPerSm=*/0, lptGroupBlocks, ShapeClass::Default);
  }

  /// The backward's error for a knob (or head dim) `name` of `value`, with what is `accepted`.
  static InFlightDiagnostic refuseBackward(FuncOp func, const char *name, int64_t value, const std::string &accepted) {
    return func.emitOpError() << "fa3 backward: " << name << " = " << value
                              << " is not supported; accepted: " << accepted;
  }

  /// A backward 0/1 knob (`fallback` when unset) that marks `func` with the unit attribute `attr` when 1; refused by
  /// name, with the values `accepted`, where it is not `allowed`.
  static LogicalResult flagKnob(FuncOp func, const schedule::Knobs &knobs, const char *name, int64_t fallback,
                                bool allowed, const std::string &accepted, StringRef attr) {
    const int64_t value = knob(knobs, name, fallback);
    if (!value)
      return success();
    if (!allowed)
      return refuseBackward(func, name, value, accepted);
    func->setAttr(attr, UnitAttr::get(func.getContext()));
    return success();
  }

  /// The backward's block: its computing warpgroups and tile, and how the warpgroups share it.
  struct BackwardLayout {
    int64_t headDim;   // the larger of head_dim and head_dim_v
    bool wide;         // above head dim 128: the column split
    int64_t consumers; // computing warpgroups
    int64_t blockN, blockM, stages;
    bool keySplit; // the warpgroups split the tile's keys (tile.key_warps)
    bool swapKv;   // dK and dV accumulated transposed (swap-dkv; tile.swap_kv): the key split above head dim 128
  };

  /// The layout (configureBackward's comment), checked against the knobs; the key split is marked on `func`.
  static FailureOr<BackwardLayout> backwardLayout(FuncOp func, const schedule::Knobs &knobs) {
    const int64_t headDim = std::max(func.getHeadDim(), func.getHeadDimV());
    if (const int64_t swapKv = knob(knobs, kSwapDkv, defaultSwapDkv(func, knobs)))
      return swappedKvLayout(func, knobs, swapKv);
    // Above 128 a warpgroup's 64 keys of dK and dV over the whole head dim pass the registers: the column split.
    const bool wide = headDim > 128;
    // A block-n alone names the warpgroups too (one per 64 keys), except where the column split is the layout.
    const int64_t consumers =
        knob(knobs, kConsumerWarpgroups,
             !wide && knobs.count(kBlockN) && knobs.at(kBlockN) % kBackwardBlock == 0 ? knobs.at(kBlockN) / kBackwardBlock
                                                                                        : kBackwardWarpgroups);
    if (consumers < 1 || consumers > kBackwardWarpgroups) {
      // Without consumer-warpgroups the count came from block-n: the error names the knob the caller gave.
      if (!knobs.count(kConsumerWarpgroups))
        return refuseBackward(func, kBlockN, knobs.at(kBlockN),
                              std::to_string(kBackwardBlock) + " or " +
                                  std::to_string(kBackwardBlock * kBackwardWarpgroups) + " (" +
                                  std::to_string(kBackwardBlock) + " keys a computing warpgroup, at most " +
                                  std::to_string(kBackwardWarpgroups) + " warpgroups)");
      return refuseBackward(func, kConsumerWarpgroups, consumers, "1 or 2 (computing warpgroups a block)");
    }
    if (wide && consumers != kBackwardWarpgroups)
      return refuseBackward(func, kConsumerWarpgroups, consumers,
                            std::to_string(kBackwardWarpgroups) + " at head dim " + std::to_string(headDim) +
                                " (dK's and dV's columns split over the warpgroups)");
    const int64_t keys = kBackwardBlock * consumers;
    const int64_t blockN = knob(knobs, kBlockN, wide ? kBackwardBlock : keys);
    const int64_t blockM = knob(knobs, kBlockM, headDim <= 64 ? keys : kBackwardBlock);
    const int64_t stages = knob(knobs, kStages, 2);
    if (wide && (blockN != kBackwardBlock || blockM != kBackwardBlock))
      return blockN != kBackwardBlock
                 ? refuseBackward(func, kBlockN, blockN,
                                  std::to_string(kBackwardBlock) + " at head dim " + std::to_string(headDim) +
                                      " (every warpgroup the tile's m64 keys of dK and dV, its columns)")
                 : refuseBackward(func, kBlockM, blockM,
                                  std::to_string(kBackwardBlock) + " at head dim " + std::to_string(headDim));
    if (!wide && blockN != keys)
      return refuseBackward(func, kBlockN, blockN,
                            std::to_string(keys) + " with " + std::to_string(consumers) +
                                " consumer warpgroup(s) (each warpgroup's m64 keys of dK and dV)");
    const bool rows80 = !wide && consumers > 1 && blockM == kBackwardRows80 && headDim == 128 &&
                        std::min(func.getHeadDim(), func.getHeadDimV()) == 128;
    const bool keySplit = consumers > 1 && (blockM == kBackwardBlock || rows80);
    if (!wide && blockM != keys && !keySplit)
      return refuseBackward(func, kBlockM, blockM,
                            consumers == 1 ? std::string("64 (one warpgroup's m64 rows)")
                                           : std::to_string(keys) + " (split-Q: a warpgroup's m64 query "
                                                                    "rows) or 64 (the warpgroups split the keys), or "
                                                                    "80 at head dim 128 (with swap-sdp 1: S, dP and "
                                                                    "dQ transposed)");
    if (stages != 2)
      return refuseBackward(func, kStages, stages, "2 (Q-tile buffers: each Q tile copied one tile ahead)");
    if (keySplit)
      func->setAttr(kKeyWarpsAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), consumers));
    return BackwardLayout{headDim, wide, consumers, blockN, blockM, stages, keySplit, /*swapKv=*/false};
  }

  /// swap-dkv's default: 1 at head dim 192 (192/192 and 192/128) where no knob names another layout (swap-sdp,
  /// consumer-warpgroups, block-m, block-n, stages) or turns the producer's roles off (load-warp 0, dq-writer 0): there
  /// it runs with one dO buffer and the dQ writer (do-buffers' default), measured on the H100 (bench/NOTES.md v42) at
  /// 1.31-1.42x the column split; at 256 (without the writer) it measured 0.96-0.97x, so 0 there.
  static int64_t defaultSwapDkv(FuncOp func, const schedule::Knobs &knobs) {
    if (std::max(func.getHeadDim(), func.getHeadDimV()) != 192 || func.getHeadDim() % 64 != 0 ||
        func.getHeadDimV() % 64 != 0)
      return 0;
    for (const char *other : {kSwapSdp, kConsumerWarpgroups, kBlockM, kBlockN, kStages})
      if (knobs.count(other))
        return 0;
    for (const char *role : {kLoadWarp, kDqWriter})
      if (knobs.count(role) && knobs.at(role) == 0)
        return 0;
    return 1;
  }

  /// swap-dkv 1 (FA3's dKV_swapAB, its layout at head dim 192): two warpgroups split a K/V tile's keys, each holding
  /// dKᵀ and dVᵀ (the head dim's columns × its keys; wgmma M is the head dim, in m64s) in fp32, and S and dP of its
  /// keys × the Q tile's 64 rows. The keys a warpgroup holds are the most whose dK and dV fit 144 registers a thread
  /// ((head_dim + head_dim_v) × keys / 128), in whole k16 steps: 48 at 192 (96-key tiles, FA3's and FA4's 64 × 96),
  /// 32 at 256.
  static FailureOr<BackwardLayout> swappedKvLayout(FuncOp func, const schedule::Knobs &knobs, int64_t swapKv) {
    const int64_t headDim = std::max(func.getHeadDim(), func.getHeadDimV());
    if (swapKv != 1 || headDim <= 128 || func.getHeadDim() % 64 != 0 || func.getHeadDimV() % 64 != 0)
      return refuseBackward(func, kSwapDkv, swapKv,
                            "0 here; 1 at head dims 192 and 256 (dK's and dV's rows are the head dim's m64s)");
    const int64_t consumers = knob(knobs, kConsumerWarpgroups, kBackwardWarpgroups);
    if (consumers != kBackwardWarpgroups)
      return refuseBackward(func, kConsumerWarpgroups, consumers,
                            std::to_string(kBackwardWarpgroups) + " with swap-dkv 1 (the warpgroups split the keys)");
    if (knob(knobs, kSwapSdp, 0))
      return refuseBackward(func, kSwapSdp, knobs.at(kSwapSdp), "0 with swap-dkv 1");
    const int64_t widths = func.getHeadDim() + func.getHeadDimV();
    const int64_t keys = std::min<int64_t>(kBackwardBlock, kSwapKvRegisters * kWarpgroupWarps * 32 / widths / 16 * 16);
    const int64_t blockN = knob(knobs, kBlockN, keys * consumers);
    if (blockN % (16 * consumers) != 0 || blockN / consumers > keys)
      return refuseBackward(func, kBlockN, blockN,
                            "a multiple of " + std::to_string(16 * consumers) + " up to " +
                                std::to_string(keys * consumers) + " with swap-dkv 1 at head dims " +
                                std::to_string(func.getHeadDim()) + ", " + std::to_string(func.getHeadDimV()) +
                                " (a warpgroup's keys in k16 steps; dK and dV in " +
                                std::to_string(kSwapKvRegisters) + " registers a thread)");
    const int64_t blockM = knob(knobs, kBlockM, kBackwardBlock);
    if (blockM != kBackwardBlock)
      return refuseBackward(func, kBlockM, blockM, std::to_string(kBackwardBlock) + " with swap-dkv 1");
    const int64_t stages = knob(knobs, kStages, 2);
    if (stages != 2)
      return refuseBackward(func, kStages, stages, "2 (Q-tile buffers: each Q tile copied one tile ahead)");
    func->setAttr(kKeyWarpsAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), consumers));
    func->setAttr(kSwapKvAttr, UnitAttr::get(func.getContext()));
    return BackwardLayout{headDim, /*wide=*/false, consumers, blockN, blockM, stages, /*keySplit=*/true,
                          /*swapKv=*/true};
  }

  /// The main program's roles, as attributes of `func`: swap-sdp, dq-writer and load-warp (with the registers
  /// setmaxnreg moves between them), dq-swizzle and dq-writer-warps.
  static LogicalResult configureBackwardRoles(FuncOp func, const schedule::Knobs &knobs, const BackwardLayout &layout) {
    const int64_t consumers = layout.consumers, headDim = layout.headDim;
    // swap-sdp: S and dP transposed (FA3's SdP_swapAB at head dims up to 128): each warpgroup's 64 keys on wgmma's M,
    // the Q tile's rows on N, so that Pᵀ and dSᵀ are the register A operands of dV's and dK's GEMMs.
    // Measured on the H100: 2-11% slower than without at head dims 96 and 128 (64-row Q tiles; bench/NOTES.md v34),
    // level since its spills went (v45), so off by default (block-m 80 needs it).
    // block-m 80 (FA3's tile at head dim 128): its rows on wgmma's N, so S and dP transposed (swap-sdp 1) and dQ
    // transposed (the head dim on M: dQᵀ = Kᵀ·dSᵀ), added by the dQ writer from an unpadded, permuted sDq.
    const bool rows80 = layout.blockM == kBackwardRows80;
    const int64_t swap = knob(knobs, kSwapSdp, rows80 ? 1 : 0);
    if (swap && (!layout.keySplit || layout.wide))
      return refuseBackward(func, kSwapSdp, swap,
                            "0 here; 1 needs the warpgroups to split the keys (two consumer warpgroups, block-m 64 "
                            "or 80, block-n 128: head dims 96 and 128)");
    if (!swap && rows80)
      return refuseBackward(func, kSwapSdp, swap, "1 at block-m 80 (the Q tile's 80 rows on wgmma's N)");
    if (swap)
      func->setAttr(kSwapScoresAttr, UnitAttr::get(func.getContext()));
    // dq-writer: the main program's roles, FA3's: the computing warpgroups leave each Q tile's dQ terms in shared
    // memory, a producer warpgroup's first warp adds them into dq_accum with one bulk reduce-add (and takes the
    // deterministic mode's turns), and setmaxnreg moves the producer's registers to the computing warpgroups. At head
    // dim 256 its buffer (64 rows of 264 floats) does not fit beside the tiles: the computing warps add dQ themselves
    // (FA3's form there).
    // Under swap-dkv it fits beside 96-key tiles with one dO buffer (do-buffers 1: 225 KB at head dim 192), not with
    // two (64 rows of 200 floats beside K, V, two Q and two dO buffers and two staging buffers: 250 KB of 227).
    const int64_t doBuffers = knob(knobs, kDoBuffers, defaultDoBuffers(knobs, layout));
    const int64_t writer =
        knob(knobs, kDqWriter, consumers > 1 && headDim < 256 && (!layout.swapKv || doBuffers == 1) ? 1 : 0);
    // load-warp: a warp of the producer warpgroup loads K, V and each Q tile's rows (TMA), FA3's producer.
    // (Its default follows an explicit dq-writer, so that dq-writer = 0 still names the form before both roles.)
    const int64_t loader = knob(knobs, kLoadWarp, knobs.count(kDqWriter) ? writer : consumers > 1 ? 1 : 0);
    const RoleRegisters regs = registersFor(knobs, consumers);
    if (!writer && !loader && (knobs.count(kProducerRegs) || knobs.count(kConsumerRegs)))
      return func.emitOpError() << "fa3 backward: producer-regs and consumer-regs shape the roles of dq-writer = 1 or "
                                   "load-warp = 1; with both 0 there is no producer warpgroup";
    if (writer || loader) {
      for (auto [name, value] : {std::pair{kProducerRegs, regs.producer}, {kConsumerRegs, regs.consumer}})
        if (value % 8 != 0)
          return refuseBackward(func, name, value, "a multiple of 8 (setmaxnreg)");
      if (int64_t total = kWarpgroupWarps * 32 * (regs.producer + consumers * regs.consumer); total > 65536)
        return func.emitOpError() << "fa3 backward: the roles ask for " << total << " registers (producer-regs "
                                  << regs.producer << ", consumer-regs " << regs.consumer << " x " << consumers
                                  << " warpgroups of 128 threads); an SM has 65536";
      func->setAttr(kRoleRegistersAttr, DenseI32ArrayAttr::get(func.getContext(), {regs.producer, regs.consumer}));
    }
    if (writer)
      func->setAttr(kDqWriterAttr, UnitAttr::get(func.getContext()));
    // dq-writer-warps: from head dim 96 sDq's rows are padded (conflict-free fragment stores) and added a row at a
    // time; one warp issuing 64 bulk reduce-adds a tile kept the computing warps waiting for sDq (Nsight Compute's
    // source counters at hd128 8k: 26% of the warps' stall samples there), so the rows are shared out.
    // dq-swizzle: dq_accum's rows with their 16-byte chunks XOR-permuted by the row, so that sDq needs no padding
    // (its stores spread over the banks by the permutation) and a tile is one contiguous bulk reduce-add.
    // Default at head dim 64, where sDq's rows are not padded (256-byte rows: a warp's fragment stores fell on eight
    // banks): measured 1.03-1.11x the unpermuted buffer on the H100 (bench/NOTES.md v42); padded rows from 96 add a
    // row at a time over three writer warps and measured no gain from it (v39).
    // dq-fragments: whole Q tiles of dq_accum in the computing threads' fragment order (FA3's layout; not yet
    // measured): 16-byte fragment stores into an unpadded sDq, one bulk reduce-add a tile. Where the warpgroups split
    // the keys at head dim 128 (block-m 64 or 80), whose threads keep every fragment of their dQ product.
    const int64_t fragments = knob(knobs, kDqFragments, 0);
    if (fragments && (!writer || headDim != 128 || !layout.keySplit || layout.wide))
      return refuseBackward(func, kDqFragments, fragments,
                            "0 here; 1 needs dq-writer 1 at head dim 128 with the warpgroups splitting the keys "
                            "(block-m 64 or 80)");
    if (fragments)
      func->setAttr(kDqFragmentsAttr, UnitAttr::get(func.getContext()));
    const int64_t swizzle = knob(knobs, kDqSwizzle, writer && (headDim == 64 || (rows80 && !fragments)) ? 1 : 0);
    if (swizzle && fragments)
      return refuseBackward(func, kDqSwizzle, swizzle, "0 with dq-fragments 1 (both order dq_accum; one at a time)");
    if (swizzle && !writer)
      return refuseBackward(func, kDqSwizzle, swizzle,
                            "0 here; 1 needs dq-writer 1 (the computing warps' red.global.add writes "
                            "dq_accum's rows in order)");
    // At block-m 80 a thread's dQᵀ fragments are single floats of 4 rows a quad: the permuted columns spread a
    // warp's stores over the 32 banks of an unpadded sDq (padded rows would conflict two ways), and the 80-row tile's
    // unpadded sDq is what leaves room for ds-buffers 2.
    if (rows80 && (!writer || (!swizzle && !fragments)))
      return refuseBackward(func, writer ? kDqSwizzle : kDqWriter, 0,
                            "1 at block-m 80 (dQᵀ's fragments go through the dQ writer's unpadded, permuted sDq), or "
                            "dq-fragments 1");
    if (swizzle)
      func->setAttr(kDqSwizzleAttr, UnitAttr::get(func.getContext()));
    const bool paddedRows = !swizzle && !fragments && headDim >= 96 && headDim < 256;
    const int64_t writerWarps = knob(knobs, kDqWriterWarps, writer && paddedRows ? 3 : 1);
    if (writerWarps > 1 && (!writer || !paddedRows))
      return refuseBackward(func, kDqWriterWarps, writerWarps,
                            "1 here; 2 or 3 need dq-writer 1 at head dims 96 to 192 without dq-swizzle (one bulk "
                            "reduce-add a padded row)");
    if (writerWarps > 1)
      func->setAttr(kDqWriterWarpsAttr, IntegerAttr::get(IntegerType::get(func.getContext(), 32), writerWarps));
    if (loader)
      func->setAttr(kLoadWarpAttr, UnitAttr::get(func.getContext()));
    if (doBuffers == 1 && !loader)
      return refuseBackward(func, kDoBuffers, doBuffers,
                            "2 here; 1 needs load-warp 1 (its own dO buffer and barriers are the load warp's)");
    if (doBuffers == 1)
      func->setAttr(kSingleDoAttr, UnitAttr::get(func.getContext()));
    // Measured on the H100 (bench/NOTES.md v42): deterministic mode 0.69 -> 0.71 of the default at head dim 128,
    // 0.79 -> 0.90 at 64 (non-causal 8k), so the default wherever the load warp is.
    const int64_t rotated = knob(knobs, kRotatedWalk, loader ? 1 : 0);
    if (rotated && !loader)
      return refuseBackward(func, kRotatedWalk, rotated,
                            "0 here; 1 needs load-warp 1 (the computing warps' copies of the next Q tile follow an "
                            "ascending walk)");
    if (rotated)
      func->setAttr(kRotatedWalkAttr, UnitAttr::get(func.getContext()));
    if (const int64_t ringRows = knob(knobs, kRingRows, 0)) {
      if (!loader || layout.keySplit || layout.swapKv || layout.consumers < 2)
        return refuseBackward(func, kRingRows, ringRows,
                              "0 here; 1 needs load-warp 1 and the warpgroups splitting the Q tile's rows (head dim 64)");
      func->setAttr(kRingRowsAttr, UnitAttr::get(func.getContext()));
    }
    // ds-buffers 2: with the scores transposed dS is the iteration's one staged tile (P stays in registers), and a
    // second buffer (16 KB at head dim 128) fits where P's was; the iteration's first barrier then goes.
    if (const int64_t dsBuffers = knob(knobs, kDsBuffers, 1); dsBuffers == 2) {
      if (!swap || !loader)
        return refuseBackward(func, kDsBuffers, dsBuffers,
                              "1 here; 2 needs swap-sdp 1 (dS the one staged tile) and load-warp 1 (its ring's stage)");
      func->setAttr(kStagingRingAttr, UnitAttr::get(func.getContext()));
    }
    // dkv-staged: dK and dV through shared memory and one bulk copy a row (FA3's epilogue stores them with TMA from
    // shared memory), instead of each thread's 4-byte stores of its fragments. Where a warp holds whole rows of both:
    // not under the column split or swap-dkv (head dims 192 and 256). Measured on the H100 (bench/NOTES.md v48):
    // +2-11% at head dims 96 and 128 (1k-4k, level at 8k; the causal window's fixed cost a block 8% lower), mixed at
    // 64 (+6% at 1k, -8% at 2k): the default with the key split's 64-row tiles (96, 128) and the load warp.
    const bool stageable = !layout.wide && !layout.swapKv && loader;
    const bool stageByDefault = stageable && layout.keySplit && layout.blockM == kBackwardBlock;
    if (failed(flagKnob(func, knobs, kDkvStaged, stageByDefault ? 1 : 0, stageable,
                        "0 here; 1 needs a warp to hold whole rows of dK and dV (head dims 64, 96 and 128) and "
                        "load-warp 1 (no copy of the computing warps' own in flight into the reused buffers)",
                        kDkvStagedAttr)))
      return failure();
    // dq-last-wait 1: the writer leaves once its last tile's adds have read sDq (measured level: bench/NOTES.md v48).
    // dq-add-v4 1: where the computing warps add dQ themselves, each lane adds four floats of one row (its pair's
    // halves swapped by two shuffles) instead of two pairs of two: half the LSU's reduction instructions, whose queue
    // holds the head-dim-256 kernel (ncu: lg_throttle the first stall reason, bench/NOTES.md v49).
    // late-v 1: V's TMA after the walk's first Q tile, on its own barrier, waited for before the first dP GEMM: the
    // first S GEMM needs K, Q and dO only (a block's fixed cost, bench/NOTES.md v48).
    if (failed(flagKnob(func, knobs, kDqLastWait, 0, writer, "0 here; 1 needs dq-writer 1", kDqReadsOnlyAttr)) ||
        failed(flagKnob(func, knobs, kDqAddV4, 0, !writer && !rows80,
                        "0 here; 1 needs dq-writer 0 (the computing warps' own adds: head dim 256 by default)",
                        kDqAddV4Attr)) ||
        failed(flagKnob(func, knobs, kLateV, 0, loader, "0 here; 1 needs load-warp 1 (V's TMA is the load warp's)",
                        kLateVAttr)))
      return failure();
    // dq-slices 2: under the column split at 256, dQ's product in two 64-column slices a warpgroup (FA3's form there).
    if (const int64_t slices = knob(knobs, kDqSlices, 1); slices != 1) {
      if (!layout.wide || layout.swapKv || headDim != 256)
        return refuseBackward(func, kDqSlices, slices,
                              "1 here; 2 needs the column split at head dim 256 (each warpgroup 128 of dQ's columns)");
      func->setAttr(kDqSlicedAttr, UnitAttr::get(func.getContext()));
    }
    return success();
  }

  /// do-buffers' default: 1 under swap-dkv below head dim 256 with the load warp (the dQ writer's buffer then fits),
  /// else 2.
  static int64_t defaultDoBuffers(const schedule::Knobs &knobs, const BackwardLayout &layout) {
    const bool loader = knob(knobs, kLoadWarp, knobs.count(kDqWriter) ? knobs.at(kDqWriter) : 1) != 0;
    return layout.swapKv && layout.headDim < 256 && loader ? 1 : 2;
  }

  /// The order of a Q tile's GEMMs, as attributes of `func`: intra-wg-overlap and early-dv.
  static LogicalResult configureBackwardOverlap(FuncOp func, const schedule::Knobs &knobs,
                                                const BackwardLayout &layout) {
    // intra-wg-overlap: a Q tile's GEMMs in flight together, each waited on where its result is first read (S's
    // softmax under dP; dQ's reductions under dV and dK); 0: each waited on when issued.
    const bool overlap = knob(knobs, kOverlap, kBackwardOverlap) != 0;
    if (overlap)
      func->setAttr(kGemmOverlapAttr, UnitAttr::get(func.getContext()));
    // early-dv: dV's GEMM issued once P is staged, under dS's math (its operands are the warpgroup's own keys: the key
    // split), instead of after dQ's product with dK's.
    // With one dO buffer dV's GEMM goes early by default: its landing frees dO for the next tile's load.
    const int64_t early = knob(knobs, kEarlyDv, overlap && knob(knobs, kDoBuffers, defaultDoBuffers(knobs, layout)) == 1);
    if (early && (!layout.keySplit || layout.wide || !overlap))
      return refuseBackward(func, kEarlyDv, early,
                            "0 here; 1 needs the warpgroups to split the keys (two consumer warpgroups, block-m 64, "
                            "block-n 128: head dims 96 and 128) and intra-wg-overlap 1");
    if (early)
      func->setAttr(kEarlyDvAttr, UnitAttr::get(func.getContext()));
    return success();
  }

  bool walkDescending() const override { return true; }

  bool schedulesKind(std::string_view kind) const override {
    return kind == "forward" || kind == std::string_view(kBackwardModule);
  }

  // e4m3 (docs/fp8.md): wgmma m64nNk32 on sm_90a, V transposed by a prepass of the launch plan; the backward has none.
  std::optional<std::string> refusesDtype(std::string_view dtype) const override {
    if (dtype == "e4m3")
      return std::nullopt;
    return schedule::refusesWithoutFp8Path(*this, dtype);
  }

  std::string targetFamilyFor(std::string_view arch) const override {
    // wgmma and setmaxnreg are sm_90a's alone (sm_100a has tcgen05 instead: the fa4 schedule's); sm_80 has neither.
    return arch == "sm_90a" ? "sm90" : "";
  }

  DispatchRule dispatchRule(std::string_view arch) const override {
    // Measured on the H200 (bench/RESULTS.md, 2026-12-01): fa3 runs 1.4-2.2x fa2's kernels at every head dim,
    // length, mask and variant both have kernels for, so on sm_90a every call naming no schedule runs fa3's kernel.
    // The sm90 family tiles every head dim the runtime serves (32 and 96 with 64-byte swizzled blocks): fa2 runs
    // there only where a library lacks fa3's kernel. The backward (2026-12-03, bf16 and fp16, 1k-8k, causal and not):
    // fa3's runs 1.15-1.28x fa2's at head dim 128 and 0.96-1.23x at 64 (31 of 32 cases faster), so backward calls
    // take it too; at the head dims it refuses (not 64 or 128) the runtime falls back to fa2's without a log line.
    if (arch != "sm_90a")
      return {};
    return {.calls = DefaultCalls::All, .preferredOver = {"fa2"}};
  }

  void buildPipeline(OpPassManager &pm, const schedule::Request &request) const override {
    if (request.kind == kBackwardModule) {
      // The backward (docs/backward.md): the main program's Q-tile walk bounded by the inverse of the K/V range
      // (tile-bound-q-loop), lowered to sm90, its Q tiles' copies made by the printer one tile ahead
      // (tile-pipeline-q-loop); the roles (dq-writer) and the warpgroups' layout are configureBackward's attributes.
      OpPassManager &func = pm.nest<FuncOp>();
      schedule::addApplySchedule(func, kName, request);
      func.addPass(createTileBoundQLoop());
      func.addPass(createTileLowerToTarget(TileLowerToTargetOptions{request.arch}));
      func.addPass(createCanonicalizerPass());
      func.addPass(createCSEPass());
      func.addPass(createTilePipelineQLoop());
      return;
    }
    buildSchedulePipeline(pm, request);
    pm.nest<FuncOp>().addPass(createTileLowerToTarget(TileLowerToTargetOptions{request.arch}));
  }

  static RoleRegisters registersFor(const schedule::Knobs &knobs, int64_t consumers) {
    RoleRegisters budget = defaultRegisters(consumers);
    return {static_cast<int>(knob(knobs, kProducerRegs, budget.producer)),
            static_cast<int>(knob(knobs, kConsumerRegs, budget.consumer))};
  }
};

} // namespace

void buildSchedulePipeline(OpPassManager &pm, const schedule::Request &request) {
  OpPassManager &func = pm.nest<FuncOp>();
  schedule::addApplySchedule(func, kName, request);
  func.addPass(createTileSplitBoundary());
  ConsumerOrder order;
  order.overlap = knob(request.knobs, kOverlap, 1) != 0;
  order.pingpong = static_cast<int>(knob(request.knobs, kPingpong, -1));
  order.persistent = static_cast<int>(knob(request.knobs, kPersistent, -1));
  order.stageO = static_cast<int>(knob(request.knobs, kStageO, -1));
  order.dynamic = knob(request.knobs, kScheduler, kStaticScheduler) == kDynamicScheduler;
  // 0: the budget for the consumer warpgroups the schedule chose (configure may pick three at head dim 64).
  RoleRegisters regs{static_cast<int>(knob(request.knobs, kProducerRegs, 0)),
                     static_cast<int>(knob(request.knobs, kConsumerRegs, 0))};
  func.addPass(createTileRolePipeline(regs, order));
}

void registerSchedule() { schedule::registerSchedule(std::make_unique<Fa3Schedule>()); }

} // namespace flashtile::fa3
