//===- BackwardPrinter.h - the backward printer, shared by its two files ---===//
//
// Private to codegen/common: the BackwardPrinter class that BackwardEmitter.cpp (the main program and the module)
// and BackwardKernels.cpp (the preprocess and postprocess, deterministic mode's turns, the input gradients and
// their kernel) define between them. emitBackwardCuda (CudaEmitter.h) is the only entry point.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_BACKWARDPRINTER_H
#define FLASHTILE_CODEGEN_COMMON_BACKWARDPRINTER_H

#include "codegen/common/BackwardTarget.h"
#include "codegen/common/Concat.h"
#include "codegen/common/CudaEmitter.h"
#include "codegen/common/FragmentTiles.h"
#include "codegen/common/LaunchPlanner.h"
#include "codegen/common/PositionsCuda.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <set>

namespace flashtile::codegen::backward {

using namespace mlir;
using namespace flashtile::tile;

constexpr int kWarpSize = 32;
/// Deterministic mode: the turn of this block's K/V tile on a Q tile's dQ rows, the K/V tiles of the sequence in
/// descending order (the last adds first).
constexpr const char *kDqTurn = "(p.seqlenK + kBlockN - 1) / kBlockN - 1 - blockKvTile";
/// The deterministic mode's turn counter of the dQ rows of Q tile `tile` (a C expression).
inline std::string dqTurnCounter(const std::string &tile) {
  return "p.semaphores + ((long long)b * p.headsQ + h) * p.qTiles + " + tile;
}

/// The f32 input a read's gradient goes to (its index among the tile.func's inputs).
inline int64_t inputOf(Operation *read) {
  StringRef name = isa<InputGradOp>(read) ? cast<InputGradOp>(read).getName() : cast<SinkGradOp>(read).getName();
  return getEnclosingFunc(read).inputIndex(name);
}

/// The input-gradient reads of `func` (tile.input_grad, tile.sink_grad), one for each distinct (input, function):
/// the copies of one read in the segments of a split walk share a slot.
inline SmallVector<Operation *> distinctReads(FuncOp func, const llvm::DenseMap<Operation *, std::string> &functions) {
  SmallVector<Operation *> reads;
  std::set<std::pair<int64_t, std::string>> seen;
  func.walk([&](Operation *op) {
    if (isa<InputGradOp, SinkGradOp>(op) && seen.insert({inputOf(op), functions.lookup(op)}).second)
      reads.push_back(op);
  });
  return reads;
}

class BackwardPrinter {
public:
  BackwardPrinter(FuncOp func, const KernelShape &shape, BackwardTarget &target, ScalarHelpers &helpers,
                  const llvm::DenseMap<Operation *, std::string> &functions)
      : func(func), shape(shape), target(target), ns(target.primitivesNamespace()),
        fragments({this->ns, shape.dtype, false,
                   shape.keyWarps > 1 ? (shape.swapScores ? "warpCol0 + 16 * warpM" : "warpCol0") : "",
                   shape.swapScores, shape.swapScores ? "qt * kBlockM" : ""}),
        scalars(w, names, helpers, func),
        helpers(helpers), functions(functions) {
    pack = this->ns + (shape.dtype == "bf16" ? "::packBf16x2" : "::packF16x2");
    unpack = this->ns + (shape.dtype == "bf16" ? "::unpackBf16x2" : "::unpackF16x2");
    for (const std::string &name : fragments.reservedNames())
      names.reserve(name);
    for (const std::string &name : target.reservedNames())
      names.reserve(name);
    for (const char *name :
         {"kBlockM",     "kBlockN",     "kHeadDim",    "kHeadDimV",  "kWarps",    "kThreads", "kWarpRows",
          "kKvWarpRows", "kKvMTiles",   "kKvColSplit", "kvRowGroup", "kvColPart", "qBuf",     "sQ0",
          "kKvColRows",  "kKvKeyTiles",
          "sQ1",         "sDO0",        "sDO1",        "sRows",      "sLse",      "sDelta",   "params",
          "p",           "z",           "qBegin",      "qEnd",       "kBegin",    "kEnd",     "blockBatch",
          "blockHead",   "blockKvTile", "hKv",         "smem",       "sK",        "sV",       "sQ",
          "sDO",         "gQ",          "gK",          "gV",         "gDO",       "gLse",     "gDelta",
          "gDqAccum",    "gDK",         "gDV",         "aFrag",      "bFrag",     "part",     "ks",
          "np",          "qt",          "row",         "col",        "key",       "dst",      "e",
          "sum",         "o0",          "o1",          "d0",         "d1",        "tile",     "gAcc",
          "gOut",        "x",           "fn",          "kvTile",     "kvStep",   "kKeyWarps", "warpM",
          "warpCol0",    "walkRotated", "walkStart",   "walkStep",   "walkKvTiles", "walkQTiles"})
      names.reserve(name);
  }

