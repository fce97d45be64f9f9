//===- BackwardEmitter.cpp - scheduled backward programs to CUDA C++ ------===//
//
// Prints a scheduled backward module (docs/backward.md) as one CUDA unit of three kernels, one per program, op by op
// from the IR:
//   <entry>_preprocess   one block per (Q tile, query head, batch entry): tile.row_dot, D = rowsum(dO∘O)
//   <entry>              one block per (K/V tile, query head, batch entry): the K and V tiles in shared memory for
//                        the whole walk over the Q tiles that see them (tile.q_loop, its segments bounded by
//                        tile-bound-q-loop), dK and dV in registers, dQ added into the fp32 accumulator
//   <entry>_postprocess  one block per tile of rows: dQ (and, under GQA, dK and dV) converted to the call's dtype
// The main kernel computes S = Q·Kᵀ and dP = dO·Vᵀ in the forward's split-Q fragment layout (warp w owns query rows
// [w·kWarpRows, ...) of the Q tile), so the forward's printing of scale, score_mod and mask (FragmentTiles) applies
// unchanged, and the variant's functions (score_mod, mask, score_grad) are the forward printer's. P and dS, rounded
// to 16 bits, go through shared memory for the GEMMs whose rows are keys: dV += Pᵀ·dO and dK += dSᵀ·Q, where the warps
// split the K/V tile's rows in m16 tiles and, with more warps than m16 tiles, each tile's dK and dV columns too
// (kKvColSplit), and dQ += dS·K, added with fp32 reductions into the dQ accumulator. Both staged tiles are written
// before one barrier when the IR computes both before the first of those GEMMs (tile-pipeline-q-loop orders it so); a
// loop marked tile.q_buffers = 2 copies its next Q tile's loads into a second buffer while the current one computes.
// The instructions of the copies, the GEMMs, the staging and the reductions are the family's (BackwardTarget.h:
// codegen/sm80 prints them with mma.sync, codegen/sm90 with wgmma); this file prints none.
//===----------------------------------------------------------------------===//
#include "codegen/common/BackwardTarget.h"
#include "codegen/common/Concat.h"
#include "codegen/common/CudaEmitter.h"
#include "codegen/common/FragmentPrelude.h"
#include "codegen/common/FragmentTiles.h"
#include "codegen/common/LaunchPlanner.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/Transforms/Passes.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <set>

using namespace mlir;
using namespace flashtile::tile;

namespace flashtile::codegen {
namespace {

constexpr int kWarpSize = 32;
/// Deterministic mode: the turn of this block's K/V tile on a Q tile's dQ rows, the K/V tiles of the sequence in
/// descending order (the last adds first).
constexpr const char *kDqTurn = "(p.seqlenK + kBlockN - 1) / kBlockN - 1 - blockKvTile";
/// The deterministic mode's turn counter of the dQ rows of Q tile `tile` (a C expression).
std::string dqTurnCounter(const std::string &tile) {
  return "p.semaphores + ((long long)b * p.headsQ + h) * p.qTiles + " + tile;
}

/// The f32 input a read's gradient goes to (its index among the tile.func's inputs).
int64_t inputOf(Operation *read) {
  StringRef name = isa<InputGradOp>(read) ? cast<InputGradOp>(read).getName() : cast<SinkGradOp>(read).getName();
  return getEnclosingFunc(read).inputIndex(name);
}

/// The input-gradient reads of `func` (tile.input_grad, tile.sink_grad), one for each distinct (input, function):
/// the copies of one read in the segments of a split walk share a slot.
SmallVector<Operation *> distinctReads(FuncOp func, const llvm::DenseMap<Operation *, std::string> &functions) {
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
        fragments({this->ns, shape.dtype, false, shape.keyWarps > 1 ? "warpCol0" : ""}), scalars(w, names, helpers, func),
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
          "sQ1",         "sDO0",        "sDO1",        "sRows",      "sLse",      "sDelta",   "params",
          "p",           "z",           "qBegin",      "qEnd",       "kBegin",    "kEnd",     "blockBatch",
          "blockHead",   "blockKvTile", "hKv",         "smem",       "sK",        "sV",       "sQ",
          "sDO",         "gQ",          "gK",          "gV",         "gDO",       "gLse",     "gDelta",
          "gDqAccum",    "gDK",         "gDV",         "aFrag",      "bFrag",     "part",     "ks",
          "np",          "qt",          "row",         "col",        "key",       "dst",      "e",
          "sum",         "o0",          "o1",          "d0",         "d1",        "tile",     "gAcc",
          "gOut",        "x",           "fn",          "kvTile",     "kvStep",   "kKeyWarps", "warpM",
          "warpCol0"})
      names.reserve(name);
  }

  LogicalResult printPreprocess(const std::string &entry);
  LogicalResult printMain(const std::string &entry);
  LogicalResult printPostprocess(const std::string &entry);
  /// The kernel that sums the blocks' shares of the input gradients (printed by a printer of the main program):
  /// `mainReads` its tile.input_grad ops, `sinkReads` the preprocess's tile.sink_grad ops, in slot order.
  LogicalResult printInputGradsKernel(const std::string &entry, ArrayRef<InputGradOp> mainReads,
                                      ArrayRef<SinkGradOp> sinkReads);
  const std::string &text() const { return w.str(); }
  int mainSmemBytes = 0;

private:
  /// `extern "C" __global__ ... {`, the schedule's constants and the block's sequence (`p`).
  void printHeader(const std::string &entry, const std::string &what, int roleThreads = 0,
                   const std::string &extraParams = "");
  /// The load role's program (BackwardTarget::loadsInRole): the main program's slice that its loads need, printed
  /// with scalars of its own: the scalar ops the Q-tile walk's bounds are computed from, tile.load k and v, and each
  /// Q-tile loop's walk with the family's loads of the tile.
  LogicalResult printLoadRole();
  void printSequenceView();
  LogicalResult printOp(Operation *op);
  LogicalResult printQLoop(QLoopOp loop);
  LogicalResult printLoad(LoadOp load);
  LogicalResult printStore(StoreOp store);
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
  /// The registers of the fp32 tile `in`, for an op that overwrites them with its result: `in`'s own when the op is
  /// its one use, else a copy named after `hint`.
  std::string overwrite(Value in, Value result, const char *hint);
  /// The shared buffer that holds `a` (an fp32 score-layout tile) rounded to 16 bits: staged by the first GEMM that
  /// reads it in this iteration, with every other tile of stageOrder already computed, behind one barrier.
  FailureOr<std::string> staged(Value a, Operation *user);
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
  /// The warp's first key in a K/V tile, added to a score's key ("warpCol0 + " with kKeyWarps > 1, else nothing).
  std::string keyOffset() const { return shape.keyWarps > 1 ? "warpCol0 + " : ""; }
  /// The columns of `width` this warp's dK or dV accumulator holds.
  int64_t warpCols(int64_t width) const { return width / kvColSplit; }
  bool rowsInShared = false; ///< this iteration's LSE and D rows are in shared memory (sLse, sDelta)
  bool topCopiesPending = false;
};

void BackwardPrinter::printHeader(const std::string &entry, const std::string &what, int roleThreads,
                                  const std::string &extraParams) {
  w.comment(what);
  // A kernel with roles fixes its register count at launch (one block an SM): setmaxnreg moves registers between them.
  const std::string bounds = roleThreads ? cat(shape.warps * kWarpSize + roleThreads, ", 1")
                                         : std::to_string(shape.warps * kWarpSize);
  w.open("extern \"C\" __global__ void __launch_bounds__(" + bounds + ") " + entry +
         "(const FlashtileFwdParams params" + extraParams + ")");
  w.comment("---- schedule " + commentText(func.getScheduleAttr().getName()) +
            " (#tile.schedule): tile sizes and warps ----");
  w.line(cat("constexpr int kBlockM = ", shape.blockM, ";  // rows of a Q tile"));
  w.line(cat("constexpr int kBlockN = ", shape.blockN, ";  // keys of a K/V tile"));
  w.line(cat("constexpr int kHeadDim = ", shape.headDim, ";  // Q/K head dim"));
  w.line(cat("constexpr int kHeadDimV = ", shape.headDimV, ";  // V/O head dim"));
  w.line(cat("constexpr int kWarps = ", shape.warps, ";"));
  w.line("constexpr int kThreads = kWarps * 32;");
  w.line("const int blockBatch = blockIdx.z, blockHead = blockIdx.y;");
  w.separate();
  printSequenceView();
  w.separate();
}

