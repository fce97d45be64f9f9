//===- BackwardEmitter.cpp - scheduled backward programs to CUDA C++ ------===//
//
// Why one file of ~1030 lines: it is the one walk over a backward module's ops, each printed by a short function; the
// roles, the q loop and the target hooks already live in BackwardKernels.cpp and the families' files.
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
#include "codegen/common/BackwardPrinter.h"

namespace flashtile::codegen::backward {


void BackwardPrinter::printHeader(const std::string &entry, const std::string &what, int roleThreads,
                                  const std::string &extraParams, int64_t groupBlocks) {
  w.comment(what);
  // A kernel with roles fixes its register count at launch (one block an SM): setmaxnreg moves registers between them.
  const std::string bounds = roleThreads ? cat(shape.warps * kWarpSize + roleThreads, ", 1")
                                         : std::to_string(shape.warps * kWarpSize);
  w.open("extern \"C\" __global__ void __launch_bounds__(" + bounds + ") " + entry +
         "(const FlashtileFwdParams params" + positionsParam(func) + extraParams + ")");
  w.comment("---- schedule " + commentText(func.getScheduleAttr().getName()) +
            " (#tile.schedule): tile sizes and warps ----");
  w.line(cat("constexpr int kBlockM = ", shape.blockM, ";  // rows of a Q tile"));
  w.line(cat("constexpr int kBlockN = ", shape.blockN, ";  // keys of a K/V tile"));
  w.line(cat("constexpr int kHeadDim = ", shape.headDim, ";  // Q/K head dim"));
  w.line(cat("constexpr int kHeadDimV = ", shape.headDimV, ";  // V/O head dim"));
  w.line(cat("constexpr int kWarps = ", shape.warps, ";"));
  w.line("constexpr int kThreads = kWarps * 32;");
  if (groupBlocks == 0) {
    w.line("const int blockBatch = blockIdx.z, blockHead = blockIdx.y;");
  } else {
    w.comment("---- launch order (lpt-group-blocks " + std::to_string(groupBlocks) +
              "): the grid's blocks start in about linear order; outside deterministic");
    w.comment("mode (whose turns follow the grid) block i takes K/V tile index by tile index across a group of (batch,");
    w.comment("head) pairs of at least that many blocks, so the longest walks under a causal mask (the first K/V");
    w.comment("tiles) of every pair of the group start before the shorter ones ----");
    w.line("int blockBatch = blockIdx.z, blockHead = blockIdx.y, blockKvIndex = blockIdx.x;");
    w.open("if (!params.deterministic)");
    printGroupedBlockOrder(w, groupBlocks, "kvTiles");
    w.line("const int pair = groupFirst + inGroup % groupSize;");
    w.line("blockKvIndex = inGroup / groupSize;");
    w.line("blockBatch = pair / gridDim.y;");
    w.line("blockHead = pair % gridDim.y;");
    w.close();
  }
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
  if (takesPositions(func))
    printPositionsView(w);
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

FailureOr<std::string> BackwardPrinter::staged(Value a, Operation *user, bool early) {
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
  if (early)
    target.earlyStagedBarrier(w);
  else
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
    // The load role may stage LSE·log2(e) (+inf where no key was seen) for the exp2 of tile.probs.
    const bool log2Rows = lse && lseRowsInLog2();
    if (log2Rows && !llvm::all_of(load->getUsers(), [](Operation *user) { return isa<ProbsOp>(user); }))
      return load.emitOpError() << "is read by an op other than tile.probs, but the load role stages LSE·log2(e) "
                                   "(the probabilities' exp2 operand) for this program";
    if (shape.swapScores && rowsInShared && target.loadsInRole() &&
        llvm::all_of(load->getUsers(), [&](Operation *user) {
          return lse ? isa<ProbsOp>(user) : isa<SoftmaxGradOp>(user);
        })) {
      // Transposed score tiles: a thread's row values are 2 · kSTiles query rows, as many registers as a score tile
      // of S and dP each; read each pair where it is used instead (rowsAtUse), beside the two accumulators in flight.
      rowsAtUse[load.getResult()] = lse ? "sLse" : "sDelta";
      w.comment(cat("tile.load ", stringifyOperand(operand).str(), "[qt]: read from ", lse ? "sLse" : "sDelta",
                    " where it is used, a float2 of query rows 8·nt + fragCol, + 1 (the load role's rows)"));
      return success();
    }
    w.comment(cat("tile.load ", stringifyOperand(operand).str(), "[qt]: this thread's rows",
                  log2Rows ? " (LSE·log2(e); a padded row: +inf, it saw no key)"
                  : lse    ? " (a padded row: -inf, it saw no key)"
                           : " (a padded row: 0)"));
    w.line(cat("float ", name, fragments.rowValueDims(), ";"));
    if (shape.swapScores && rowsInShared && target.loadsInRole()) {
      // Transposed score tiles: a thread's row values are the pairs of query rows 8·nt + fragCol, + 1 of its n8
      // columns, read as float2 (8-byte aligned: fragCol is even); the load role wrote -inf and 0 past seqlen_q.
      w.openUnrolledFor("nt", "kSTiles");
      w.line(cat("const float2 pair = *reinterpret_cast<const float2 *>(", lse ? "sLse" : "sDelta",
                 " + 8 * nt + fragCol);  // rows past seqlen_q: ", lse ? "-inf" : "0", " (the load role's)"));
      w.line(cat(name, "[nt][0] = pair.x;"));
      w.line(cat(name, "[nt][1] = pair.y;"));
      w.close();
      return success();
    }
    fragments.forEachRowValue(w, [&] {
      w.line(cat("const int q = ", fragments.rowValueQuery(), ";"));
      std::string source =
          rowsInShared ? cat(lse ? "sLse" : "sDelta", "[q - qt * kBlockM]") : cat(lse ? "gLse" : "gDelta", "[q]");
      w.line(cat(name, fragments.rowValue(), " = q < p.seqlenQ ? ", source, " : ",
                 log2Rows ? ns + "::kPosInf" : lse ? ns + "::kNegInf" : std::string("0.f"), ";"));
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
  if (shape.swapKv) {
    printSwappedKvStore(*acc, out, accum, width);
    w.close();
    printTurnPass(dkvTurn);
    ++dkvStoresPrinted;
    return success();
  }
  // KernelShape::stagedKv: the rows go through shared memory (the tiles' buffers from sK on, free once every
  // computing warp is past the walk), a row's bytes plus kStagedKvPadBytes apart, and leave a bulk copy a row from the
  // warp that holds them; a dK or dV whose rows are not 16-byte aligned in global memory takes the fragments' own
  // stores, GQA/MQA their fp32 adds.
  const bool staged = shape.stagedKv;
  const std::string pitch = cat(width * 2 + kStagedKvPadBytes);
  if (staged) {
    if (dkvStoresPrinted == 0)
      w.line(cat(target.computeBarrier(), "  // every computing warp is past the walk: the tiles' buffers are free"));
    w.line(cat("unsigned char *const sOut = sK + ", stagedKvOffset(dk), ";  // ", out, "'s staged rows, ", pitch,
               " bytes apart"));
    w.line(cat("const bool staged = p.headsQ == p.headsKv && (reinterpret_cast<unsigned long long>(gOut) | "
               "static_cast<unsigned long long>(p.", out, "RowStride) * 2u) % 16u == 0;"));
  }
  w.openUnrolledFor("mt", "kKvMTiles");
  w.openUnrolledFor("r", "2");
  w.line("const int key = blockKvTile * kBlockN + kvRowGroup * kKvWarpRows + 16 * mt + fragRow + 8 * r;");
  w.line("if (key >= p.seqlenK)");
  w.line("  continue;");
  w.openUnrolledFor("nt", cat(warpCols(width) / 8));
  w.line(cat("const int col = kvColPart * ", warpCols(width), " + 8 * nt + fragCol;"));
  const std::string packed = cat(pack, "(", *acc, "[mt][nt][2 * r], ", *acc, "[mt][nt][2 * r + 1])");
  if (staged) {
    w.open("if (staged)");
    w.line(cat("*reinterpret_cast<unsigned *>(sOut + (key - blockKvTile * kBlockN) * ", pitch, " + col * 2) = ",
               packed, ";"));
    w.close();
  }
  w.open(staged ? "else if (p.headsQ == p.headsKv)" : "if (p.headsQ == p.headsKv)");
  w.line(cat("*reinterpret_cast<unsigned *>(gOut + key * p.", out, "RowStride + col) = ", packed, ";"));
  w.close();
  w.open("else");
  w.line(cat("float *const dst = p.", accum, " + ((long long)(p.keyOffset + key) * p.headsKv + hKv) * ", width,
             " + col;"));
  w.line(target.reduceAdd2("dst", cat(*acc, "[mt][nt][2 * r]"), cat(*acc, "[mt][nt][2 * r + 1]")));
  w.close();
  w.close();
  w.close();
  w.close();
  if (staged) {
    w.open("if (staged)");
    w.comment("this warp's rows written: each leaves in one bulk copy, a lane a row");
    w.line(target.bulkStoreFence());
    w.line("__syncwarp();");
    w.open("for (int row = lane; row < kKvWarpRows; row += 32)");
    w.line("const int local = kvRowGroup * kKvWarpRows + row, key = blockKvTile * kBlockN + local;");
    w.line("if (key < p.seqlenK)");
    w.line(cat("  ", target.bulkStoreRow(cat("gOut + key * p.", out, "RowStride"), cat("sOut + local * ", pitch),
                                          cat(width * 2, "u"))));
    w.close();
    w.line(target.bulkStoreCommit());
    w.close();
  }
  w.close();
  if (staged && dkvStoresPrinted + 1 == dkvStores)
    w.line(cat(target.bulkStoreDrain(), "  // the staged rows read before the block exits"));
  printTurnPass(dkvTurn);
  ++dkvStoresPrinted;
  return success();
}

/// KernelShape::stagedKv: where dK's (dk) or dV's staged rows start after sK: dK first, then dV, each kBlockN rows of
/// its width in bf16/fp16 plus kStagedKvPadBytes (a row's 4-byte fragment stores then fall on distinct banks).
std::string BackwardPrinter::stagedKvOffset(bool dk) const {
  return dk ? std::string("0") : cat("kBlockN * ", shape.headDim * 2 + kStagedKvPadBytes);
}

std::string BackwardPrinter::kvAccDims(int64_t width) const {
  if (shape.swapKv)
    return cat("[", width / kvColRows(), "][kKvKeyTiles]");
  return cat("[kKvMTiles][", warpCols(width) / 8, "]");
}

/// printStore's element loop for a transposed accumulator (KernelShape::swapKv): element (mt, nt, 2r + e) is column
/// kKvColRows·mt + 16·kvRowGroup + fragRow + 8r of key kvColPart·kBlockN / kKeyWarps + 8nt + fragCol + e. Neighbouring
/// columns are in lanes 4 apart: each pair of lanes swaps one value (a shuffle), so that the even row stores columns
/// (c, c + 1) of key e = 0 and the odd row those of key e = 1, 4 bytes a store as in the untransposed layout.
void BackwardPrinter::printSwappedKvStore(const std::string &acc, const char *out, const char *accum, int64_t width) {
  w.comment("transposed (tile.swap_kv): rows are columns of the head dim, columns keys; lanes 4 apart swap a value so");
  w.comment("that each stores two neighbouring columns of one key");
  w.line("const bool oddRow = fragRow % 2 != 0;");
  w.openUnrolledFor("mt", cat(width / kvColRows()));
  w.openUnrolledFor("r", "2");
  w.line("const int col = kKvColRows * mt + 16 * kvRowGroup + (fragRow & ~1) + 8 * r;");
  w.openUnrolledFor("nt", "kKvKeyTiles");
  w.line(cat("const float mine0 = ", acc, "[mt][nt][2 * r], mine1 = ", acc, "[mt][nt][2 * r + 1];"));
  w.comment("the even row sends its key-1 value and keeps key 0; the odd row sends its key-0 value and keeps key 1");
  w.line("const float theirs = __shfl_xor_sync(0xffffffffu, oddRow ? mine0 : mine1, 4);");
  w.line("const float lo = oddRow ? theirs : mine0, hi = oddRow ? mine1 : theirs;");
  w.line("const int key = blockKvTile * kBlockN + kvColPart * (kBlockN / kKeyWarps) + 8 * nt + fragCol + (oddRow ? 1 : 0);");
  w.line("if (key >= p.seqlenK)");
  w.line("  continue;");
  w.open("if (p.headsQ == p.headsKv)");
  w.line(cat("*reinterpret_cast<unsigned *>(gOut + key * p.", out, "RowStride + col) = ", pack, "(lo, hi);"));
  w.close();
  w.open("else");
  w.line(cat("float *const dst = p.", accum, " + ((long long)(p.keyOffset + key) * p.headsKv + hKv) * ", width,
             " + col;"));
  w.line(target.reduceAdd2("dst", "lo", "hi"));
  w.close();
  w.close();
  w.close();
  w.close();
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

/// The loop updates its accumulators in place: one carried twice (CSE merges dK's and dV's tile.zero_acc) gets
/// registers of its own for its second place.
LogicalResult BackwardPrinter::bindCarriedAccumulators(QLoopOp loop) {
  llvm::StringSet<> carried;
  for (auto [arg, init, result] : llvm::zip(loop.getAccArgs(), loop.getInits(), loop.getResults())) {
    FailureOr<std::string> acc = regs(init, loop);
    if (failed(acc))
      return failure();
    std::string name = *acc;
    if (!carried.insert(name).second) {
      name = names.unique("acc");
      int64_t width = cast<AccType>(init.getType()).getCols();
      w.line(cat("float ", name, kvAccDims(width), "[4];  // ", *acc, " carried a second time"));
      w.openUnrolledFor("mt", shape.swapKv ? cat(width / kvColRows()) : std::string("kKvMTiles"));
      w.openUnrolledFor("nt", shape.swapKv ? std::string("kKvKeyTiles") : cat(warpCols(width) / 8));
      w.openUnrolledFor("i", "4");
      w.line(cat(name, "[mt][nt][i] = ", *acc, "[mt][nt][i];"));
      w.close();
      w.close();
      w.close();
    }
    registers[arg] = name;
    registers[result] = name;
  }
  return success();
}

LogicalResult BackwardPrinter::printQLoop(QLoopOp loop) {
  if (!loop.isBounded())
    return loop.emitOpError() << "is not bounded; run tile-bound-q-loop before emitting CUDA";
  FailureOr<CExpr> lo = scalars.expr(loop.getLower(), loop), hi = scalars.expr(loop.getUpper(), loop);
  if (failed(lo) || failed(hi))
    return failure();
  if (failed(bindCarriedAccumulators(loop)))
    return failure();
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
  openWalk(lo->text, hi->text);
  names.push();
  scalars.bind(loop.getTileIndex(), "qt");
  stagedThisIteration = 0;
  stagedIn.clear();
  stageOrder.clear();
  for (Operation &op : loop.getBody().front()) {
    Value a = isa<DotTnOp>(op) && !target.dotReadsRegisters() ? cast<DotTnOp>(op).getA()
              : isa<AccumulateOp>(op)                        ? cast<AccumulateOp>(op).getA()
                                                             : Value();
    if (a && !llvm::is_contained(stageOrder, a))
      stageOrder.push_back(a);
  }
  w.line(cat("const int warpRow0 = qt * kBlockM + ", shape.keyWarps > 1 ? "warpM" : "warp",
             " * kWarpRows;  // first query row of this warp"));
  rowsInShared = ahead && (ring || target.stagesRows());
  if (ring && shape.stagingRing) {
    w.comment("no barrier first (tile.staging_ring): this iteration stages into its ring stage's buffer, whose last");
    w.comment("readers (the GEMMs of two iterations back) every warpgroup waited for before the last staging barrier");
  } else if (ring) {
    w.line(cat(target.computeBarrier(), "  // every warp is done with the last iteration's staging buffers"));
  }
  if (ring) {
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
      .Case([&](ZeroAccOp zero) { return printZeroAcc(zero); })
      .Case([&](QkOp qk) { return printQk(qk); })
      .Case([&](ScaleOp scale) { return printScale(scale); })
      .Case([&](ScoreModOp mod) { return printScoreMod(mod); })
      .Case([&](MaskOp mask) { return printMask(mask); })
      .Case([&](ProbsOp probs) { return printProbs(probs); })
      .Case([&](SoftmaxGradOp grad) { return printSoftmaxGrad(grad); })
      .Case([&](ScoreGradOp grad) { return printScoreGrad(grad); })
      .Case([&](DotTnOp dot) { return printDotTn(dot); })
      .Case([&](AccumulateOp acc) { return printAccumulate(acc); })
      .Case([&](InputGradOp grad) { return printInputGrad(grad); })
      .Default([&](Operation *) -> LogicalResult {
        return op->emitOpError() << "is not printed in a backward_main program by the backward printer";
      });
}

LogicalResult BackwardPrinter::printZeroAcc(ZeroAccOp zero) {
  std::string name = names.unique("acc");
  registers[zero.getResult()] = name;
  int64_t width = zero.getAcc().getType().getCols();
  if (shape.swapKv)
    w.comment(cat("tile.zero_acc: ", name, ", transposed: this warp's rows of each m-tile of the ", width,
                  " columns x its key group's keys, fp32"));
  else
    w.comment(cat("tile.zero_acc: ", name, ", this warp's key rows x ", warpCols(width), " of ", width,
                  " columns, fp32"));
  w.line(cat("float ", name, kvAccDims(width), "[4] = {};"));
  return success();
}

LogicalResult BackwardPrinter::printQk(QkOp qk) {
  Operation *op = qk;
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
}

LogicalResult BackwardPrinter::printScale(ScaleOp scale) {
  Operation *op = scale;
  if (failed(regs(scale.getS(), op)))
    return failure();
  if (foldedScales.erase(op)) {
    registers[scale.getResult()] = registers.lookup(scale.getS());
    return success(); // printed by the tile.softmax_grad before it
  }
  // S's scale whose only way is through masks to tile.probs joins log2(e) in the probabilities' exp2 (the
  // forward's FoldScaleIntoSoftmax): one multiply a score fewer. Masks look at coordinates only, and
  // softmax_scale > 0 (the runtime rejects other scales), so a masked -inf stays -inf.
  Value v = scale.getResult();
  while (v.hasOneUse() && isa<MaskOp>(*v.user_begin()))
    v = v.user_begin()->getResult(0);
  if (v.hasOneUse() && isa<ProbsOp>(*v.user_begin())) {
    scaleInProbs.insert(*v.user_begin());
    registers[scale.getResult()] = registers.lookup(scale.getS());
    w.comment(cat("tile.scale: folded into tile.probs' exp2 (softmax_scale·log2(e))",
                  v != scale.getResult() ? " after the masks" : ""));
    return success();
  }
  fragments.scale(w, overwrite(scale.getS(), scale, "scaled"));
  return success();
}

LogicalResult BackwardPrinter::printScoreMod(ScoreModOp mod) {
  Operation *op = mod;
  if (failed(regs(mod.getS(), op)))
    return failure();
  fragments.scoreMod(w, overwrite(mod.getS(), mod, "modded"), "blockKvTile", functions.lookup(op),
                     keyArgOf(mod.getBody()));
  return success();
}

LogicalResult BackwardPrinter::printMask(MaskOp mask) {
  Operation *op = mask;
  if (failed(regs(mask.getS(), op)))
    return failure();
  bool readsInputs = mask.getBody().walk([](InputOp) { return WalkResult::interrupt(); }).wasInterrupted();
  fragments.mask(w, overwrite(mask.getS(), mask, "masked"), "blockKvTile", functions.lookup(op),
                 keyArgOf(mask.getBody()), readsInputs);
  return success();
}

LogicalResult BackwardPrinter::printProbs(ProbsOp probs) {
  Operation *op = probs;
  auto atUse = rowsAtUse.find(probs.getLse());
  FailureOr<std::string> lse = atUse != rowsAtUse.end() ? FailureOr<std::string>(atUse->second)
                                                        : regs(probs.getLse(), op);
  if (failed(lse) || failed(regs(probs.getS(), op)))
    return failure();
  std::string p = overwrite(probs.getS(), probs, "probs");
  w.comment(cat("tile.probs: ", p, " = exp(S - LSE) = exp2(S·log2(e) - LSE·log2(e))",
                scaleInProbs.count(op) ? " (S unscaled: S·softmax_scale·log2(e))" : "",
                "; a masked score (-inf) and a"));
  w.comment("row whose LSE is -inf give 0");
  // The scale folded in (scaleInProbs): S·softmax_scale·log2(e) in the exp2's one FFMA.
  const bool scaled = scaleInProbs.erase(op);
  auto exp2Of = [&](const std::string &lseLog2) {
    return cat(p, "[mt][nt][i] = ", ns, "::exp2(", p, "[mt][nt][i] * ",
               scaled ? std::string("p.scaleLog2") : ns + "::kLog2e", " - ", lseLog2, ");");
  };
  if (atUse != rowsAtUse.end()) {
    w.comment(cat("LSE·log2(e) of query rows 8·nt + fragCol, + 1 from ", *lse, " (+inf: no key, P = 0)"));
    fragments.forEachElement(w, "kSTiles", {rowPairAt(*lse, "lsePair")}, {exp2Of("(i % 2 ? lsePair.y : lsePair.x)")});
    return success();
  }
  std::string lseLog2 = *lse;
  if (!lseRowsInLog2()) {
    lseLog2 = "lseLog2";
    w.line(cat("float lseLog2", fragments.rowValueDims(), ";"));
    const std::string value = fragments.rowValue();
    fragments.forEachRowValue(w, [&] {
      w.line(cat("lseLog2", value, " = ", *lse, value, " == ", ns, "::kNegInf ? ", ns, "::kPosInf : ", *lse, value,
                 " * ", ns, "::kLog2e;"));
    });
  }
  fragments.forEachElement(w, "kSTiles", {exp2Of(lseLog2 + fragments.rowValueOfScore())});
  return success();
}

std::string BackwardPrinter::rowPairAt(const std::string &rows, const std::string &name) const {
  return cat("const float2 ", name, " = *reinterpret_cast<const float2 *>(", rows, " + 8 * nt + fragCol);");
}

LogicalResult BackwardPrinter::printSoftmaxGrad(SoftmaxGradOp grad) {
  Operation *op = grad;
  auto atUse = rowsAtUse.find(grad.getDelta());
  FailureOr<std::string> p = regs(grad.getP(), op),
                         delta = atUse != rowsAtUse.end() ? FailureOr<std::string>(atUse->second)
                                                          : regs(grad.getDelta(), op);
  if (failed(p) || failed(delta) || failed(regs(grad.getDp(), op)))
    return failure();
  std::string ds = overwrite(grad.getDp(), grad, "ds");
  // D read where it is used (rowsAtUse): a float2 of the n8 tile's two query rows.
  std::vector<std::string> perTile;
  std::string rowD = *delta + fragments.rowValueOfScore();
  if (atUse != rowsAtUse.end()) {
    perTile = {rowPairAt(*delta, "deltaPair")};
    rowD = "(i % 2 ? deltaPair.y : deltaPair.x)";
  }
  // dS's one use scaling it by softmax_scale (the gradient of S = scale·QKᵀ) folds in: P∘(dP·scale − D·scale),
  // one FFMA and one FMUL an element (the row's D·scale computed once), the same value up to rounding.
  auto scale = grad->hasOneUse() ? dyn_cast<ScaleOp>(*grad->user_begin()) : ScaleOp();
  if (scale && scale.getS() == grad.getResult() && grad.getResult().hasOneUse()) {
    foldedScales.insert(scale);
    w.comment(cat("tile.softmax_grad and the scale after it: ", ds, " = P∘(dP - D)·softmax_scale"));
    fragments.forEachElement(
        w, "kSTiles", perTile,
        {cat(ds, "[mt][nt][i] = ", *p, "[mt][nt][i] * (", ds, "[mt][nt][i] * p.softmaxScale - ", rowD,
             " * p.softmaxScale);")});
    return success();
  }
  w.comment(cat("tile.softmax_grad: ", ds, " = P∘(dP - D)"));
  fragments.forEachElement(w, "kSTiles", perTile,
                           {cat(ds, "[mt][nt][i] = ", *p, "[mt][nt][i] * (", ds, "[mt][nt][i] - ", rowD, ");")});
  return success();
}

LogicalResult BackwardPrinter::printScoreGrad(ScoreGradOp grad) {
  Operation *op = grad;
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
      {cat("const int q = ", fragments.scoreQuery(), ";"),
       cat("const int kv = ", fragments.scoreKey("blockKvTile"), ";"), cat("if (", ds, "[mt][nt][i] != 0.f)"),
       cat("  ", ds, "[mt][nt][i] *= ", fn, "(", *s, "[mt][nt][i], b, h, q, ", kv, ", p);")});
  return success();
}

LogicalResult BackwardPrinter::printDotTn(DotTnOp dot) {
  Operation *op = dot;
  FailureOr<std::string> acc = regs(dot.getAcc(), op);
  FailureOr<SharedTile> b = sharedTile(dot.getB(), op);
  if (failed(acc) || failed(b))
    return failure();
  const bool early = dot->hasAttr(tile::kIssueEarlyAttr);
  FailureOr<std::string> a =
      target.dotReadsRegisters() ? regs(dot.getA(), op) : staged(dot.getA(), op, early);
  if (failed(a))
    return failure();
  registers[dot.getResult()] = *acc;
  if (early)
    target.dotTnEarly(w, *acc, *a, *b, warpCols(b->width));
  else
    target.dotTn(w, *acc, *a, *b, warpCols(b->width));
  return success();
}

LogicalResult BackwardPrinter::printAccumulate(AccumulateOp acc) {
  Operation *op = acc;
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
  const std::string counter = dqTurnCounter("qt");
  printTurnWait(counter, dqTurn("qt"));
  target.dqProduct(w, *b);
  printTurnPass(counter);
  return success();
}

/// The floats of sRows (two buffers of a Q tile's LSE and D rows), rounded up to whole units of the alignment the
/// family's tiles keep (BackwardTarget::sharedMemoryReserve: the swizzle atom on sm90).
int BackwardPrinter::rowsFloats() const {
  const int bytes = 2 * 2 * static_cast<int>(shape.blockM) * 4, unit = std::max(target.sharedMemoryReserve(), 4);
  return (bytes + unit - 1) / unit * unit / 4;
}

/// Two Q-tile buffers also hold the LSE and D rows of a Q tile (fp32) where the family stages them or a load role
/// brings them.
bool BackwardPrinter::stagesRowsInShared() const {
  return qBuffers == 2 && (target.stagesRows() || target.loadsInRole());
}

LogicalResult BackwardPrinter::checkMainLayout() {
  // Staging buffers: the score-layout tiles a Q-tile iteration hands to GEMMs through shared memory (P and dS).
  for (QLoopOp loop : func.getBody().getOps<QLoopOp>()) {
    llvm::SmallPtrSet<void *, 4> staging;
    loop.getBody().walk([&](Operation *op) {
      if (auto dot = dyn_cast<DotTnOp>(op); dot && !target.dotReadsRegisters())
        staging.insert(dot.getA().getAsOpaquePointer());
      if (auto acc = dyn_cast<AccumulateOp>(op))
        staging.insert(acc.getA().getAsOpaquePointer());
    });
    stagingBuffers = std::max<int>(stagingBuffers, staging.size());
  }
  if (shape.keyWarps > 1 &&
      (!target.splitsKeys() || shape.warps % shape.keyWarps != 0 || shape.blockN % (16 * shape.keyWarps) != 0 ||
       shape.headDim % (16 * shape.keyWarps) != 0 ||
       // transposed scores: a warp's m16 are keys, the Q tile's rows the n8 columns (k16 steps of dV's and dK's GEMMs)
       (shape.swapScores ? shape.blockM % 16 != 0 : shape.blockM * shape.keyWarps % (16 * shape.warps) != 0)))
    return func.emitOpError() << "cannot split S's keys " << shape.keyWarps << " ways (tile.key_warps) among "
                              << shape.warps << " warps (block-m " << shape.blockM << ", block-n " << shape.blockN
                              << ", head dim " << shape.headDim << ")"
                              << (target.splitsKeys() ? "" : ": this family prints split-Q only; accepted: 1");
  if (shape.swapScores && !target.dotReadsRegisters())
    return func.emitOpError() << "has transposed score tiles (tile.swap_scores), which this family does not print";
  if (shape.swapKv && (!target.swapsKv() || shape.keyWarps < 2 || shape.swapScores ||
                       shape.blockN % (8 * shape.keyWarps) != 0 || shape.headDim % kvColRows() != 0 ||
                       shape.headDimV % kvColRows() != 0))
    return func.emitOpError() << "cannot print dK and dV transposed (tile.swap_kv) with key-warps " << shape.keyWarps
                              << ", block-n " << shape.blockN << " and head dims " << shape.headDim << ", "
                              << shape.headDimV
                              << (target.swapsKv() ? " (the keys split, n8 tiles a key group, whole m-tiles of columns, "
                                                     "scores not swapped)"
                                                   : ": this family prints them untransposed only");
  const int rowTiles = static_cast<int>(shape.blockN / 16);
  kvColSplit = shape.swapKv || rowTiles % shape.warps == 0 ? 1 : shape.warps / std::max(rowTiles, 1);
  if (shape.swapKv) {
    // checked above
  } else if (shape.blockN % 16 != 0 || rowTiles * kvColSplit % shape.warps != 0 || shape.warps % kvColSplit != 0 ||
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
  const bool rowsStaged = stagesRowsInShared();
  const int rowsBytes = rowsStaged ? rowsFloats() * 4 : 0;
  if (shape.stagingRing && (stagingBuffers != 1 || !target.loadsInRole() || qBuffers != 2))
    return func.emitOpError() << "stages its tiles in a ring (tile.staging_ring), which needs one staged tile a Q-tile "
                                 "iteration (dS, the scores transposed) and the load role's ring of two Q tiles; got "
                              << stagingBuffers << " staged tile(s), " << qBuffers << " Q-tile buffer(s)"
                              << (target.loadsInRole() ? "" : ", no load role");
  mainSmemBytes = static_cast<int>(
      target.tileBytes(shape.blockN, hd) + target.tileBytes(shape.blockN, hdv) +
      qBuffers * target.tileBytes(shape.blockM, hd) +
      (target.singleDoBuffer() ? 1 : qBuffers) * target.tileBytes(shape.blockM, hdv) + rowsBytes +
      stagingBuffers * (shape.stagingRing ? 2 : 1) * target.tileBytes(shape.blockM, shape.blockN) +
      target.roleSharedBytes() +
      target.sharedMemoryReserve());
  if (shape.stagedKv) {
    // dK's and dV's staged rows (printStore) reuse the tiles from sK on: K, V and the Q-tile buffers.
    const int64_t tiles = target.tileBytes(shape.blockN, hd) + target.tileBytes(shape.blockN, hdv) +
                          qBuffers * target.tileBytes(shape.blockM, hd) +
                          (target.singleDoBuffer() ? 1 : qBuffers) * target.tileBytes(shape.blockM, hdv);
    const int64_t staged = shape.blockN * (hd * 2 + kStagedKvPadBytes + hdv * 2 + kStagedKvPadBytes);
    if (!target.storesInBulk() || shape.swapKv || kvColSplit != 1 || staged > tiles)
      return func.emitOpError() << "cannot stage dK and dV through shared memory (tile.dkv_staged) here: it needs "
                                   "a family with bulk copies, each warp holding whole rows (no column split, no "
                                   "tile.swap_kv) and "
                                << staged << " bytes of tiles to reuse; got column split " << kvColSplit
                                << ", swap_kv " << shape.swapKv << ", " << tiles << " bytes of tiles";
  }

  return success();
}

void BackwardPrinter::printMainWarpLayout() {
  w.comment("---- warp layout: S, dP and dQ split the Q tile's rows (split-Q, as the forward), dK and dV the K/V");
  w.comment(
      "tile's rows in m16 tiles, and with more warps than those, each row group's columns in kKvColSplit parts ----");
  if (shape.keyWarps > 1) {
    w.comment("(tile.key_warps: S, dP and dQ split both ways, kWarps / kKeyWarps row groups of kWarpRows query rows,");
    w.comment("each row group's kKeyWarps warps blockN / kKeyWarps keys of S and dP and kHeadDim / kKeyWarps columns of dQ)");
    w.line(cat("constexpr int kKeyWarps = ", shape.keyWarps, ";"));
    if (shape.swapScores) {
      w.comment("(tile.swap_scores: S, dP, P and dS transposed, a warp's m16 rows its 16 keys of its row group's, the");
      w.comment("n8 columns the Q tile's rows; dQ's rows as without the swap)");
      w.line("constexpr int kWarpRows = kBlockN / kWarps, kMTiles = kWarpRows / 16, kSTiles = kBlockM / 8;");
    } else {
      w.line("constexpr int kWarpRows = kBlockM * kKeyWarps / kWarps, kMTiles = kWarpRows / 16, kSTiles = kBlockN / "
             "kKeyWarps / 8;");
    }
  } else {
    w.line("constexpr int kWarpRows = kBlockM / kWarps, kMTiles = kWarpRows / 16, kSTiles = kBlockN / 8;");
  }
  if (shape.swapKv) {
    w.comment("(tile.swap_kv: dK and dV transposed, the head dim's columns in m-tiles of kKvColRows split in m16 rows");
    w.comment("among a key group's warps, the n8 columns the key group's keys)");
    w.line("constexpr int kKvColRows = 16 * kWarps / kKeyWarps, kKvKeyTiles = kBlockN / kKeyWarps / 8;");
  } else {
    w.line(cat("constexpr int kKvColSplit = ", kvColSplit,
               ", kKvWarpRows = kBlockN * kKvColSplit / kWarps, kKvMTiles = kKvWarpRows / 16;"));
  }
  w.line("const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;");
  w.line(target.kvSplitLayout());
  if (shape.keyWarps > 1)
    w.line(target.keySplitLayout());
  w.line("const int fragRow = lane / 4, fragCol = 2 * (lane % 4);");
}

void BackwardPrinter::printMainSharedMemory() {
  const bool rowsStaged = stagesRowsInShared();
  std::vector<std::tuple<std::string, const char *, const char *>> tiles = {{"sK", "kBlockN", "kHeadDim"},
                                                                            {"sV", "kBlockN", "kHeadDimV"}};
  if (qBuffers == 2) {
    w.comment(cat("---- shared memory (", mainSmemBytes, " bytes): sK, sV [kBlockN rows]; two buffers of sQ",
                  target.singleDoBuffer() ? " and one of sDO" : ", sDO", " [kBlockM rows], 16-bit, rows swizzled"));
    w.comment(cat("(", target.tileLayoutWords(), ")",
                  rowsStaged ? ", and of the LSE and D rows (sRows, fp32 [2][2][kBlockM])" : "", "; ", stagingBuffers,
                  " staging buffer(s) [kBlockM][kBlockN] for P and dS ----"));
    for (const char *buffer : {"0", "1"}) {
      tiles.push_back({cat("sQ", buffer), "kBlockM", "kHeadDim"});
      if (buffer[0] == '0' || !target.singleDoBuffer())
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
    // The tiles after the rows keep the family's alignment (the swizzle atom: a Q tile of 80 rows has 1280 bytes of
    // rows, which would leave the staged tiles 256 bytes off it).
    at = rowsFloats() == 2 * 2 * shape.blockM ? std::string("reinterpret_cast<unsigned char *>(sRows + 2 * 2 * kBlockM)")
                                              : cat("reinterpret_cast<unsigned char *>(sRows + ", rowsFloats(), ")");
  }
  if (shape.stagingRing) {
    w.comment("tile.staging_ring: the staged tile's two buffers, the one of the Q tile's ring stage an iteration's (sStage0)");
    w.line(cat("unsigned char *const sStageRing = ", at, ";"));
    at = cat("sStageRing + 2 * ", target.tileBytesExpr("kBlockM", "kBlockN"));
  }
  for (int i = 0; i < (shape.stagingRing ? 0 : stagingBuffers); ++i) {
    w.line(cat("unsigned char *const sStage", i, " = ", at, ";"));
    at = cat("sStage", i, " + ", target.tileBytesExpr("kBlockM", "kBlockN"));
  }
  target.declareRoleShared(w, at);
}

LogicalResult BackwardPrinter::printMain(const std::string &entry) {
  if (failed(checkMainLayout()))
    return failure();
  const int64_t groupBlocks = func.getScheduleAttr().getLptGroupBlocks();
  printHeader(entry, "dK, dV of one K/V tile and its dQ terms (backward_main)", target.roleThreads(),
              target.mainExtraParams(), groupBlocks);
  w.comment("---- the tile of this thread block: K/V tile blockKvTile of query head blockHead (tile.dim kv_tile) ----");
  w.comment("deterministic mode: the K/V tiles in descending order (their dQ adds' turns, printTurnWait)");
  w.line(cat("const int blockKvTile = p.deterministic ? gridDim.x - 1 - blockIdx.x : ",
             groupBlocks ? "blockKvIndex" : "blockIdx.x", ";"));
  w.line("if (blockKvTile * kBlockN >= p.seqlenK)");
  w.line("  return;  // varlen: the grid covers the longest sequence");
  if (rotatesWalk()) {
    w.comment("deterministic mode over a full walk (tile.full_walk): the walk starts at Q tile walkStart and wraps, each");
    w.comment("tile's turns in the order the blocks reach it, where this (batch, head)'s blocks fit half the SMs");
    w.line("const int walkKvTiles = (p.seqlenK + kBlockN - 1) / kBlockN, walkQTiles = (p.seqlenQ + kBlockM - 1) / kBlockM;");
    w.line(cat("const bool walkRotated = p.deterministic && ", ns, "::rotatedWalkFits(walkKvTiles);"));
    w.line(cat("const int walkStart = walkRotated ? ", ns,
               "::rotatedWalkStart(blockKvTile, walkKvTiles, walkQTiles) : 0;"));
  }
  w.line("const int b = blockBatch, h = blockHead;");
  w.line("const int hKv = h / (p.headsQ / p.headsKv);  // grouped-query attention: K/V head of query head h");
  printMainWarpLayout();
  printMainSharedMemory();
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
  target.beginRoles(w, dqTurnCounter("tile"), dqTurn("tile"));
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
    openWalk(lo->text, hi->text);
    target.loadQTile(w, "qt");
    w.close();
  }
  names.pop();
  return success();
}

} // namespace flashtile::codegen::backward

namespace flashtile::codegen {

using namespace backward;

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
  src += sequenceStructText(takesPositions(main));
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