  LogicalResult printPreprocess(const std::string &entry);
  LogicalResult printMain(const std::string &entry);
  // printMain's steps: the shape checks and the shared-memory size, the warp layout, the shared-memory tiles.
  LogicalResult checkMainLayout();
  void printMainWarpLayout();
  void printMainSharedMemory();
  /// sRows's floats, rounded up to the family's tile alignment.
  int rowsFloats() const;
  bool stagesRowsInShared() const;
  LogicalResult printPostprocess(const std::string &entry);
  /// The kernel that sums the blocks' shares of the input gradients (printed by a printer of the main program):
  /// `mainReads` its tile.input_grad ops, `sinkReads` the preprocess's tile.sink_grad ops, in slot order.
  LogicalResult printInputGradsKernel(const std::string &entry, ArrayRef<InputGradOp> mainReads,
                                      ArrayRef<SinkGradOp> sinkReads);
  const std::string &text() const { return w.str(); }
  int mainSmemBytes = 0;

private:
  /// `extern "C" __global__ ... {`, the schedule's constants and the block's sequence (`p`).
  /// `groupBlocks` > 0 (the main kernel, #tile.schedule's lptGroupBlocks): blockKvIndex, blockHead and blockBatch in
  /// the grouped launch order (printGroupedBlockOrder) outside deterministic mode.
  void printHeader(const std::string &entry, const std::string &what, int roleThreads = 0,
                   const std::string &extraParams = "", int64_t groupBlocks = 0);
  /// The load role's program (BackwardTarget::loadsInRole): the main program's slice that its loads need, printed
  /// with scalars of its own: the scalar ops the Q-tile walk's bounds are computed from, tile.load k and v, and each
  /// Q-tile loop's walk with the family's loads of the tile.
  LogicalResult printLoadRole();
  void printSequenceView();
  LogicalResult printOp(Operation *op);
  // printOp's cases, one op kind each.
  LogicalResult printZeroAcc(ZeroAccOp zero);
  LogicalResult printQk(QkOp qk);
  LogicalResult printScale(ScaleOp scale);
  LogicalResult printScoreMod(ScoreModOp mod);
  LogicalResult printMask(MaskOp mask);
  LogicalResult printProbs(ProbsOp probs);
  LogicalResult printSoftmaxGrad(SoftmaxGradOp grad);
  LogicalResult printScoreGrad(ScoreGradOp grad);
  LogicalResult printDotTn(DotTnOp dot);
  LogicalResult printAccumulate(AccumulateOp acc);
  LogicalResult printQLoop(QLoopOp loop);
  LogicalResult bindCarriedAccumulators(QLoopOp loop);
  LogicalResult printLoad(LoadOp load);
  LogicalResult printStore(StoreOp store);
  void printSwappedKvStore(const std::string &acc, const char *out, const char *accum, int64_t width);
  /// Input gradients (tile.input_grad, tile.sink_grad): each read's fp32 share of this thread, in a register
  /// declared before the program's ops; after them, each share summed over the block (blockSum) into the
  /// workspace, at this block's `tile` of `tiles` in the region after `before` reads' regions.
  void declareInputGradShares();
  LogicalResult printInputGrad(InputGradOp op);
  /// The preprocess's sink terms of row i (D in `d`, lane 0 of its warp).
  void printSinkGradTerms(const std::string &d);
  void printInputGradShares(const std::string &tile, const std::string &tiles, const std::string &before);
  /// Deterministic mode (p.deterministic): the turn of this block on `counter` (a C expression of an int *): wait
  /// until it reads `turn`, then, after the block's adds, pass it on.
  void printTurnWait(const std::string &counter, const std::string &turn);
  void printTurnPass(const std::string &counter);
  /// Deterministic mode: this K/V tile passes its turn on the dQ rows of every Q tile its walk skips, so that the
  /// next K/V tile's turn there comes: before the walk those below its first tile `firstLo`, after it the others
  /// (firstLo empty). The walk's segments are ascending and contiguous (tile-bound-q-loop).
  void printSkippedTurns(const std::string &firstLo);
  /// Deterministic mode's rotated walk (tile.full_walk, with a load role: its ring follows any order): every K/V
  /// tile's block walks every Q tile, so the walk may start at Q tile walkStart and wrap, the turns following
  /// (BackwardPrelude.h: rotatedTurn).
  bool rotatesWalk() const;
  /// The `for` header of a walk over Q tiles [lo, hi) whose body reads the tile as `qt` (opened; its first line
  /// defines qt when the walk is rotated).
  void openWalk(const std::string &lo, const std::string &hi);
  /// Deterministic mode: the turn of this block's K/V tile on the dQ rows of Q tile `tile` (a C expression).
  std::string dqTurn(const std::string &tile) const;
  /// The registers of the fp32 tile `in`, for an op that overwrites them with its result: `in`'s own when the op is
  /// its one use, else a copy named after `hint`.
  std::string overwrite(Value in, Value result, const char *hint);
  /// The shared buffer that holds `a` (an fp32 score-layout tile) rounded to 16 bits: staged by the first GEMM that
  /// reads it in this iteration, with every other tile of stageOrder already computed, behind one barrier.
  FailureOr<std::string> staged(Value a, Operation *user, bool early = false);
  /// The copies of `tile` (rows from `firstRow`, zero-filled past `seqlen`) from `global` (row stride), chunk by
  /// chunk (the family's copyChunk).
  void printCopy(const SharedTile &tile, const std::string &global, const std::string &firstRow,
                 const std::string &seqlen, const std::string &rowStride);
  /// The copies of a Q-tile iteration's loads, of Q tile `tileExpr` into buffer `bufferExpr` (0 or 1),
  /// under tile.q_buffers = 2.
  LogicalResult printTileCopies(QLoopOp loop, const std::string &tileExpr, const std::string &bufferExpr);
  FailureOr<SharedTile> sharedTile(Value v, Operation *user);
  FailureOr<std::string> regs(Value v, Operation *user);