void BackwardPrinter::printSequenceView() {
  w.comment("---- the sequence of this thread block: batch entry blockBatch ----");
  w.comment("Varlen (cuSeqlensQ set): its rows of the packed tensors; p is that sequence's view (base pointers, the");
  w.comment(
      "LSE, D and dQ-accumulator rows, lengths), so every seqlen below, in the variant's functions too, is its own.");
  openSequenceView(w);
  for (auto [field, begin, stride] : {std::tuple{"q", "qBegin", "qRowStride"},
                                      {"k", "kBegin", "kRowStride"},
                                      {"v", "kBegin", "vRowStride"},
                                      {"o", "qBegin", "oRowStride"},
                                      {"dO", "qBegin", "dORowStride"},
                                      {"dQ", "qBegin", "dQRowStride"},
                                      {"dK", "kBegin", "dKRowStride"},
                                      {"dV", "kBegin", "dVRowStride"}}) {
    bool written = std::string_view(field) == "o" || field[0] == 'd';
    bool input = std::string_view(field) == "dO";
    w.line(cat("p.", field, " = static_cast<", written && !input ? "" : "const ", "unsigned short *>(params.", field,
               ") + ", begin, " * params.", stride, ";"));
  }
  w.line("p.lse = params.lse + qBegin;");
  w.line("p.delta = params.delta + qBegin;");
  w.line("p.dqAccum = params.dqAccum + qBegin * kHeadDim;");
  w.line("p.seqlenQ = qEnd - qBegin;");
  w.line("p.seqlenK = kEnd - kBegin;");
  w.line("p.keyOffset = kBegin;");
  w.close();
}

//===----------------------------------------------------------------------===//
// The preprocess and the postprocess
//===----------------------------------------------------------------------===//

LogicalResult BackwardPrinter::printPreprocess(const std::string &entry) {
  // The program: tile.load o, tile.load do, tile.row_dot, tile.store delta (VerifyProgram checks the kind's shape).
  RowDotOp dot;
  for (Operation &op : func.getBodyBlock())
    if (auto d = dyn_cast<RowDotOp>(op))
      dot = d;
  auto o = dot ? dot.getA().getDefiningOp<LoadOp>() : LoadOp();
  auto dO = dot ? dot.getB().getDefiningOp<LoadOp>() : LoadOp();
  if (!o || !dO)
    return func.emitOpError() << "needs D = tile.row_dot of two tile.load (o, do) to be printed";
  for (Operation &op : func.getBodyBlock())
    if (!isa<LoadOp, RowDotOp, StoreOp, SinkGradOp>(op) && !ScalarEmitter::isScalarOp(&op))
      return op.emitOpError() << "is not printed in a backward_preprocess program (tile.load, tile.row_dot, "
                                 "tile.store, tile.sink_grad)";
  printHeader(entry, "D = rowsum(dO∘O) of each query row (backward_preprocess)");
  w.line("const int qTile = blockIdx.x;");
  w.line("if (qTile * kBlockM >= p.seqlenQ)");
  w.line("  return;");
  w.line("const int b = blockBatch, h = blockHead;");
  w.line("const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;");
  auto operandBase = [&](LoadOp load) -> std::string {
    return load.getOperand() == tile::Operand::O
               ? "static_cast<const unsigned short *>(p.o) + b * p.oBatchStride + h * p.oHeadStride"
               : "static_cast<const unsigned short *>(p.dO) + b * p.dOBatchStride + h * p.dOHeadStride";
  };
  auto rowStride = [](LoadOp load) { return load.getOperand() == tile::Operand::O ? "p.oRowStride" : "p.dORowStride"; };
  w.comment("tile.load o, tile.load do: read row by row by tile.row_dot below");
  w.line("const unsigned short *const gA = " + operandBase(o) + ";");
  w.line("const unsigned short *const gB = " + operandBase(dO) + ";");
  w.line("float *const gDelta = p.delta + b * p.lseBatchStride + h * p.lseHeadStride;");
  declareInputGradShares();
  w.comment("tile.row_dot: a warp a row, lanes over column pairs (fp32), summed over the warp; tile.store delta");
  w.open("for (int row = warp; row < kBlockM; row += kWarps)");
  w.line("const int i = qTile * kBlockM + row;");
  w.line("if (i >= p.seqlenQ)");
  w.line("  break;");
  w.line("float sum = 0.f;");
  w.open("for (int c = 2 * lane; c < kHeadDimV; c += 64)");
  w.line("float a0, a1, b0, b1;");
  w.line(cat(unpack, "(*reinterpret_cast<const unsigned *>(gA + i * ", rowStride(o), " + c), a0, a1);"));
  w.line(cat(unpack, "(*reinterpret_cast<const unsigned *>(gB + i * ", rowStride(dO), " + c), b0, b1);"));
  w.line("sum += a0 * b0 + a1 * b1;");
  w.close();
  w.line(cat("sum = ", ns, "::warpSum(sum);"));
  w.line("if (lane == 0)");
  w.line("  gDelta[i] = sum;");
  printSinkGradTerms("sum");
  w.close();
  // The sink's slots follow the main kernel's (one region of kvTiles a tile.input_grad).
  int64_t mainReads = 0;
  for (FuncOp program : func->getParentOfType<ModuleOp>().getOps<FuncOp>())
    if (program.getKind() == kBackwardMain)
      mainReads = static_cast<int64_t>(distinctReads(program, functions).size());
  printInputGradShares("qTile", "p.qTiles", cat(mainReads, " * p.kvTiles"));
  w.close();
  w.line("");
  return success();
}

LogicalResult BackwardPrinter::printPostprocess(const std::string &entry) {
  for (Operation &op : func.getBodyBlock())
    if (!isa<LoadOp, StoreOp>(op) && !ScalarEmitter::isScalarOp(&op))
      return op.emitOpError() << "is not printed in a backward_postprocess program (tile.load, tile.store)";
  printHeader(entry, "dQ converted from its fp32 accumulator; GQA's dK and dV from theirs (backward_postprocess)");
  w.line("const int tile = blockIdx.x;");
  w.line("const int b = blockBatch, h = blockHead;");
  w.comment("tile.load dq_accum, tile.store dq: dQ = the accumulator (softmax_scale is in dS already), converted; two");
  w.comment("columns a thread");
  w.open("if (tile * kBlockM < p.seqlenQ)");
  w.line("const float *const gAcc = p.dqAccum + (b * p.lseBatchStride + h * p.lseHeadStride) * kHeadDim;");
  w.line(
      "unsigned short *const gOut = static_cast<unsigned short *>(p.dQ) + b * p.dQBatchStride + h * p.dQHeadStride;");
  w.open("for (int e = threadIdx.x; e < kBlockM * kHeadDim / 2; e += kThreads)");
  w.line("const int i = tile * kBlockM + e / (kHeadDim / 2), c = 2 * (e % (kHeadDim / 2));");
  w.open("if (i < p.seqlenQ)");
  w.line("const float2 x = *reinterpret_cast<const float2 *>(gAcc + i * kHeadDim + c);");
  w.line(cat("*reinterpret_cast<unsigned *>(gOut + i * p.dQRowStride + c) = ", pack, "(x.x, x.y);"));
  w.close();
  w.close();
  w.close();
  w.comment("GQA/MQA: the query heads of a K/V head added their dK and dV into fp32 rows (tile.store dk, dv of the");
  w.comment("main kernel); block (tile, h < headsKv) converts rows [tile * kBlockM, ...) of K/V head h");
  w.open("if (p.headsQ != p.headsKv && h < p.headsKv && tile * kBlockM < p.seqlenK)");
  for (auto [acc, out, width] : {std::tuple{"dkAccum", "dK", "kHeadDim"}, {"dvAccum", "dV", "kHeadDimV"}}) {
    w.open("");
    w.line(cat("unsigned short *const gOut = static_cast<unsigned short *>(p.", out, ") + b * p.", out,
               "BatchStride + h * p.", out, "HeadStride;"));
    w.open(cat("for (int e = threadIdx.x; e < kBlockM * ", width, " / 2; e += kThreads)"));
    w.line(cat("const int key = tile * kBlockM + e / (", width, " / 2), c = 2 * (e % (", width, " / 2));"));
    w.open("if (key < p.seqlenK)");
    w.line(cat("const float2 x = *reinterpret_cast<const float2 *>(p.", acc,
               " + ((long long)(p.keyOffset + key) * p.headsKv + h) * ", width, " + c);"));
    w.line(cat("*reinterpret_cast<unsigned *>(gOut + key * p.", out, "RowStride + c) = ", pack, "(x.x, x.y);"));
    w.close();
    w.close();
    w.close();
  }
  w.close();
  w.close();
  w.line("");
  return success();
}

//===----------------------------------------------------------------------===//
// The main program
//===----------------------------------------------------------------------===//

FailureOr<std::string> BackwardPrinter::regs(Value v, Operation *user) {
  auto it = registers.find(v);
  if (it == registers.end())
    return user->emitOpError() << "reads a tile the backward printer did not compute in registers";
  return it->second;
}

FailureOr<SharedTile> BackwardPrinter::sharedTile(Value v, Operation *user) {
  auto it = shared.find(v);
  if (it == shared.end())
    return user->emitOpError() << "reads a 16-bit tile that is not a tile.load the backward printer copied";
  return it->second;
}

std::string BackwardPrinter::overwrite(Value in, Value result, const char *hint) {
  std::string from = registers.lookup(in);
  std::string to = from;
  if (!in.hasOneUse()) {
    to = names.unique(hint);
    w.line(cat("float ", to, "[kMTiles][kSTiles][4];  // a copy: ", from, " is read again below"));
    fragments.forEachElement(w, "kSTiles", {cat(to, "[mt][nt][i] = ", from, "[mt][nt][i];")});
  }
  registers[result] = to;
  return to;
}

