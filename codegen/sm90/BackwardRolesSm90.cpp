//===- BackwardRolesSm90.cpp - the sm90 backward's roles: dQ writer, load warp ===//
//
// The producer warpgroup of fa3's backward main kernel (KernelShape::dqWriter, loadWarp): its shared memory and
// mbarriers, the dQ writer's loop (one bulk reduce-add a Q tile or a row, deterministic mode's turns), the load warp
// (K and V once, then each Q tile's Q and dO by TMA and its LSE and D rows into a ring of two buffers), and the
// computing warps' side of both hand-overs. The class is BackwardTargetSm90.h's; its GEMMs are BackwardSm90.cpp's.
//===----------------------------------------------------------------------===//
#include "codegen/sm90/BackwardTargetSm90.h"

namespace flashtile::codegen::sm90::detail {

void BackwardSm90::dqHandOver(CudaWriter &w, bool start) {
  if (start) {
    w.comment("the dQ writer has read the last tile's sDq (its empty barrier), so this tile's may go there");
    w.line("if (dqUses > 0)");
    w.line("  sm90::mbarrier::wait(&dqBars[1], (dqUses - 1) & 1);");
    return;
  }
  w.comment("this thread's part of the tile's dQ in sDq, visible to the bulk copy engine (the async proxy); the");
  w.comment("writer reads the tile's index after the full barrier's last arrival");
  w.line("sm90::fence::proxyAsync();");
  w.line("if (threadIdx.x == 0)");
  w.line("  *sDqTile = qt;");
  w.line("sm90::mbarrier::arrive(&dqBars[0]);");
  w.line("++dqUses;");
}

void BackwardSm90::declareRoleShared(CudaWriter &w, const std::string &at) const {
  if (!roles())
    return;
  const std::string doBars = shape.singleDo ? ", *const doBars = emptyBars + 2" : "";
  if (!shape.dqWriter) {
    w.comment(cat("the load warp's barriers: K and V landed; the ring's buffers s = 0, 1 full and empty",
                  shape.singleDo ? "; dO's full and empty" : ""));
    w.line(cat("sm90::Mbarrier *const kvBar = reinterpret_cast<sm90::Mbarrier *>(", at,
               "), *const fullBars = kvBar + 1, *const emptyBars = fullBars + 2", doBars, ";"));
    declareLateVBarrier(w, at);
    return;
  }
  w.comment("the dQ writer's buffer (fp32 [kBlockM][kDqPitch]: a Q tile's rows of dq_accum, each padded so that the");
  w.comment("fragment stores do not conflict) and its barriers: dqBars[0] full (kThreads arrivals), dqBars[1] empty (the");
  w.comment("writer's one)");
  w.line(cat("constexpr int kDqPitch = kHeadDim + ", dqPad(), ";"));
  w.line(cat("float *const sDq = reinterpret_cast<float *>(", at, ");"));
  w.line("sm90::Mbarrier *const dqBars = reinterpret_cast<sm90::Mbarrier *>(sDq + kBlockM * kDqPitch);");
  if (shape.loadWarp) {
    w.comment(cat("the load warp's barriers: K and V landed; the ring's buffers s = 0, 1 full and empty",
                  shape.singleDo ? "; dO's full and empty" : ""));
    w.line(cat("sm90::Mbarrier *const kvBar = dqBars + ", kDqBarriers, ", *const fullBars = kvBar + 1, *const emptyBars = "
               "fullBars + 2", doBars, ";"));
  }
  w.line(cat("int *const sDqTile = reinterpret_cast<int *>(dqBars + ",
             kDqBarriers + (shape.loadWarp ? kLoadBarriers + (shape.singleDo ? kDoBarriers : 0) : 0),
             ");  // the Q tile in sDq; -1: the walk is over"));
  declareLateVBarrier(w, at);
}

void BackwardSm90::declareLateVBarrier(CudaWriter &w, const std::string &at) const {
  if (!shape.lateV)
    return;
  w.comment("late-v: V's barrier, the role area's last 8 bytes (the load warp's TMA of V after the first Q tile)");
  w.line(cat("sm90::Mbarrier *const vBar = reinterpret_cast<sm90::Mbarrier *>(", at, " + ", roleSharedBytes() - 8,
             ");"));
}

void BackwardSm90::beginRoles(CudaWriter &w, const std::string &dqCounter, const std::string &dqTurn) {
  if (!roles())
    return;
  const int producerRegs = shape.producerRegs ? shape.producerRegs : 24;
  if (!shape.dqWriter) {
    w.comment("---- roles: warps [0, kWarps) compute and add their dQ terms themselves; warp kWarps + 1, the second of the");
    w.comment("producer warpgroup, is the load warp; the producer warpgroup gives its registers to the computing ones");
    w.comment("(setmaxnreg) ----");
  } else {
    w.comment("---- roles: warps [0, kWarps) compute; warp kWarps, the first of the producer warpgroup, is the dQ");
    w.comment(shape.loadWarp ? "writer, warp kWarps + 1 the load warp; the producer warpgroup gives its registers to the computing"
                             : "writer; the producer warpgroup gives its registers to the computing ones (setmaxnreg) ----");
    if (shape.loadWarp)
      w.comment("ones (setmaxnreg) ----");
  }
  w.open("if (threadIdx.x == 0)");
  if (shape.dqWriter) {
    w.line("sm90::mbarrier::init(&dqBars[0], kThreads);");
    w.line(cat("sm90::mbarrier::init(&dqBars[1], ", shape.dqWriterWarps, ");  // each writer warp's lane 0"));
  }
  if (shape.loadWarp) {
    if (shape.lateV) {
      w.line("sm90::mbarrier::init(kvBar, 1);  // K's TMA");
      w.line("sm90::mbarrier::init(vBar, 1);  // V's TMA (late-v: after the first Q tile's)");
    } else {
      w.line("sm90::mbarrier::init(kvBar, 2);  // K's and V's TMA");
    }
    w.open("for (int s = 0; s < 2; ++s)");
    w.line("sm90::mbarrier::init(&fullBars[s], 32);  // the load warp's lanes (and the TMA's bytes)");
    w.line("sm90::mbarrier::init(&emptyBars[s], kThreads);  // each computing thread");
    w.close();
    if (shape.singleDo) {
      w.line("sm90::mbarrier::init(&doBars[0], 1);  // the load warp's lane 0 (and the TMA's bytes)");
      w.line("sm90::mbarrier::init(&doBars[1], kThreads);  // each computing thread, once dV's GEMM landed");
    }
  }
  w.line("sm90::mbarrier::initFence();");
  w.close();
  w.line("__syncthreads();  // every role sees the initialized barriers");
  w.open("if (warp >= kWarps)");
  w.line(cat("sm90::warpgroup::decreaseRegisters<", producerRegs, ">();"));
  if (!shape.dqWriter)
    return;
  const int writers = shape.dqWriterWarps;
  if (writers > 1) {
    w.comment(cat("dQ writers: warp kWarps and the ", writers - 1, " after the load warp share each tile's rows"));
    w.open(cat("if (warp == kWarps || (warp >= kWarps + 2 && warp < kWarps + ", writers + 1, "))"));
    w.line("const int writer = warp == kWarps ? 0 : warp - kWarps - 1;");
  } else {
    w.open("if (warp == kWarps)");
  }
  w.comment("dQ writer: Q tile after Q tile, as the computing warps hand them over, until the walk is over");
  w.open("for (int use = 0;; ++use)");
  w.line("sm90::mbarrier::wait(&dqBars[0], use & 1);");
  w.comment("lane 0 reads the tile's index (it is also the one that frees the buffer: its arrival orders the read)");
  w.line("const int tile = __shfl_sync(0xffffffffu, lane == 0 ? *static_cast<volatile int *>(sDqTile) : 0, 0);");
  w.line("if (tile < 0)");
  w.line("  break;");
  // Deterministic mode: the writers' adds of a tile are this block's turn on its rows. The first writer takes the
  // turn and passes it on once every writer's adds landed; sDq is handed back as soon as the engine read it, so the
  // computing warps go on while the adds land and the turn passes.
  const std::string writerSync = cat("sm90::namedBarrier::sync(", kWriterBarrier, ", ", writers * 32, ");");
  w.comment("deterministic mode: this block's turn on the tile's rows; its adds land before the turn passes on");
  w.line(cat("int *const turnCounter = p.deterministic ? ", dqCounter, " : nullptr;"));
  w.open("if (turnCounter)");
  w.line(cat("if (", writers > 1 ? "writer == 0 && " : "", "lane == 0)"));
  w.line(cat("  ", ns, "waitTurn(turnCounter, ", dqTurn, ");"));
  w.line(writers > 1 ? writerSync + "  // every writer may add now" : std::string("__syncwarp();"));
  w.close();
  w.line("const int rows = min(kBlockM, p.seqlenQ - tile * kBlockM);");
  if (dqPad()) {
    if (writers > 1) {
      w.comment(cat("the tile's rows below seqlen_q, a bulk reduce-add each, shared by the ", writers,
                    " writers (lane l of"));
      w.comment("writer w the rows w + writers·l, ...): a row of sDq, padded, is a row of dq_accum");
      w.line("#pragma unroll 1");
      w.line(cat("for (int row = writer + ", writers, " * lane; row < rows; row += 32 * ", writers, ")"));
    } else {
      w.comment("the tile's rows below seqlen_q, a bulk reduce-add each (lane l the rows l, l + 32, ...): a row of sDq,");
      w.comment("padded, is a row of dq_accum");
      w.line("#pragma unroll 1");
      w.line("for (int row = lane; row < rows; row += 32)");
    }
    w.line("  sm90::bulkReduceAddF32(gDqAccum + ((long long)tile * kBlockM + row) * kHeadDim, sDq + row * kDqPitch, "
           "kHeadDim * 4u);");
  } else if (shape.dqFragments) {
    w.comment("a whole tile in the fragments' order in sDq and in dq_accum (dq-fragments), a tile cut by seqlen_q in");
    w.comment("rows in both: one bulk reduce-add of its rows below seqlen_q");
    w.line("if (lane == 0)");
    w.line("  sm90::bulkReduceAddF32(gDqAccum + (long long)tile * kBlockM * kHeadDim, sDq, unsigned(rows) * kHeadDim * "
           "4u);");
  } else {
    w.comment("the tile's rows below seqlen_q, contiguous in sDq and in dq_accum: one bulk reduce-add");
    w.line(writers > 1 ? "if (writer == 0 && lane == 0)" : "if (lane == 0)");
    w.line("  sm90::bulkReduceAddF32(gDqAccum + (long long)tile * kBlockM * kHeadDim, sDq, unsigned(rows) * kHeadDim * "
           "4u);");
  }
  w.line("sm90::tma::storeCommit();");
  w.line("sm90::tma::storeWaitRead<0>();  // sDq read: the next tile may go there");
  w.line("__syncwarp();");
  w.line("if (lane == 0)");
  w.line("  sm90::mbarrier::arrive(&dqBars[1]);");
  w.open("if (turnCounter)");
  w.comment("this thread's adds landed and are visible at the GPU's scope, then every writer's; then the release");
  w.line("sm90::tma::storeWait<0>();");
  w.line("__threadfence();");
  w.line(writers > 1 ? writerSync : std::string("__syncwarp();"));
  w.line(cat("if (", writers > 1 ? "writer == 0 && " : "", "lane == 0)"));
  w.line(cat("  ", ns, "passTurn(turnCounter);"));
  w.close();
  w.close();
  if (shape.dqReadsOnly)
    w.comment("dq-last-wait 1: each tile's adds read sDq before the loop went on; the grid's end makes them visible");
  else
    w.line("sm90::tma::storeWait<0>();  // every add landed before the block ends");
  w.close();
}

void BackwardSm90::endRoles(CudaWriter &w) {
  if (!roles())
    return;
  w.line("return;");
  w.close();
  const int consumerRegs = shape.consumerRegs ? shape.consumerRegs : 240;
  w.line(cat("sm90::warpgroup::increaseRegisters<", consumerRegs, ">();"));
  if (shape.dqWriter)
    w.line("int dqUses = 0;  // Q tiles handed to the dQ writer");
  if (shape.loadWarp) {
    w.line("int tileUses = 0;  // Q tiles taken from the load warp's ring");
    w.line(cat("const unsigned qRing = sm90::warp::uniform(", ns, "smemAddress(sQ0)), doRing = sm90::warp::uniform(", ns,
               "smemAddress(sDO0));  // the ring's first buffers (GEMM operands: address())"));
    if (!ringRowsOffset().empty())
      w.line(cat("const unsigned qRingRows = sm90::warp::uniform(", ns, "smemAddress(sQ0)", ringRowsOffset(),
                 "), doRingRows = sm90::warp::uniform(", ns, "smemAddress(sDO0)", ringRowsOffset(),
                 ");  // this warpgroup's rows of them"));
    if (shape.stagingRing)
      w.line(cat("const unsigned stagingRing = sm90::warp::uniform(", ns,
                 "smemAddress(sStageRing));  // the staging ring's first buffer (GEMM operands: address())"));
  }
}

void BackwardSm90::beginLoadRole(CudaWriter &w) {
  w.open("if (warp == kWarps + 1)");
  w.comment("load warp: K and V once, then the walk's Q tiles in order, each into the ring's next buffer once the");
  w.comment("computing warps freed it; TMA coordinates {0, row, 0, head, batch} (varlen: the packed rows, batch 0)");
  w.line("const int qRow0 = params.cuSeqlensQ ? min(max(params.cuSeqlensQ[b], 0), params.seqlenQ) : 0;");
  w.line("const int kRow0 = params.cuSeqlensK ? p.keyOffset : 0;");
  w.line("const int tmaBatch = params.cuSeqlensQ ? 0 : b;");
  if (shape.singleDo)
    w.line("constexpr unsigned kQTileBytes = kBlockM * kHeadDim * 2, kDoTileBytes = kBlockM * kHeadDimV * 2;  // boxes");
  else
    w.line("constexpr unsigned kQTileBytes = kBlockM * (kHeadDim + kHeadDimV) * 2;  // Q's and dO's boxes");
  w.open("if (lane == 0)");
  for (const char *map : {"q", "k", "v", "dO"})
    w.line(cat("sm90::tma::prefetchDescriptor(&maps.", map, ");"));
  w.close();
  w.line("int loads = 0;  // Q tiles loaded");
}

void BackwardSm90::loadOwnTile(CudaWriter &w, const SharedTile &tile, bool k) {
  if (!k && shape.lateV) {
    w.comment(cat("tile.load v: the block's tile into ", tile.name, " after the walk's first Q tile (late-v: loadQTile)"));
    lateVTile = tile;
    return;
  }
  w.comment(cat("tile.load ", k ? "k" : "v", ": the block's tile into ", tile.name));
  printOwnTileLoad(w, tile, k, "kvBar");
}

void BackwardSm90::printOwnTileLoad(CudaWriter &w, const SharedTile &tile, bool k, const std::string &bar) const {
  w.open("if (lane == 0)");
  w.line(cat("sm90::mbarrier::arriveExpectTx(", bar, ", ", tile.rows, " * ", k ? "kHeadDim" : "kHeadDimV", " * 2);"));
  w.line(cat("sm90::tma::load5d(", tile.name, ", &maps.", k ? "k" : "v", ", ", bar,
             ", 0, kRow0 + blockKvTile * kBlockN, 0, hKv, tmaBatch);"));
  w.close();
}

void BackwardSm90::loadQTile(CudaWriter &w, const std::string &qt) {
  w.line("const int stage = loads & 1;");
  w.line("if (loads >= 2)");
  w.line("  sm90::mbarrier::wait(&emptyBars[stage], ((loads >> 1) - 1) & 1);  // its last tile's GEMMs landed");
  w.open("if (lane == 0)");
  w.line("sm90::mbarrier::expectTx(&fullBars[stage], kQTileBytes);");
  w.line(cat("sm90::tma::load5d(stage ? sQ1 : sQ0, &maps.q, &fullBars[stage], 0, qRow0 + ", qt,
             " * kBlockM, 0, h, tmaBatch);"));
  if (!shape.singleDo)
    w.line(cat("sm90::tma::load5d(stage ? sDO1 : sDO0, &maps.dO, &fullBars[stage], 0, qRow0 + ", qt,
               " * kBlockM, 0, h, tmaBatch);"));
  w.close();
  if (shape.lateV && lateVTile) {
    w.comment(cat("late-v: V into ", lateVTile->name, " behind the walk's first Q and dO tiles (vBar)"));
    w.open("if (loads == 0)");
    printOwnTileLoad(w, *lateVTile, false, "vBar");
    w.close();
  }
  w.comment("the LSE and D rows (fp32): LSE·log2(e), the computing warps' exp2 operand, +inf for a row that saw no key");
  w.comment("(LSE -inf) and past seqlen_q, where P is 0; D, 0 past seqlen_q");
  w.line("float *const rows = sRows + stage * 2 * kBlockM;");
  w.open("for (int row = lane; row < kBlockM; row += 32)");
  w.line(cat("const int q = ", qt, " * kBlockM + row;"));
  w.line(cat("const float lse = q < p.seqlenQ ? gLse[q] : ", ns, "kNegInf;"));
  w.line(cat("rows[row] = lse == ", ns, "kNegInf ? ", ns, "kPosInf : lse * ", ns, "kLog2e;"));
  w.line("rows[kBlockM + row] = q < p.seqlenQ ? gDelta[q] : 0.f;");
  w.close();
  w.line("sm90::mbarrier::arrive(&fullBars[stage]);");
  if (shape.singleDo) {
    w.comment("dO into its one buffer once the computing warps released the last tile's (dV's GEMM landed)");
    w.line("if (loads >= 1)");
    w.line("  sm90::mbarrier::wait(&doBars[1], (loads - 1) & 1);");
    w.open("if (lane == 0)");
    w.line("sm90::mbarrier::arriveExpectTx(&doBars[0], kDoTileBytes);");
    w.line(cat("sm90::tma::load5d(sDO0, &maps.dO, &doBars[0], 0, qRow0 + ", qt, " * kBlockM, 0, h, tmaBatch);"));
    w.close();
  }
  w.line("++loads;");
}

void BackwardSm90::acquireQTile(CudaWriter &w) {
  w.comment("this Q tile's Q, dO, LSE and D from the load warp's ring (buffer tileUses % 2)");
  w.line("const int stage = tileUses & 1;");
  w.line("sm90::mbarrier::wait(&fullBars[stage], (tileUses >> 1) & 1);");
  if (shape.singleDo) {
    w.line("sm90::mbarrier::wait(&doBars[0], tileUses & 1);  // this tile's dO in its one buffer");
    w.line("unsigned char *const sQ = stage ? sQ1 : sQ0, *const sDO = sDO0;");
    return acquireRows(w);
  }
  w.line("unsigned char *const sQ = stage ? sQ1 : sQ0, *const sDO = stage ? sDO1 : sDO0;");
  acquireRows(w);
}

void BackwardSm90::acquireRows(CudaWriter &w) {
  w.line(cat("const unsigned ringOffset = stage * static_cast<unsigned>(sQ1 - sQ0);",
             shape.singleDo ? "" : "  // sDO1 - sDO0 alike"));
  w.line("const float *const sLse = sRows + stage * 2 * kBlockM, *const sDelta = sLse + kBlockM;");
  if (shape.stagingRing) {
    w.line("constexpr unsigned kStagingBytes = kBlockM * kBlockN * 2;  // a staged 16-bit tile");
    w.line("unsigned char *const sStage0 = sStageRing + stage * kStagingBytes;  // this stage's staging buffer");
    w.line("const unsigned stagingOffset = stage * kStagingBytes;  // its offset from stagingRing (GEMM operands)");
  }
}

void BackwardSm90::releaseDo(CudaWriter &w) {
  if (!shape.singleDo || doReleased)
    return;
  doReleased = true;
  if (!earlyDot.empty()) {
    w.comment("dV's GEMM, dO's last reader, landed: the load warp may bring the next tile's dO");
    waitFor(w, earlyDot);
  } else {
    w.comment("the tile's GEMMs landed: the load warp may bring the next tile's dO");
  }
  w.line("sm90::mbarrier::arrive(&doBars[1]);");
}

void BackwardSm90::releaseQTile(CudaWriter &w) {
  releaseDo(w);
  doReleased = false;
  earlyDot.clear();
  w.comment("this thread is done with the ring's buffer (its reads, and its warpgroup's GEMMs, landed)");
  w.line("sm90::mbarrier::arrive(&emptyBars[stage]);");
  w.line("++tileUses;");
}

void BackwardSm90::endWalk(CudaWriter &w) {
  if (!shape.dqWriter)
    return;
  w.comment("the walk is over: once the writer has read the last tile, tell it (a tile index of -1)");
  w.line("if (dqUses > 0)");
  w.line("  sm90::mbarrier::wait(&dqBars[1], (dqUses - 1) & 1);");
  w.line("if (threadIdx.x == 0)");
  w.line("  *sDqTile = -1;");
  w.line("sm90::mbarrier::arrive(&dqBars[0]);");
}

} // namespace flashtile::codegen::sm90::detail