  FuncOp func;
  KernelShape shape;
  BackwardTarget &target; ///< the family's instructions: copies, GEMMs, staging, reductions
  std::string ns, pack, unpack;
  FragmentTiles fragments;
  CudaWriter w;
  NameScopes names;
  ScalarEmitter scalars;
  ScalarHelpers &helpers;
  const llvm::DenseMap<Operation *, std::string> &functions;
  llvm::DenseMap<Value, std::string> registers; ///< fp32 register tiles (scores, row values, accumulators)
  llvm::DenseMap<Value, SharedTile> shared;     ///< 16-bit tiles in shared memory (their loads)
  llvm::DenseMap<Value, std::string> stagedIn;  ///< fp32 tiles staged in shared memory this iteration
  llvm::DenseSet<Operation *> issuedAhead;       ///< tile.qk ops issued with an earlier one (scoreGemms)
  llvm::DenseSet<Operation *> foldedScales;      ///< tile.scale ops printed by the tile.softmax_grad before them
  llvm::DenseSet<Operation *> scaleInProbs;      ///< tile.probs ops that apply S's scale (folded into their exp2)
  llvm::DenseMap<Operation *, std::string> inputShares; ///< tile.input_grad / tile.sink_grad -> its register
  llvm::SmallVector<Operation *> inputReads;             ///< those ops, in slot order
  /// The main program's Q-tile walk: each tile.q_loop segment's [lo, hi) (C expressions in the kernel's scope).
  llvm::SmallVector<std::pair<std::string, std::string>> walkSegments;
  int dkvStores = 0, dkvStoresPrinted = 0; ///< tile.store dk / dv of the main program (GQA's ordered adds)
  int stagingBuffers = 0;                       ///< buffers the widest iteration stages in
  int stagedThisIteration = 0;
  llvm::SmallVector<Value> stageOrder; ///< the tiles this iteration stages (GEMM operands A), in order of first use
  int qBuffers = 1;                    ///< Q-tile buffers (tile.q_buffers): 2 copies each tile one tile ahead
  /// Warps per K/V row group (kKvColSplit): the warps split the K/V tile's rows in m16 tiles, and when there are more
  /// warps than m16 tiles, each tile's dK and dV columns too (head dims above 128 fit registers that way).
  int kvColSplit = 1;
  /// The columns of `width` this warp's dK or dV accumulator holds.
  int64_t warpCols(int64_t width) const { return width / kvColSplit; }
  /// Under KernelShape::swapKv, the columns of an m-tile of a transposed dK or dV accumulator (kKvColRows): 16 for
  /// each warp of a key group.
  int64_t kvColRows() const { return 16 * shape.warps / shape.keyWarps; }
  /// The dimensions of a dK or dV accumulator of `width` columns before its [4]: "[kKvMTiles][n8 tiles]", or
  /// transposed "[m-tiles of columns][kKvKeyTiles]".
  std::string kvAccDims(int64_t width) const;
  /// KernelShape::stagedKv: where dK's (dk) or dV's staged rows start after sK, in bytes.
  std::string stagedKvOffset(bool dk) const;
  /// KernelShape::stagedKv: the padding of a staged dK or dV row (16: keeps the rows 16-byte aligned for the bulk
  /// copies, and 8 rows of a warp's fragment stores on distinct banks).
  static constexpr int64_t kStagedKvPadBytes = 16;
  bool rowsInShared = false; ///< this iteration's LSE and D rows are in shared memory (sLse, sDelta)
  /// Whether this iteration's LSE rows (sLse, and the registers loaded from them) hold LSE·log2(e), +inf for a row
  /// without keys: the load role's staging (BackwardTarget::stagesLseLog2).
  bool lseRowsInLog2() const { return rowsInShared && target.loadsInRole() && target.stagesLseLog2(); }
  /// tile.load lse / delta results read where they are used, a float2 an n8 tile, from these rows (sLse, sDelta).
  llvm::DenseMap<Value, std::string> rowsAtUse;
  /// `const float2 name = rows[8·nt + fragCol, + 1]`: a transposed score tile's two query rows of n8 tile nt.
  std::string rowPairAt(const std::string &rows, const std::string &name) const;
  bool topCopiesPending = false;
};

} // namespace flashtile::codegen::backward

#endif // FLASHTILE_CODEGEN_COMMON_BACKWARDPRINTER_H