FailureOr<std::string> BackwardPrinter::staged(Value a, Operation *user) {
  if (auto it = stagedIn.find(a); it != stagedIn.end())
    return it->second;
  if (failed(regs(a, user)))
    return failure();
  // `a` and every other operand already computed (overwrite() reuses a tile's registers only for its one use, so a
  // tile in registers still holds its value).
  llvm::SmallVector<Value> batch;
  for (Value v : stageOrder)
    if (!stagedIn.count(v) && registers.count(v))
      batch.push_back(v);
  if (!llvm::is_contained(batch, a))
    batch.insert(batch.begin(), a);
  for (Value v : batch) {
    std::string from = registers.lookup(v);
    std::string buffer = cat("sStage", stagedThisIteration++);
    stagedIn[v] = buffer;
    target.stage(w, buffer, from);
  }
  target.stagedBarrier(w);
  return stagedIn.lookup(a);
}

void BackwardPrinter::printCopy(const SharedTile &tile, const std::string &global, const std::string &firstRow,
                                const std::string &seqlen, const std::string &rowStride) {
  const std::string chunks = cat(tile.width / 8);
  w.open(cat("for (int e = threadIdx.x; e < ", tile.rows, " * ", chunks, "; e += kThreads)"));
  w.line(cat("const int row = e / ", chunks, ", col = e % ", chunks, ";"));
  w.line(cat("const bool inside = ", firstRow, " + row < ", seqlen, ";"));
  w.line(target.copyChunk(tile, "row", "col", cat(global, " + (inside ? ", firstRow, " + row : 0) * ", rowStride, " + 8 * col"),
                          "inside"));
  w.close();
}

LogicalResult BackwardPrinter::printLoad(LoadOp load) {
  auto type = cast<RankedTensorType>(load.getType());
  tile::Operand operand = load.getOperand();
  if (type.getRank() == 1) {
    // LSE and D: this thread's rows, fp32. A padded row (past seqlen_q) reads LSE = -inf, a row that saw no key,
    // whose P is 0 (tile.probs), and D = 0.
    if (!load.getIndex() || (operand != tile::Operand::Lse && operand != tile::Operand::Delta))
      return load.emitOpError() << "is not printed in a backward_main program (rank-1 loads: lse[i], delta[i])";
    bool lse = operand == tile::Operand::Lse;
    std::string name = names.unique(lse ? "lse" : "delta");
    registers[load.getResult()] = name;
    w.comment(cat("tile.load ", stringifyOperand(operand).str(), "[qt]: this thread's rows",
                  lse ? " (a padded row: -inf, it saw no key)" : " (a padded row: 0)"));
    w.line(cat("float ", name, "[kMTiles][2];"));
    fragments.forEachRow(w, [&] {
      w.line(cat("const int q = ", FragmentTiles::threadRow(), ";"));
      std::string source =
          rowsInShared ? cat(lse ? "sLse" : "sDelta", "[q - qt * kBlockM]") : cat(lse ? "gLse" : "gDelta", "[q]");
      w.line(cat(name, "[mt][r] = q < p.seqlenQ ? ", source, " : ", lse ? ns + "::kNegInf" : std::string("0.f"), ";"));
    });
    return success();
  }
  // 16-bit tiles: K and V copied once before the walk, Q and dO at the top of each iteration (printQLoop).
  if (!load.getIndex()) {
    if (operand != tile::Operand::K && operand != tile::Operand::V)
      return load.emitOpError() << "is not printed in a backward_main program (own tiles: k, v)";
    bool k = operand == tile::Operand::K;
    SharedTile tile{k ? "sK" : "sV", "kBlockN", type.getDimSize(1)};
    shared[load.getResult()] = tile;
    topCopiesPending = true;
    if (target.loadsInRole()) {
      w.comment(cat("tile.load ", k ? "k" : "v", ": the block's K/V tile, loaded into ", tile.name,
                    " by the load role for the whole walk"));
      return success();
    }
    w.comment(cat("tile.load ", k ? "k" : "v", ": the block's K/V tile into ", tile.name, " (", target.copyWords(),
                  ", zero-filled past seqlen_k), for the whole walk"));
    printCopy(tile, k ? "gK" : "gV", "blockKvTile * kBlockN", "p.seqlenK",
                    k ? "p.kRowStride" : "p.vRowStride");
    target.commitCopies(w);
    return success();
  }
  // Copied by printQLoop.
  return success();
}

LogicalResult BackwardPrinter::printStore(StoreOp store) {
  if (store.getOperand() != tile::Output::Dk && store.getOperand() != tile::Output::Dv)
    return store.emitOpError() << "is not printed in a backward_main program (stores: dk, dv)";
  FailureOr<std::string> acc = regs(store.getValue(), store);
  if (failed(acc))
    return failure();
  bool dk = store.getOperand() == tile::Output::Dk;
  const char *out = dk ? "dK" : "dV", *accum = dk ? "dkAccum" : "dvAccum";
  int64_t width = cast<AccType>(store.getValue().getType()).getCols();
  w.comment(
      cat("tile.store ", dk ? "dk" : "dv", ": this warp's key rows of ", *acc, ", converted; under GQA/MQA added"));
  w.comment(cat("into the fp32 rows of K/V head hKv (p.", accum, ", converted by the postprocess)"));
  // GQA/MQA, deterministic: the query heads of a group add in ascending order, each store its own turn (the
  // semaphores after the dQ ones: one per (batch, K/V head, K/V tile)).
  const std::string dkvTurn = "p.semaphores + (long long)p.batch * p.headsQ * p.qTiles + ((long long)b * p.headsKv + "
                              "hKv) * p.kvTiles + blockKvTile";
  printTurnWait(cat("p.headsQ != p.headsKv ? ", dkvTurn, " : nullptr"),
                cat("(h - hKv * (p.headsQ / p.headsKv)) * ", dkvStores, " + ", dkvStoresPrinted));
  w.open("");
  w.line(cat("unsigned short *const gOut = static_cast<unsigned short *>(p.", out, ") + b * p.", out,
             "BatchStride + hKv * p.", out, "HeadStride;"));
  w.openUnrolledFor("mt", "kKvMTiles");
  w.openUnrolledFor("r", "2");
  w.line("const int key = blockKvTile * kBlockN + kvRowGroup * kKvWarpRows + 16 * mt + fragRow + 8 * r;");
  w.line("if (key >= p.seqlenK)");
  w.line("  continue;");
  w.openUnrolledFor("nt", cat(warpCols(width) / 8));
  w.line(cat("const int col = kvColPart * ", warpCols(width), " + 8 * nt + fragCol;"));
  w.open("if (p.headsQ == p.headsKv)");
  w.line(cat("*reinterpret_cast<unsigned *>(gOut + key * p.", out, "RowStride + col) = ", pack, "(", *acc,
             "[mt][nt][2 * r], ", *acc, "[mt][nt][2 * r + 1]);"));
  w.close();
  w.open("else");
  w.line(cat("float *const dst = p.", accum, " + ((long long)(p.keyOffset + key) * p.headsKv + hKv) * ", width,
             " + col;"));
  w.line(target.reduceAdd2("dst", cat(*acc, "[mt][nt][2 * r]"), cat(*acc, "[mt][nt][2 * r + 1]")));
  w.close();
  w.close();
  w.close();
  w.close();
  w.close();
  printTurnPass(dkvTurn);
  ++dkvStoresPrinted;
  return success();
}

LogicalResult BackwardPrinter::printTileCopies(QLoopOp loop, const std::string &tileExpr,
                                               const std::string &bufferExpr) {
  const std::string firstRow = cat(tileExpr, " * kBlockM");
  for (LoadOp load : loop.getBody().front().getOps<LoadOp>()) {
    auto type = cast<RankedTensorType>(load.getType());
    tile::Operand operand = load.getOperand();
    if (type.getRank() == 2 && (operand == tile::Operand::Q || operand == tile::Operand::DO)) {
      bool q = operand == tile::Operand::Q;
      std::string buffer = cat("(", bufferExpr, q ? " ? sQ1 : sQ0)" : " ? sDO1 : sDO0)");
      w.comment(cat("tile.load ", q ? "q" : "do", "[", tileExpr, "]: ", target.copyWords(),
                    ", zero-filled past seqlen_q"));
      printCopy(SharedTile{buffer, "kBlockM", type.getDimSize(1)}, q ? "gQ" : "gDO", firstRow, "p.seqlenQ",
                      q ? "p.qRowStride" : "p.dORowStride");
    } else if (type.getRank() == 1 && (operand == tile::Operand::Lse || operand == tile::Operand::Delta)) {
      if (!target.stagesRows())
        continue; // read from global memory at the load (printLoad)
      bool lse = operand == tile::Operand::Lse;
      w.comment(cat("tile.load ", lse ? "lse" : "delta", "[", tileExpr, "]: 4-byte ", target.copyWords(),
                    ", rows past seqlen_q zeroed (read as -inf / 0)"));
      w.open("for (int row = threadIdx.x; row < kBlockM; row += kThreads)");
      w.line(cat("const bool inside = ", firstRow, " + row < p.seqlenQ;"));
      target.copyFloat(w, cat("sRows + (", bufferExpr, " * 2 + ", lse ? 0 : 1, ") * kBlockM + row"),
                       cat(lse ? "gLse" : "gDelta", " + (inside ? ", firstRow, " + row : 0)"), "inside");
      w.close();
    } else {
      return load.emitOpError() << "is not copied one tile ahead (loads of a Q-tile loop: q, do, lse, delta)";
    }
  }
  return success();
}

