//===- BackwardKernels.cpp - the backward's small kernels, turns, input gradients -===//
//
// BackwardPrinter's parts beside the main program (BackwardEmitter.cpp): the preprocess (D = rowsum(dO∘O)) and the
// postprocess (the fp32 accumulators converted to the call's dtype), deterministic mode's ordered adds, and the
// gradients of the variant's fp32 inputs with their reduction kernel.
//===----------------------------------------------------------------------===//
#include "codegen/common/BackwardPrinter.h"

namespace flashtile::codegen::backward {

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
  if (std::string index = target.dqFragmentIndex("i - tile * kBlockM", "c"); !index.empty()) {
    w.comment("a whole tile in the main kernel's fragment order (dq-fragments), a tile cut by seqlen_q in rows");
    w.line("const float *const gTile = gAcc + (long long)tile * kBlockM * kHeadDim;");
    w.line("const bool whole = (tile + 1) * kBlockM <= p.seqlenQ;");
    w.line(cat("const float2 x = whole ? make_float2(gTile[", index, "], gTile[",
               target.dqFragmentIndex("i - tile * kBlockM", "c + 1"), "])"));
    w.line("                       : *reinterpret_cast<const float2 *>(gAcc + i * kHeadDim + c);");
  } else {
    w.line(cat("const float2 x = *reinterpret_cast<const float2 *>(gAcc + i * kHeadDim + ",
               target.dqAccumColumn("i", "c"), ");"));
  }
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

// Deterministic mode's order on a Q tile's dQ rows is descending K/V tiles: block n adds once the counter says that
// every block above it passed (N - 1 - n passes). The walk of K/V tile n is one run of Q tiles [lo(n), hi(n)), and
// tile-bound-q-loop's bounds are non-decreasing in n (InvertKvRange.h: the converses of non-decreasing bounds, or the
// constant conservative ends), so the blocks that add into Q tile t are one run of K/V tiles: a block that skips t
// below its walk (t < lo(n)) is above all of them, and one that skips t past its walk (t >= hi(n)) below all of them.
// The first pass their turn on t unordered (their passes only count, and no block that adds into t is among them);
// the second do not pass at all (no block that adds into t comes after them). Before, each skipped tile's pass waited
// for its turn, thread 0 alone: a chain of N - 1 - n round trips through the L2 before a causal block's first GEMM.
void BackwardPrinter::printSkippedTurns(const std::string &firstLo) {
  if (firstLo.empty()) {
    w.comment("deterministic mode: the Q tiles past this walk pass no turn (every block that adds into them is above)");
    return;
  }
  w.comment("deterministic mode: the Q tiles below this walk's first get this K/V tile's pass now, unordered (every");
  w.comment("block that adds into them is below this one)");
  w.open("if (p.deterministic)");
  w.open(cat("for (int qt = threadIdx.x; qt < ", firstLo, " && qt * kBlockM < p.seqlenQ; qt += kThreads)"));
  w.line(cat(ns, "::passTurn(", dqTurnCounter("qt"), ");"));
  w.close();
  w.close();
}

// Non-causal walks (tile.full_walk: every K/V tile's block walks every Q tile) have no such pipeline: every block
// starts at Q tile 0, so on the first tile block n waits for the N - 1 - n blocks above it, one turn after another,
// and the last block of a (batch, head) starts its walk N - 1 turns late. Rotated, block n starts at Q tile
// floor(n·Q / N) and wraps, and a tile's turns go in the order the blocks reach it (rotatedTurn), so no block waits
// for one that is behind it in time. Its price is progress: a block waits for blocks of its (batch, head) both above
// and below it, so all of them must be resident at once; the kernel rotates only when they are at most half the SMs
// (rotatedWalkFits), and the load role walks the same order. fa3's `rotated-walk` knob asks for it (tile.rotated_walk).
bool BackwardPrinter::rotatesWalk() const {
  return func->hasAttr(kFullWalkAttr) && func->hasAttr(kRotatedWalkAttr) && target.loadsInRole();
}

void BackwardPrinter::openWalk(const std::string &lo, const std::string &hi) {
  if (!rotatesWalk()) {
    w.open(cat("for (int qt = ", lo, "; qt < ", hi, "; ++qt)"));
    return;
  }
  w.open(cat("for (int walkStep = ", lo, "; walkStep < ", hi, "; ++walkStep)"));
  w.line(cat("const int qt = ", ns, "::rotatedWalkTile(walkStep, walkStart, ", lo, ", ", hi,
             ");  // walkStart = 0: ascending"));
}

std::string BackwardPrinter::dqTurn(const std::string &tile) const {
  if (!rotatesWalk())
    return kDqTurn;
  return cat("(walkRotated ? ", ns, "::rotatedTurn(", tile, ", blockKvTile, walkKvTiles, walkQTiles) : ", kDqTurn,
             ")");
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
                           {cat("const int q = ", fragments.scoreQuery(), ";"),
                            cat("const int kv = ", fragments.scoreKey("blockKvTile"), ";"),
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

} // namespace flashtile::codegen::backward