LogicalResult BackwardPrinter::printQLoop(QLoopOp loop) {
  if (!loop.isBounded())
    return loop.emitOpError() << "is not bounded; run tile-bound-q-loop before emitting CUDA";
  FailureOr<CExpr> lo = scalars.expr(loop.getLower(), loop), hi = scalars.expr(loop.getUpper(), loop);
  if (failed(lo) || failed(hi))
    return failure();
  // The loop updates its accumulators in place: one carried twice (CSE merges dK's and dV's tile.zero_acc) gets
  // registers of its own for its second place.
  llvm::StringSet<> carried;
  for (auto [arg, init, result] : llvm::zip(loop.getAccArgs(), loop.getInits(), loop.getResults())) {
    FailureOr<std::string> acc = regs(init, loop);
    if (failed(acc))
      return failure();
    std::string name = *acc;
    if (!carried.insert(name).second) {
      name = names.unique("acc");
      int64_t width = cast<AccType>(init.getType()).getCols();
      w.line(cat("float ", name, "[kKvMTiles][", warpCols(width) / 8, "][4];  // ", *acc, " carried a second time"));
      w.openUnrolledFor("mt", "kKvMTiles");
      w.openUnrolledFor("nt", cat(warpCols(width) / 8));
      w.openUnrolledFor("i", "4");
      w.line(cat(name, "[mt][nt][i] = ", *acc, "[mt][nt][i];"));
      w.close();
      w.close();
      w.close();
    }
    registers[arg] = name;
    registers[result] = name;
  }
  if (walkSegments.empty())
    printSkippedTurns(lo->text);
  walkSegments.push_back({lo->text, hi->text});
  w.comment(cat("---- tile.q_loop segment ", stringifySegment(loop.getSegment()).str(),
                ": the Q tiles qt that see this K/V tile, ascending ----"));
  auto buffers = loop->getAttrOfType<IntegerAttr>(kQBuffersAttr);
  const bool ahead = buffers && buffers.getInt() == 2;
  const bool ring = target.loadsInRole();
  if (ring && !ahead)
    return loop.emitOpError() << "has one Q-tile buffer; the load role fills a ring of two (tile.q_buffers = 2)";
  if (ring) {
    w.comment("the load role brings each Q tile's Q, dO, LSE and D into the ring's next buffer as this walk frees it");
  } else if (ahead) {
    w.comment("tile.q_buffers = 2: tile qt + 1's loads are copied into buffer qBuf ^ 1 while tile qt computes; the");
    w.comment("segment's first tile's here");
    w.open(cat("if (", lo->text, " < ", hi->text, ")"));
    if (failed(printTileCopies(loop, lo->text, "qBuf")))
      return failure();
    w.close();
    target.commitCopies(w);
  }
  w.open(cat("for (int qt = ", lo->text, "; qt < ", hi->text, "; ++qt)"));
  names.push();
  scalars.bind(loop.getTileIndex(), "qt");
  stagedThisIteration = 0;
  stagedIn.clear();
  stageOrder.clear();
  for (Operation &op : loop.getBody().front()) {
    Value a = isa<DotTnOp>(op)        ? cast<DotTnOp>(op).getA()
              : isa<AccumulateOp>(op) ? cast<AccumulateOp>(op).getA()
                                      : Value();
    if (a && !llvm::is_contained(stageOrder, a))
      stageOrder.push_back(a);
  }
  w.line(cat("const int warpRow0 = qt * kBlockM + ", shape.keyWarps > 1 ? "warpM" : "warp",
             " * kWarpRows;  // first query row of this warp"));
  rowsInShared = ahead && (ring || target.stagesRows());
  if (ring) {
    w.line(cat(target.computeBarrier(), "  // every warp is done with the last iteration's staging buffers"));
    target.acquireQTile(w);
    for (LoadOp load : loop.getBody().front().getOps<LoadOp>())
      if (cast<RankedTensorType>(load.getType()).getRank() == 2)
        shared[load.getResult()] = SharedTile{load.getOperand() == tile::Operand::Q ? "sQ" : "sDO", "kBlockM",
                                              cast<RankedTensorType>(load.getType()).getDimSize(1)};
  } else if (ahead) {
    target.waitCopies(w);
    w.line(cat(target.computeBarrier(), "  // tile qt landed in qBuf; every warp is done with qBuf ^ 1 and the staging buffers"));
    w.open(cat("if (qt + 1 < ", hi->text, ")"));
    if (failed(printTileCopies(loop, "(qt + 1)", "(qBuf ^ 1)")))
      return failure();
    w.close();
    target.commitCopies(w);
    w.line("unsigned char *const sQ = qBuf ? sQ1 : sQ0, *const sDO = qBuf ? sDO1 : sDO0;");
    if (rowsInShared)
      w.line("const float *const sLse = sRows + qBuf * 2 * kBlockM, *const sDelta = sLse + kBlockM;");
    for (LoadOp load : loop.getBody().front().getOps<LoadOp>())
      if (cast<RankedTensorType>(load.getType()).getRank() == 2)
        shared[load.getResult()] = SharedTile{load.getOperand() == tile::Operand::Q ? "sQ" : "sDO", "kBlockM",
                                              cast<RankedTensorType>(load.getType()).getDimSize(1)};
  } else {
    w.line(cat(target.computeBarrier(), "  // the last iteration's reads of sQ, sDO and the staging buffers are done"));
    w.comment(cat("this Q tile's 16-bit loads (tile.load q[qt], do[qt]): ", target.copyWords(),
                  ", zero-filled past seqlen_q"));
    for (Operation &op : loop.getBody().front()) {
      auto load = dyn_cast<LoadOp>(op);
      if (!load || cast<RankedTensorType>(load.getType()).getRank() != 2)
        continue;
      if (load.getIndex() != loop.getTileIndex() ||
          (load.getOperand() != tile::Operand::Q && load.getOperand() != tile::Operand::DO))
        return load.emitOpError() << "is not printed in a Q-tile loop (16-bit loads: q[i], do[i] of its tile i)";
      bool q = load.getOperand() == tile::Operand::Q;
      SharedTile tile{q ? "sQ" : "sDO", "kBlockM", cast<RankedTensorType>(load.getType()).getDimSize(1)};
      shared[load.getResult()] = tile;
      printCopy(tile, q ? "gQ" : "gDO", "qt * kBlockM", "p.seqlenQ", q ? "p.qRowStride" : "p.dORowStride");
    }
    target.commitCopies(w);
    target.waitCopies(w);
    w.line(target.computeBarrier());
  }
  for (Operation &op : loop.getBody().front().without_terminator()) {
    w.separate();
    if (failed(printOp(&op)))
      return failure();
  }
  target.endIteration(w);
  if (ring)
    target.releaseQTile(w);
  else if (ahead)
    w.line("qBuf ^= 1;");
  rowsInShared = false;
  names.pop();
  w.close();
  return success();
}

LogicalResult BackwardPrinter::printOp(Operation *op) {
  if (ScalarEmitter::isScalarOp(op))
    return scalars.emit(op);
  if (topCopiesPending && isa<QLoopOp, StoreOp>(op)) {
    if (target.loadsInRole()) {
      target.waitOwnTiles(w);
    } else {
      target.waitCopies(w);
      w.line(cat(target.computeBarrier(), "  // K and V are in shared memory"));
    }
    topCopiesPending = false;
  }
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](LoadOp load) { return printLoad(load); })
      .Case([&](StoreOp store) { return printStore(store); })
      .Case([&](QLoopOp loop) { return printQLoop(loop); })
      .Case([&](ZeroAccOp zero) -> LogicalResult {
        std::string name = names.unique("acc");
        registers[zero.getResult()] = name;
        int64_t width = zero.getAcc().getType().getCols();
        w.comment(cat("tile.zero_acc: ", name, ", this warp's key rows x ", warpCols(width), " of ", width,
                      " columns, fp32"));
        w.line(cat("float ", name, "[kKvMTiles][", warpCols(width) / 8, "][4] = {};"));
        return success();
      })
      .Case([&](QkOp qk) -> LogicalResult {
        if (issuedAhead.erase(op)) {
          target.scoreWait(w, registers.lookup(qk.getS()));
          return success();
        }
        FailureOr<SharedTile> a = sharedTile(qk.getQ(), op), b = sharedTile(qk.getK(), op);
        if (failed(a) || failed(b))
          return failure();
        std::string name = names.unique(a->name == "sQ" ? "s" : "dp");
        registers[qk.getS()] = name;
        // The iteration's next tile.qk, when the family issues both together and its tiles are already in place.
        QkOp next;
        if (target.issuesScoresTogether())
          for (Operation *later = op->getNextNode(); later && !next; later = later->getNextNode())
            if (auto other = dyn_cast<QkOp>(later); other && shared.count(other.getQ()) && shared.count(other.getK()))
              next = other;
        if (!next) {
          target.scoreGemm(w, name, *a, *b);
          return success();
        }
        const SharedTile &a2 = shared.find(next.getQ())->second, &b2 = shared.find(next.getK())->second;
        std::string second = names.unique(a2.name == "sQ" ? "s" : "dp");
        registers[next.getS()] = second;
        issuedAhead.insert(next);
        target.scoreGemms(w, name, *a, *b, second, a2, b2);
        return success();
      })
      .Case([&](ScaleOp scale) -> LogicalResult {
        if (failed(regs(scale.getS(), op)))
          return failure();
        if (foldedScales.erase(op)) {
          registers[scale.getResult()] = registers.lookup(scale.getS());
          return success(); // printed by the tile.softmax_grad before it
        }
        fragments.scale(w, overwrite(scale.getS(), scale, "scaled"));
        return success();
      })
      .Case([&](ScoreModOp mod) -> LogicalResult {
        if (failed(regs(mod.getS(), op)))
          return failure();
        fragments.scoreMod(w, overwrite(mod.getS(), mod, "modded"), "blockKvTile", functions.lookup(op),
                           keyArgOf(mod.getBody()));
        return success();
      })
      .Case([&](MaskOp mask) -> LogicalResult {
        if (failed(regs(mask.getS(), op)))
          return failure();
        bool readsInputs = mask.getBody().walk([](InputOp) { return WalkResult::interrupt(); }).wasInterrupted();
        fragments.mask(w, overwrite(mask.getS(), mask, "masked"), "blockKvTile", functions.lookup(op),
                       keyArgOf(mask.getBody()), readsInputs);
        return success();
      })
      .Case([&](ProbsOp probs) -> LogicalResult {
        FailureOr<std::string> lse = regs(probs.getLse(), op);
        if (failed(lse) || failed(regs(probs.getS(), op)))
          return failure();
        std::string p = overwrite(probs.getS(), probs, "probs");
        w.comment(
            cat("tile.probs: ", p, " = exp(S - LSE) = exp2(S·log2(e) - LSE·log2(e)); a masked score (-inf) and a"));
        w.comment("row whose LSE is -inf give 0");
        w.line(cat("float lseLog2[kMTiles][2];"));
        fragments.forEachRow(w, [&] {
          w.line(cat("lseLog2[mt][r] = ", *lse, "[mt][r] == ", ns, "::kNegInf ? ", ns, "::kPosInf : ", *lse,
                     "[mt][r] * ", ns, "::kLog2e;"));
        });
        fragments.forEachElement(
            w, "kSTiles",
            {cat(p, "[mt][nt][i] = ", ns, "::exp2(", p, "[mt][nt][i] * ", ns, "::kLog2e - lseLog2[mt][i / 2]);")});
        return success();
      })
      .Case([&](SoftmaxGradOp grad) -> LogicalResult {
        FailureOr<std::string> p = regs(grad.getP(), op), delta = regs(grad.getDelta(), op);
        if (failed(p) || failed(delta) || failed(regs(grad.getDp(), op)))
          return failure();
        std::string ds = overwrite(grad.getDp(), grad, "ds");
        // dS's one use scaling it by softmax_scale (the gradient of S = scale·QKᵀ) folds in: P∘(dP·scale − D·scale),
        // one FFMA and one FMUL an element (the row's D·scale computed once), the same value up to rounding.
        auto scale = grad->hasOneUse() ? dyn_cast<ScaleOp>(*grad->user_begin()) : ScaleOp();
        if (scale && scale.getS() == grad.getResult() && grad.getResult().hasOneUse()) {
          foldedScales.insert(scale);
          w.comment(cat("tile.softmax_grad and the scale after it: ", ds, " = P∘(dP - D)·softmax_scale"));
          fragments.forEachElement(
              w, "kSTiles",
              {cat(ds, "[mt][nt][i] = ", *p, "[mt][nt][i] * (", ds, "[mt][nt][i] * p.softmaxScale - ", *delta,
                   "[mt][i / 2] * p.softmaxScale);")});
          return success();
        }
        w.comment(cat("tile.softmax_grad: ", ds, " = P∘(dP - D)"));
        fragments.forEachElement(
            w, "kSTiles",
            {cat(ds, "[mt][nt][i] = ", *p, "[mt][nt][i] * (", ds, "[mt][nt][i] - ", *delta, "[mt][i / 2]);")});
        return success();
      })
      .Case([&](ScoreGradOp grad) -> LogicalResult {
        FailureOr<std::string> s = regs(grad.getS(), op);
        if (failed(s) || failed(regs(grad.getDs(), op)))
          return failure();
        std::string ds = overwrite(grad.getDs(), grad, "dsMod");
        std::string fn = functions.lookup(op);
        KeyArg key = keyArgOf(grad.getBody());
        std::string kv = key == KeyArg::Clamped ? "min(kv, p.seqlenK - 1)" : "kv";
        w.comment(cat("tile.score_grad: ", ds, " *= ", fn, "(S, b, h, q, kv), the score modifier's derivative at the"));
        w.comment(
            "unmodified score; where dS' is 0 (a masked score: P = 0) it stays 0 whatever the derivative is there");
        fragments.forEachElement(
            w, "kSTiles",
            {cat("const int q = ", FragmentTiles::threadRow("(i / 2)"), ";"),
             cat("const int kv = blockKvTile * kBlockN + ", keyOffset(), "8 * nt + fragCol + i % 2;"),
             cat("if (", ds, "[mt][nt][i] != 0.f)"),
             cat("  ", ds, "[mt][nt][i] *= ", fn, "(", *s, "[mt][nt][i], b, h, q, ", kv, ", p);")});
        return success();
      })
      .Case([&](DotTnOp dot) -> LogicalResult {
        FailureOr<std::string> acc = regs(dot.getAcc(), op);
        FailureOr<SharedTile> b = sharedTile(dot.getB(), op);
        if (failed(acc) || failed(b))
          return failure();
        FailureOr<std::string> a = staged(dot.getA(), op);
        if (failed(a))
          return failure();
        registers[dot.getResult()] = *acc;
        target.dotTn(w, *acc, *a, *b, warpCols(b->width));
        return success();
      })
      .Case([&](AccumulateOp acc) -> LogicalResult {
        FailureOr<SharedTile> b = sharedTile(acc.getB(), op);
        if (failed(b))
          return failure();
        if (acc.getOperand() != tile::Operand::DqAccum || !b->name.starts_with("sK"))
          return acc.emitOpError() << "is printed as dQ += dS·K only (dq_accum, B the K tile)";
        FailureOr<std::string> ds = regs(acc.getA(), op);
        if (failed(ds))
          return failure();
        std::string a;
        if (!target.dqReadsRegisters()) {
          FailureOr<std::string> buffer = staged(acc.getA(), op);
          if (failed(buffer))
            return failure();
          a = *buffer;
        }
        target.dqOperand(w, a, *ds);
        if (target.dqTurnsInRole()) {
          target.dqProduct(w, *b);
          return success();
        }
        const std::string dqTurn = dqTurnCounter("qt");
        printTurnWait(dqTurn, kDqTurn);
        target.dqProduct(w, *b);
        printTurnPass(dqTurn);
        return success();
      })
      .Case([&](InputGradOp grad) { return printInputGrad(grad); })
      .Default([&](Operation *) -> LogicalResult {
        return op->emitOpError() << "is not printed in a backward_main program by the backward printer";
      });
}

LogicalResult BackwardPrinter::printMain(const std::string &entry) {
  // Staging buffers: the score-layout tiles a Q-tile iteration hands to GEMMs through shared memory (P and dS).
  for (QLoopOp loop : func.getBody().getOps<QLoopOp>()) {
    llvm::SmallPtrSet<void *, 4> staging;
    loop.getBody().walk([&](Operation *op) {
      if (auto dot = dyn_cast<DotTnOp>(op))
        staging.insert(dot.getA().getAsOpaquePointer());
      if (auto acc = dyn_cast<AccumulateOp>(op))
        staging.insert(acc.getA().getAsOpaquePointer());
    });
    stagingBuffers = std::max<int>(stagingBuffers, staging.size());
  }
  if (shape.keyWarps > 1 &&
      (!target.splitsKeys() || shape.warps % shape.keyWarps != 0 || shape.blockN % (16 * shape.keyWarps) != 0 ||
       shape.headDim % (16 * shape.keyWarps) != 0 || shape.blockM * shape.keyWarps % (16 * shape.warps) != 0))
    return func.emitOpError() << "cannot split S's keys " << shape.keyWarps << " ways (tile.key_warps) among "
                              << shape.warps << " warps (block-m " << shape.blockM << ", block-n " << shape.blockN
                              << ", head dim " << shape.headDim << ")"
                              << (target.splitsKeys() ? "" : ": this family prints split-Q only; accepted: 1");
  const int rowTiles = static_cast<int>(shape.blockN / 16);
  kvColSplit = rowTiles % shape.warps == 0 ? 1 : shape.warps / std::max(rowTiles, 1);
  if (shape.blockN % 16 != 0 || rowTiles * kvColSplit % shape.warps != 0 || shape.warps % kvColSplit != 0 ||
      shape.headDim % (16 * kvColSplit) != 0 || shape.headDimV % (16 * kvColSplit) != 0)
    return func.emitOpError() << "cannot split a K/V tile of " << shape.blockN << " keys (head dims " << shape.headDim
                              << ", " << shape.headDimV << ") among " << shape.warps
                              << " warps in m16 row tiles and equal column parts of whole n16 tiles";
  for (QLoopOp loop : func.getBody().getOps<QLoopOp>())
    if (auto buffers = loop->getAttrOfType<IntegerAttr>(kQBuffersAttr))
      qBuffers = std::max<int>(qBuffers, buffers.getInt());
  if (qBuffers != 1 && qBuffers != 2)
    return func.emitOpError() << "has a Q-tile loop of " << qBuffers << " buffers; the backward printer prints 1 or 2";
  const int hd = static_cast<int>(shape.headDim), hdv = static_cast<int>(shape.headDimV);
  // Two buffers also hold the LSE and D rows of a Q tile (fp32).
  const bool rowsStaged = qBuffers == 2 && (target.stagesRows() || target.loadsInRole());
  const int rowsBytes = rowsStaged ? 2 * 2 * shape.blockM * 4 : 0;
  mainSmemBytes = static_cast<int>(
      target.tileBytes(shape.blockN, hd) + target.tileBytes(shape.blockN, hdv) +
      qBuffers * (target.tileBytes(shape.blockM, hd) + target.tileBytes(shape.blockM, hdv)) + rowsBytes +
      stagingBuffers * target.tileBytes(shape.blockM, shape.blockN) + target.roleSharedBytes() +
      target.sharedMemoryReserve());

  printHeader(entry, "dK, dV of one K/V tile and its dQ terms (backward_main)", target.roleThreads(),
              target.mainExtraParams());
  w.comment("---- the tile of this thread block: K/V tile blockKvTile of query head blockHead (tile.dim kv_tile) ----");
  w.comment("deterministic mode: the K/V tiles in descending order (their dQ adds' turns, printTurnWait)");
  w.line("const int blockKvTile = p.deterministic ? gridDim.x - 1 - blockIdx.x : blockIdx.x;");
  w.line("if (blockKvTile * kBlockN >= p.seqlenK)");
  w.line("  return;  // varlen: the grid covers the longest sequence");
  w.line("const int b = blockBatch, h = blockHead;");
  w.line("const int hKv = h / (p.headsQ / p.headsKv);  // grouped-query attention: K/V head of query head h");
  w.comment("---- warp layout: S, dP and dQ split the Q tile's rows (split-Q, as the forward), dK and dV the K/V");
  w.comment(
      "tile's rows in m16 tiles, and with more warps than those, each row group's columns in kKvColSplit parts ----");
  if (shape.keyWarps > 1) {
    w.comment("(tile.key_warps: S, dP and dQ split both ways, kWarps / kKeyWarps row groups of kWarpRows query rows,");
    w.comment("each row group's kKeyWarps warps blockN / kKeyWarps keys of S and dP and kHeadDim / kKeyWarps columns of dQ)");
    w.line(cat("constexpr int kKeyWarps = ", shape.keyWarps, ";"));
    w.line("constexpr int kWarpRows = kBlockM * kKeyWarps / kWarps, kMTiles = kWarpRows / 16, kSTiles = kBlockN / "
           "kKeyWarps / 8;");
  } else {
    w.line("constexpr int kWarpRows = kBlockM / kWarps, kMTiles = kWarpRows / 16, kSTiles = kBlockN / 8;");
  }
  w.line(cat("constexpr int kKvColSplit = ", kvColSplit,
             ", kKvWarpRows = kBlockN * kKvColSplit / kWarps, kKvMTiles = kKvWarpRows / 16;"));
  w.line("const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;");
  w.line(target.kvSplitLayout());
  if (shape.keyWarps > 1)
    w.line(target.keySplitLayout());
  w.line("const int fragRow = lane / 4, fragCol = 2 * (lane % 4);");
  std::vector<std::tuple<std::string, const char *, const char *>> tiles = {{"sK", "kBlockN", "kHeadDim"},
                                                                            {"sV", "kBlockN", "kHeadDimV"}};
  if (qBuffers == 2) {
    w.comment(cat("---- shared memory (", mainSmemBytes,
                  " bytes): sK, sV [kBlockN rows]; two buffers of sQ, sDO [kBlockM rows], 16-bit, rows swizzled"));
    w.comment(cat("(", target.tileLayoutWords(), ")",
                  rowsStaged ? ", and of the LSE and D rows (sRows, fp32 [2][2][kBlockM])" : "", "; ", stagingBuffers,
                  " staging buffer(s) [kBlockM][kBlockN] for P and dS ----"));
    for (const char *buffer : {"0", "1"}) {
      tiles.push_back({cat("sQ", buffer), "kBlockM", "kHeadDim"});
      tiles.push_back({cat("sDO", buffer), "kBlockM", "kHeadDimV"});
    }
  } else {
    w.comment(cat("---- shared memory (", mainSmemBytes,
                  " bytes): sK, sV [kBlockN rows], sQ, sDO [kBlockM rows], 16-bit, rows swizzled"));
    w.comment(cat("(", target.tileLayoutWords(), "); ", stagingBuffers, " staging buffer(s) [kBlockM][kBlockN] for P and dS ----"));
    tiles.push_back({"sQ", "kBlockM", "kHeadDim"});
    tiles.push_back({"sDO", "kBlockM", "kHeadDimV"});
  }
  target.declareSharedMemory(w);
  std::string at = "smem";
  for (const auto &[name, rows, width] : tiles) {
    w.line(cat("unsigned char *const ", name, " = ", at, ";"));
    at = cat(name, " + ", target.tileBytesExpr(rows, width));
  }
  if (rowsStaged) {
    w.line(cat("float *const sRows = reinterpret_cast<float *>(", at, ");"));
    at = "reinterpret_cast<unsigned char *>(sRows + 2 * 2 * kBlockM)";
  }
  for (int i = 0; i < stagingBuffers; ++i) {
    w.line(cat("unsigned char *const sStage", i, " = ", at, ";"));
    at = cat("sStage", i, " + ", target.tileBytesExpr("kBlockM", "kBlockN"));
  }
  target.declareRoleShared(w, at);
  w.comment("---- global tiles of this (batch, head): strides in elements ----");
  w.line("const unsigned short *const gQ = static_cast<const unsigned short *>(p.q) + b * p.qBatchStride + h * "
         "p.qHeadStride;");
  w.line("const unsigned short *const gK = static_cast<const unsigned short *>(p.k) + b * p.kBatchStride + hKv * "
         "p.kHeadStride;");
  w.line("const unsigned short *const gV = static_cast<const unsigned short *>(p.v) + b * p.vBatchStride + hKv * "
         "p.vHeadStride;");
  w.line("const unsigned short *const gDO = static_cast<const unsigned short *>(p.dO) + b * p.dOBatchStride + h * "
         "p.dOHeadStride;");
  w.line("const float *const gLse = p.lse + b * p.lseBatchStride + h * p.lseHeadStride;");
  w.line("const float *const gDelta = p.delta + b * p.lseBatchStride + h * p.lseHeadStride;");
  w.line("float *const gDqAccum = p.dqAccum + (b * p.lseBatchStride + h * p.lseHeadStride) * kHeadDim;");
  declareInputGradShares();
  func.walk([&](StoreOp store) { dkvStores += store.getOperand() == tile::Output::Dk || store.getOperand() == tile::Output::Dv; });
  if (qBuffers == 2 && !target.loadsInRole())
    w.line("int qBuf = 0;  // the buffer of the current Q tile's copies (tile.q_buffers = 2)");
  target.beginRoles(w, dqTurnCounter("tile"), kDqTurn);
  if (target.loadsInRole()) {
    target.beginLoadRole(w);
    if (failed(printLoadRole()))
      return failure();
    target.endLoadRole(w);
  }
  target.endRoles(w);
  for (Operation &op : func.getBodyBlock()) {
    w.separate();
    if (isa<StoreOp>(op) && !walkSegments.empty() && dkvStoresPrinted == 0) {
      target.endWalk(w);
      printSkippedTurns("");
    }
    if (failed(printOp(&op)))
      return failure();
  }
  printInputGradShares("blockKvTile", "p.kvTiles", "0");
  w.close();
  w.line("");
  return success();
}

LogicalResult BackwardPrinter::printLoadRole() {
  // The scalar ops the walk's bounds are computed from (pure: printed again here, with names of this scope).
  llvm::DenseSet<Operation *> needed;
  SmallVector<Value> pending;
  for (QLoopOp loop : func.getBody().getOps<QLoopOp>())
    pending.append({loop.getLower(), loop.getUpper()});
  while (!pending.empty()) {
    Operation *def = pending.pop_back_val().getDefiningOp();
    if (!def || !ScalarEmitter::isScalarOp(def) || !needed.insert(def).second)
      continue;
    pending.append(def->operand_begin(), def->operand_end());
  }
  names.push();
  ScalarEmitter own(w, names, helpers, func);
  for (Operation &op : func.getBodyBlock()) {
    if (needed.contains(&op)) {
      if (failed(own.emit(&op)))
        return failure();
      continue;
    }
    if (auto load = dyn_cast<LoadOp>(op); load && !load.getIndex()) {
      const bool k = load.getOperand() == tile::Operand::K;
      if (!k && load.getOperand() != tile::Operand::V)
        return load.emitOpError() << "is not printed in a backward_main program (own tiles: k, v)";
      target.loadOwnTile(w, SharedTile{k ? "sK" : "sV", "kBlockN", cast<RankedTensorType>(load.getType()).getDimSize(1)},
                         k);
      continue;
    }
    auto loop = dyn_cast<QLoopOp>(op);
    if (!loop)
      continue;
    for (LoadOp load : loop.getBody().front().getOps<LoadOp>()) {
      tile::Operand operand = load.getOperand();
      if (load.getIndex() != loop.getTileIndex() || (operand != tile::Operand::Q && operand != tile::Operand::DO &&
                                                     operand != tile::Operand::Lse && operand != tile::Operand::Delta))
        return load.emitOpError() << "is not loaded by the load role (loads of a Q-tile loop: q, do, lse, delta of "
                                     "its tile)";
    }
    FailureOr<CExpr> lo = own.expr(loop.getLower(), loop), hi = own.expr(loop.getUpper(), loop);
    if (failed(lo) || failed(hi))
      return failure();
    w.comment(cat("tile.q_loop segment ", stringifySegment(loop.getSegment()).str(), ": its Q tiles' loads"));
    w.open(cat("for (int qt = ", lo->text, "; qt < ", hi->text, "; ++qt)"));
    target.loadQTile(w, "qt");
    w.close();
  }
  names.pop();
  return success();
}

//===----------------------------------------------------------------------===//
// Deterministic mode: ordered fp32 adds
//===----------------------------------------------------------------------===//
// Under p.deterministic the blocks that add into the same fp32 rows take turns, counted by an int semaphore of the
// rows (zeroed by the plan): the blocks of K/V tiles 0, 1, ... of a (batch, query head) add into a Q tile's dQ
// rows in that order, and the query heads of a GQA group into a K/V tile's dK and dV rows in head order. Every
// turn's adds are the same adds in the same order each run, so the sums are bitwise repeatable.
// The K/V tiles of a (batch, head) add in descending order: under a causal mask tile n walks Q tiles [lo_n, ...)
// with lo_n growing in n, so tile n reaches Q tile qt one iteration after tile n + 1 did, and the turns pipeline
// (in ascending order each tile would wait for the whole walk of the one before). A K/V tile whose walk skips a Q
// tile still passes its turn there (printSkippedTurns): the tiles below its walk before it (the higher K/V tiles,
// which add first, skip them too and pass them first), the others after it, so the count never stalls.
// Why the waits end: in deterministic mode block x of the grid owns K/V tile gridDim.x - 1 - x, so a block waits only
// for blocks of a lower linear index (the K/V tile above it, of its head: grid.x lower; or query head h - 1 of its
// K/V tile: grid.y lower), and the hardware starts a grid's blocks in increasing linear index, so every block it
// waits for is running or done when it waits, whatever number of blocks fit on the GPU at once; by induction from
// block 0, which waits for none, every wait ends.

void BackwardPrinter::printTurnWait(const std::string &counter, const std::string &turn) {
  w.comment("deterministic mode: wait for this block's turn on these rows (the blocks before it added theirs)");
  w.open("if (p.deterministic)");
  w.line(cat("int *const turnCounter = ", counter, ";"));
  w.line("if (threadIdx.x == 0 && turnCounter)");
  w.line(cat("  ", ns, "::waitTurn(turnCounter, ", turn, ");"));
  w.line(target.computeBarrier());
  w.close();
}

void BackwardPrinter::printTurnPass(const std::string &counter) {
  w.comment("deterministic mode: every thread's adds are issued; pass the turn on (fence, then release)");
  w.open("if (p.deterministic)");
  w.line(cat("int *const turnCounter = ", counter, ";"));
  w.line(target.computeBarrier());
  w.open("if (threadIdx.x == 0 && turnCounter)");
  w.line("__threadfence();");
  w.line(cat(ns, "::passTurn(turnCounter);"));
  w.close();
  w.close();
}

void BackwardPrinter::printSkippedTurns(const std::string &firstLo) {
  const bool head = !firstLo.empty();
  std::string visited;
  for (const auto &[lo, hi] : walkSegments)
    visited += cat(visited.empty() ? "" : " || ", "(qt >= ", lo, " && qt < ", hi, ")");
  w.comment(head ? "deterministic mode: the Q tiles below this walk's first get this K/V tile's turn now, in order"
                 : "deterministic mode: the other Q tiles this walk skipped get this K/V tile's turn, in order");
  w.open("if (p.deterministic && threadIdx.x == 0)");
  w.open(head ? cat("for (int qt = 0; qt < ", firstLo, " && qt * kBlockM < p.seqlenQ; ++qt)")
              : cat("for (int qt = ", walkSegments.front().first, "; qt * kBlockM < p.seqlenQ; ++qt)"));
  if (!head) {
    w.line(cat("if (", visited, ")"));
    w.line("  continue;");
  }
  w.line(cat("int *const turnCounter = ", dqTurnCounter("qt"), ";"));
  w.line(cat(ns, "::waitTurn(turnCounter, ", kDqTurn, ");"));
  w.line(cat(ns, "::passTurn(turnCounter);"));
  w.close();
  w.close();
}

//===----------------------------------------------------------------------===//
// Gradients of the variant's f32 inputs
//===----------------------------------------------------------------------===//
// Deterministic by construction: each thread sums its terms in program order, each block its threads' sums in a
// fixed order (blockSum) into its own workspace slot, and one block sums the slots in a fixed order (the
// `_input_grads` kernel). No float atomics.

void BackwardPrinter::declareInputGradShares() {
  inputReads = distinctReads(func, functions);
  for (Operation *read : inputReads) {
    std::string name = names.unique("inputGradShare");
    w.line(cat("float ", name, " = 0.f;  // this thread's terms of the gradient of input #", inputOf(read), " (",
               isa<InputGradOp>(read) ? "tile.input_grad" : "tile.sink_grad", ")"));
    func.walk([&](Operation *op) {
      if (isa<InputGradOp, SinkGradOp>(op) && inputOf(op) == inputOf(read) &&
          functions.lookup(op) == functions.lookup(read))
        inputShares[op] = name;
    });
  }
}

LogicalResult BackwardPrinter::printInputGrad(InputGradOp op) {
  FailureOr<std::string> ds = regs(op.getDs(), op), s = regs(op.getS(), op);
  if (failed(ds) || failed(s))
    return failure();
  const std::string &share = inputShares.lookup(op);
  std::string fn = functions.lookup(op);
  std::string kv = keyArgOf(op.getBody()) == KeyArg::Clamped ? "min(kv, p.seqlenK - 1)" : "kv";
  w.comment(cat("tile.input_grad \"", commentText(op.getName()), "\": ", share, " += Σ ", *ds, "·", fn,
                "(...).partial, d score_mod / d the element"));
  w.comment("the hook reads at (b, h), over this thread's scores (0 where dS' is 0: masked); only when it is wanted");
  w.open(cat("if (p.inputGrads[", inputOf(op), "])"));
  fragments.forEachElement(w, "kSTiles",
                           {cat("const int q = ", FragmentTiles::threadRow("(i / 2)"), ";"),
                            cat("const int kv = blockKvTile * kBlockN + ", keyOffset(), "8 * nt + fragCol + i % 2;"),
                            cat("if (", *ds, "[mt][nt][i] != 0.f) {"), "  int index;", "  float partial;",
                            cat("  ", fn, "(", *s, "[mt][nt][i], b, h, q, ", kv, ", p, index, partial);"),
                            cat("  ", share, " += ", *ds, "[mt][nt][i] * partial;"), "}"});
  w.close();
  return success();
}

void BackwardPrinter::printSinkGradTerms(const std::string &d) {
  for (Operation *op : inputReads) {
    auto grad = dyn_cast<SinkGradOp>(op);
    if (!grad)
      continue;
    w.comment(cat("tile.sink_grad \"", commentText(grad.getName()), "\": row i's term of dσ·dσ/d element, -e^(σ - LSE_i)·D_i·",
                  "partial, into ", inputShares.lookup(op)));
    w.open(cat("if (lane == 0 && p.inputGrads[", inputOf(op), "])"));
    w.line("float sink, partial;");
    w.line("int index;");
    w.line(cat(functions.lookup(op), "(b, h, p, sink, index, partial);"));
    w.line("const float lseI = p.lse[b * p.lseBatchStride + h * p.lseHeadStride + i];");
    w.line(cat(inputShares.lookup(op), " -= ", ns, "::exp2((sink - lseI) * ", ns, "::kLog2e) * ", d, " * partial;"));
    w.close();
  }
}

void BackwardPrinter::printInputGradShares(const std::string &tile, const std::string &tiles,
                                           const std::string &before) {
  if (inputReads.empty())
    return;
  w.comment("---- input gradients: each read's share of this block, summed over its threads in a fixed order (blockSum),");
  w.comment("into its workspace slot: read r of (b, h) at inputGradPartials[before + ((r * batch + b) * headsQ + h) *");
  w.comment(cat("tiles + tile], ", tile, " of ", tiles, "; the _input_grads kernel sums the slots ----"));
  if (func.getKind() == kBackwardMain)
    w.line("float *const inputGradScratch = reinterpret_cast<float *>(smem);  // free: every tile is used up");
  else
    w.line("__shared__ float inputGradScratch[kWarps];");
  w.line(cat("float *const inputGradSlots = p.inputGradPartials + (long long)p.batch * p.headsQ * ", before, ";"));
  for (auto [slot, op] : llvm::enumerate(inputReads)) {
    const int64_t read = static_cast<int64_t>(slot);
    w.open("");
    w.line(cat("const float sum = ", ns, "::blockSum<kWarps>(", inputShares.lookup(op), ", inputGradScratch",
               func.getKind() == kBackwardMain ? cat(", [] { ", target.computeBarrier(), " }") : std::string(), ");"));
    w.line("if (threadIdx.x == 0)");
    w.line(cat("  inputGradSlots[((", read, "LL * p.batch + b) * p.headsQ + h) * ", tiles, " + ", tile, "] = sum;"));
    w.close();
  }
}

LogicalResult BackwardPrinter::printInputGradsKernel(const std::string &entry, ArrayRef<InputGradOp> mainReads,
                                                     ArrayRef<SinkGradOp> sinkReads) {
  printHeader(entry, "the gradients of the variant's f32 inputs from the blocks' shares (after the main kernel)");
  w.comment("One block. Thread t owns the gradient elements e with e % kThreads == t: it zeroes those some (b, h)");
  w.comment("reads, then adds each (b, h)'s shares, (b, h) ascending, tiles ascending: one fixed order, no atomics.");
  w.line("const long long mainSlots = (long long)params.batch * params.headsQ * params.kvTiles;  // floats a read");
  w.line("const long long sinkSlots = (long long)params.batch * params.headsQ * params.qTiles;");
  std::map<int64_t, std::vector<std::pair<Operation *, int>>> byInput;
  for (auto [slot, op] : llvm::enumerate(mainReads))
    byInput[inputOf(op)].push_back({op, static_cast<int>(slot)});
  for (auto [slot, op] : llvm::enumerate(sinkReads))
    byInput[inputOf(op)].push_back({op, static_cast<int>(slot)});
  for (const auto &[input, reads] : byInput) {
    w.comment(cat("---- input #", input, " ----"));
    w.open(cat("if (params.inputGrads[", input, "])"));
    w.line(cat("float *const grad = params.inputGrads[", input, "];"));
    w.open("for (int pass = 0; pass < 2; ++pass)");
    w.open("for (int blockBatch = 0; blockBatch < params.batch; ++blockBatch)");
    printSequenceView();
    w.open("for (int h = 0; h < params.headsQ; ++h)");
    w.line("const int b = blockBatch;");
    for (auto [op, slot] : reads) {
      bool sink = isa<SinkGradOp>(op);
      w.open("");
      w.line("int index;");
      w.line(sink ? "float sink, partial;" : "float partial;");
      w.line(cat(functions.lookup(op), sink ? "(b, h, p, sink, index, partial);" : "(0.f, b, h, 0, 0, p, index, partial);"));
      w.line("if (static_cast<unsigned>(index) % kThreads != threadIdx.x)");
      w.line("  continue;");
      w.open("if (pass == 0)");
      w.line("grad[index] = 0.f;");
      w.line("continue;");
      w.close();
      const std::string tiles = sink ? "params.qTiles" : "params.kvTiles";
      const std::string region = sink ? cat("mainSlots * ", static_cast<int64_t>(mainReads.size()), " + sinkSlots * ", slot)
                                      : cat("mainSlots * ", slot);
      w.line(cat("const float *const share = params.inputGradPartials + ", region, " + (b * params.headsQ + h) * ",
                 tiles, ";"));
      w.line("float sum = 0.f;");
      w.line(cat("for (int t = 0; t < ", tiles, "; ++t)"));
      w.line("  sum += share[t];");
      w.line("grad[index] += sum;");
      w.close();
    }
    w.close();
    w.close();
    w.close();
    w.close();
  }
  w.close();
  w.line("");
  return success();
}

} // namespace

FailureOr<EmittedKernel> emitBackwardCuda(ModuleOp module) {
  FuncOp pre, main, post;
  for (FuncOp func : module.getOps<FuncOp>()) {
    StringRef kind = func.getKind();
    (kind == kBackwardPreprocess ? pre : kind == kBackwardMain ? main : post) = func;
    if (kind != kBackwardPreprocess && kind != kBackwardMain && kind != kBackwardPostprocess)
      return func.emitOpError() << "is a " << kind << " program in a backward module";
  }
  if (!pre || !main || !post)
    return module.emitOpError() << "is not a backward module of three programs (preprocess, main, postprocess)";
  FailureOr<const TargetFamily *> family = familyOf(main, /*pipelined=*/false);
  if (failed(family) || failed(familyOf(pre, false)) || failed(familyOf(post, false)))
    return failure();
  KernelShape shape = schedule::kernelShapeOf(main);
  for (FuncOp func : {pre, post})
    if (func.getScheduleAttr() != main.getScheduleAttr())
      return func.emitOpError() << "is scheduled unlike the backward's main program";
  if (std::optional<std::string> error = (*family)->checkShape(shape))
    return main.emitOpError() << *error;
  std::unique_ptr<BackwardTarget> backward = (*family)->createBackwardPrinter(shape);
  if (!backward)
    return main.emitOpError() << "is lowered to the '" << (*family)->name()
                              << "' instruction family, which prints no backward programs (no BackwardTarget)";
  if (std::string error = backward->checkMainShape(); !error.empty())
    return main.emitOpError() << error;
  std::unique_ptr<TileTarget> target = (*family)->createPrinter(shape);
  ScheduleAttr schedule = main.getScheduleAttr();
  TargetAttr targetAttr = main.getTargetAttr();

  EmittedKernel kernel;
  KernelInfo &info = kernel.info;
  info.entry = "flashtile_" + identifierText(schedule.getName()) + "_" + identifierText(main.getVariant()) + "_" +
               shape.dtype + "_d" + std::to_string(shape.headDim) +
               (shape.headDimV != shape.headDim ? "_dv" + std::to_string(shape.headDimV) : "") + "_bwd";
  if (failed(describeKernel(main, shape, kBackwardModule, info)))
    return failure();

  ScalarHelpers helpers;
  CudaWriter functions;
  FailureOr<llvm::DenseMap<Operation *, std::string>> hooks = printVariantFunctions(main, *target, helpers, functions);
  if (failed(hooks))
    return failure();
  FailureOr<llvm::DenseMap<Operation *, std::string>> preHooks = printVariantFunctions(pre, *target, helpers, functions);
  if (failed(preHooks))
    return failure();
  hooks->insert(preHooks->begin(), preHooks->end());
  BackwardFacts facts;
  facts.preprocessEntry = info.entry + "_preprocess";
  facts.mainEntry = info.entry;
  facts.postprocessEntry = info.entry + "_postprocess";
  facts.blockM = shape.blockM;
  facts.blockN = shape.blockN;
  facts.threads = shape.warps * kWarpSize;
  facts.mainThreads = facts.threads + backward->roleThreads();
  facts.tensorMaps = backward->loadsInRole();
  facts.tensorMapSwizzle = backward->tensorMapSwizzleBytes();
  BackwardPrinter prePrinter(pre, shape, *backward, helpers, *hooks);
  BackwardPrinter mainPrinter(main, shape, *backward, helpers, *hooks);
  BackwardPrinter postPrinter(post, shape, *backward, helpers, *hooks);
  if (failed(prePrinter.printPreprocess(facts.preprocessEntry)) || failed(mainPrinter.printMain(facts.mainEntry)) ||
      failed(postPrinter.printPostprocess(facts.postprocessEntry)))
    return failure();
  facts.mainSmemBytes = mainPrinter.mainSmemBytes;
  SmallVector<InputGradOp> mainReads;
  SmallVector<SinkGradOp> sinkReads;
  for (Operation *read : distinctReads(main, *hooks))
    mainReads.push_back(cast<InputGradOp>(read));
  for (Operation *read : distinctReads(pre, *hooks))
    sinkReads.push_back(cast<SinkGradOp>(read));
  BackwardPrinter sumPrinter(main, shape, *backward, helpers, *hooks);
  if (!mainReads.empty() || !sinkReads.empty()) {
    facts.inputGradsEntry = info.entry + "_input_grads";
    facts.mainInputTerms = static_cast<int>(mainReads.size());
    facts.preprocessInputTerms = static_cast<int>(sinkReads.size());
    if (failed(sumPrinter.printInputGradsKernel(facts.inputGradsEntry, mainReads, sinkReads)))
      return failure();
  }
  const ArchLimits *limits = archLimits(**family, info.arch);
  if (limits && facts.mainSmemBytes > limits->maxSmemBytes)
    return main.emitOpError() << "needs " << facts.mainSmemBytes << " bytes of shared memory; " << info.arch
                              << " allows " << limits->maxSmemBytes << " per block (reduce block-m or block-n)";
  info.plan = planBackwardLaunches(facts);

  std::string &src = kernel.source;
  src = sourceHeading(info, shape, targetAttr.getIsa(),
                      "attention backward generated by flashtile from tile IR (docs/backward.md).");
  src += backward->prelude();
  src += sequenceStructText();
  if (std::string defs = helpers.definitions(); !defs.empty())
    src += "\n" + defs;
  src += "\n" + functions.str();
  src += prePrinter.text();
  src += mainPrinter.text();
  src += postPrinter.text();
  src += sumPrinter.text();
  return kernel;
}

} // namespace flashtile::codegen
