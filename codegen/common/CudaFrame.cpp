//===- CudaFrame.cpp - the forward kernel's frame and loops --------------===//
//
// KernelPrinter's frame of a kernel (KernelPrinter.h): its entry and parameters, the roles and barriers, the thread
// block's sequence (varlen, packed GQA rows, split-KV), a persistent block's work loop (static or dynamic), the
// split-KV combine kernel, and the K/V loops with their rules and segments.
//===----------------------------------------------------------------------===//
#include "codegen/common/KernelPrinter.h"
#include "codegen/common/PositionsCuda.h"
#include "passes/IR/TileKvDtype.h"

namespace flashtile::codegen::kernel {

LogicalResult KernelPrinter::printKernel(StringRef entry, const KernelShape &shape) {
  assignNames();
  ScheduleAttr schedule = func.getScheduleAttr();
  // __launch_bounds__(threads[, min blocks per SM]): the second caps registers so that many blocks fit on an SM.
  collectRoles();
  if (usesMemoryLayer() && !target.memoryLayer(tmemColumns, memBuffers, channels, roleMemory))
    return func.emitOpError() << "is written with the memory layer (tensor memory, buffers, channels); " << loweredTo()
                              << " does not print it";
  if (failed(checkRoles()))
    return failure();
  std::string bounds = std::to_string(shape.warps * kWarpSize);
  // Roles change their register budgets (setmaxnreg), which needs the count at launch fixed: one block an SM.
  if (shape.minBlocksPerSm > 0 || !roles.empty())
    bounds += ", " + std::to_string(roles.empty() ? shape.minBlocksPerSm : 1);
  w.open("extern \"C\" __global__ void __launch_bounds__(" + bounds + ") " + entry.str() +
         "(const FlashtileFwdParams params" + positionsParam(func) + target.extraKernelParams() +
         (shape.dtype == "e4m3" || shape.kvDtype == "e4m3" ? ", const FlashtileFp8Params fp8" : "") + ")");
  w.comment("---- schedule " + commentSafe(schedule.getName()) + " (#tile.schedule): tile sizes and warps ----");
  w.line("constexpr int kBlockM = " + std::to_string(shape.blockM) + ";  // query rows of this thread block (split-Q)");
  w.line("constexpr int kBlockN = " + std::to_string(shape.blockN) + ";  // keys of a K/V tile");
  w.line("constexpr int kHeadDim = " + std::to_string(shape.headDim) + ";  // Q/K head dim");
  w.line("constexpr int kHeadDimV = " + std::to_string(shape.headDimV) + ";  // V/O head dim");
  w.line("constexpr int kWarps = " + std::to_string(shape.warps) + ";");
  w.line("constexpr int kThreads = kWarps * 32;");
  w.line("");
  const bool loopsOverTiles = persistent();
  if (!loopsOverTiles) {
    printSequence();
    w.separate();
  }

  std::vector<Operand> copied; // in IR order: Q and the first K tile before the loops, V inside them
  func.walk([&](CopyAsyncOp copy) {
    Operand which = operandOf(copy.getOperand());
    if (!llvm::is_contained(copied, which))
      copied.push_back(which);
  });
  target.setup(w, copied);
  w.separate();
  if (!roles.empty() || !barriers.empty()) {
    target.setupRoles(w, roles, barriers);
    w.separate();
  }
  if (!loopsOverTiles) {
    target.setupTile(w);
    w.separate();
  }
  if (failed(printBlock(func.getBodyBlock())))
    return failure();
  if (func->hasAttr(kKvCacheAttr))
    printKvCacheCheck(w);
  w.close();
  return success();
}

LogicalResult KernelPrinter::checkRoles() {
  if (roles.empty() && barriers.empty())
    return success(); // no roles to lay out (setupRoles is not called either)
  std::optional<RoleProblem> problem = target.checkRoles(roles);
  if (!problem)
    return success();
  Operation *at = func;
  for (auto [op, index] : roleIndex)
    if (index == problem->role)
      at = op;
  return at->emitOpError() << problem->has << "; " << loweredTo() << " " << problem->needs;
}

void KernelPrinter::collectRoles() {
  for (Operation &op : func.getBodyBlock()) {
    if (auto role = dyn_cast<RoleOp>(op)) {
      bool computes = role.walk([](InitStateOp) { return WalkResult::interrupt(); }).wasInterrupted();
      RoleMemoryInfo uses;
      role.walk([&](Operation *inner) {
        uses.allocates |= isa<TmemAllocOp, TmemFreeOp>(inner);
        uses.issuesMma |= isa<MmaQkOp, MmaPvOp, MmaCommitOp>(inner);
        uses.accessesBuffers |= isa<MemLoadOp, MemStoreOp>(inner);
      });
      roleMemory.push_back(uses);
      roleIndex[role] = static_cast<int>(roles.size());
      roles.push_back({role.getName().str(), static_cast<int>(role.getWarps()), static_cast<int>(role.getRegs()),
                       computes, role.getPingpong()});
    } else if (auto barrier = dyn_cast<BarrierOp>(op)) {
      auto buffer = barrier.getBuffer().getDefiningOp<BufferOp>();
      BarrierInfo info;
      info.operand = buffer ? operandOf(buffer.getOperand()) : Operand::K;
      info.slots = static_cast<int>(barrier.getBarrier().getType().getSlots());
      info.bytes = barrier.getBytes().value_or(0);
      info.arrivals = barrier.getArrivals().value_or(0);
      static const char *kOperandNames[] = {"Q", "K", "V"};
      info.name = std::string(info.bytes > 0 ? "full" : "empty") + kOperandNames[static_cast<int>(info.operand)];
      barrierIndex[barrier.getBarrier()] = static_cast<int>(barriers.size());
      barriers.push_back(info);
    } else if (auto tmem = dyn_cast<TmemOp>(op)) {
      tmemColumns = static_cast<int>(tmem.getTmem().getType().getColumns());
    } else if (isa<TmemBufferOp, SmemBufferOp>(op)) {
      Value buffer = op.getResult(0);
      auto type = cast<MemBufType>(buffer.getType());
      MemBufferInfo info;
      info.space = type.getSpace() == MemorySpace::Tensor   ? MemSpace::Tensor
                   : type.getSpace() == MemorySpace::Shared ? MemSpace::Shared
                                                            : MemSpace::Registers;
      info.rows = static_cast<int>(type.getRows());
      if (RankedTensorType tensor = type.getTensor()) {
        info.cols = tensor.getRank() == 2 ? static_cast<int>(tensor.getDimSize(1)) : 1;
        bool accumulates = llvm::any_of(buffer.getUsers(), [&](Operation *user) {
          auto pv = dyn_cast<MmaPvOp>(user);
          return pv && pv.getO() == buffer;
        });
        info.tile = tensor.getRank() == 1              ? MemTile::Rows
                    : accumulates                     ? MemTile::Acc
                    : tensor.getElementType().isF32() ? MemTile::Scores
                                                      : MemTile::Probabilities;
      } else {
        info.tile = MemTile::Stats;
      }
      if (auto tb = dyn_cast<TmemBufferOp>(op)) {
        info.column = static_cast<int>(tb.getColumn());
        info.name = "tmem" + std::to_string(memBuffers.size());
      } else {
        info.name = identifierText(cast<SmemBufferOp>(op).getName());
      }
      memBufferIndex[buffer] = static_cast<int>(memBuffers.size());
      memBuffers.push_back(info);
    } else if (auto channel = dyn_cast<ChannelOp>(op)) {
      channelOf[channel.getFull()] = {static_cast<int>(channels.size()), true};
      channelOf[channel.getEmpty()] = {static_cast<int>(channels.size()), false};
      channels.push_back({identifierText(channel.getName()), static_cast<int64_t>(channel.getFullArrivals()),
                          static_cast<int64_t>(channel.getEmptyArrivals()), channel->hasAttr(kPairEmptyAttr)});
    } else if (auto queue = dyn_cast<WorkQueueOp>(op)) {
      for (bool full : {true, false}) {
        BarrierInfo info;
        info.workUnit = true;
        info.bytes = full ? static_cast<int64_t>(sizeof(int32_t)) : 0;
        info.arrivals = full ? 0 : static_cast<int64_t>(queue.getArrivals());
        info.name = full ? "fullWork" : "emptyWork";
        barrierIndex[full ? queue.getFull() : queue.getEmpty()] = static_cast<int>(barriers.size());
        barriers.push_back(info);
      }
    }
  }
}

bool KernelPrinter::mmaTurnEdge(Operation *mma, bool first) {
  RoleOp role = mma->getParentOfType<RoleOp>();
  if (!role || !role.getPingpong())
    return false;
  auto isAsyncMma = [](Operation &op) {
    return (isa<QkOp>(op) && cast<QkOp>(op).getToken()) || (isa<PvOp>(op) && cast<PvOp>(op).getToken());
  };
  Block *block = mma->getBlock();
  Operation *edge = nullptr;
  for (Operation &op : *block)
    if (isAsyncMma(op) && (!edge || !first))
      edge = &op;
  return edge == mma;
}

FailureOr<std::string> KernelPrinter::slotOf(LoadOp load, Operation *user) {
  auto select = load.getSlot() ? load.getSlot().getDefiningOp<SlotOp>() : SlotOp();
  if (!select || !select.getIndex())
    return user->emitOpError() << "reads a tile whose tile.load is not from a tile.slot of a K/V ring position";
  return operand(select.getIndex(), user);
}

void KernelPrinter::printSequence() {
  int64_t lptGroupBlocks = func.getScheduleAttr().getLptGroupBlocks();
  if (splitKv()) {
    w.comment("---- the tile of this thread block: split `split` of the keys of Q tile qTile of query head blockHead");
    w.comment(std::string("of batch entry blockBatch (split-KV). The launch grid is (Q tiles x numSplits, ") +
              (packed() ? "headsKv" : "headsQ") + ", batch), the");
    w.comment("split fastest; Q tiles from the last to the first. ----");
    w.line("const int split = blockIdx.x % params.numSplits;");
    if (packed()) {
      w.comment("GQA packing: grid.y runs over K/V heads; the block's rows are its headsPerKv query heads x the query");
      w.comment("rows (row r: query row r / headsPerKv of head blockKvHead·headsPerKv + r % headsPerKv), so K/V are");
      w.comment("read once per group. blockHead, the group's first query head, is what a KV-range rule would see");
      w.comment("(rows are packed only in programs whose rules do not read the head).");
      w.line("const int qTile = gridDim.x / params.numSplits - 1 - blockIdx.x / params.numSplits, blockBatch = "
             "blockIdx.z, blockKvHead = blockIdx.y;");
      w.line("const int headsPerKv = params.headsQ / params.headsKv, blockHead = blockKvHead * headsPerKv;");
    } else {
      w.line("const int qTile = gridDim.x / params.numSplits - 1 - blockIdx.x / params.numSplits, blockBatch = "
             "blockIdx.z, blockHead = blockIdx.y;");
    }
    w.separate();
    printSequenceView();
    if (func->hasAttr(kKvCacheAttr))
      printKvCacheView(w, hasKvDtype(func) ? "unsigned char" : "unsigned short");
    w.line(packed() ? "if (qTile * kBlockM >= p.seqlenQ * headsPerKv)" : "if (qTile * kBlockM >= p.seqlenQ)");
    w.line("  return;  // varlen: the grid covers the longest sequence, and this one ends before this block's rows");
    w.comment("The keys of this split (" + tileDimWords({Dim::SplitBegin, Dim::SplitEnd}) +
              "): whole K/V tiles, numSplits ranges of");
    w.comment("equal length; a split past the sequence's end is [0, 0), empty at a tile boundary, so that no tile");
    w.comment("is visited (its block stores O = 0, LSE = -inf).");
    w.line("const long long kvTiles = (p.seqlenK + kBlockN - 1) / kBlockN;");
    w.line("const long long splitTiles = (kvTiles + params.numSplits - 1) / params.numSplits;");
    w.line("p.splitBegin = static_cast<int>(min(split * splitTiles * kBlockN, (long long)p.seqlenK));");
    w.line("p.splitEnd = static_cast<int>(min(p.splitBegin + splitTiles * kBlockN, (long long)p.seqlenK));");
    w.line("if (p.splitBegin >= p.seqlenK)");
    w.line("  p.splitBegin = p.splitEnd = 0;");
    return;
  }
  w.comment("---- the tile of this thread block: Q tile qTile of query head blockHead of batch entry blockBatch ----");
  w.comment("The launch grid is (Q tiles, headsQ, batch); blocks start in about linear order (x fastest), and take");
  w.comment("Q tiles from the last (under causal masks the longest walk) to the first, so the last wave is light.");
  if (lptGroupBlocks == 0) {
    w.comment("Block order lptGroupBlocks = 0: heaviest first within each (batch, head) pair, pair after pair.");
    w.line("const int qTile = gridDim.x - 1 - blockIdx.x, blockBatch = blockIdx.z, blockHead = blockIdx.y;");
  } else {
    const std::string group = std::to_string(lptGroupBlocks);
    w.comment("Block order lptGroupBlocks = " + group +
              ": heaviest first across the grid, in groups of (batch, head) pairs");
    w.comment("of at least " + group + " blocks (a group's K/V stay in L2), Q tile by Q tile, pair by pair");
    w.comment("(the block-order model on the host, Fa2Config.h gridTile, is tested against this code).");
    printGroupedBlockOrder(w, lptGroupBlocks, "qTiles");
    w.line("const int qTile = qTiles - 1 - inGroup / groupSize;");
    w.line("const int pair = groupFirst + inGroup % groupSize;");
    w.line("const int blockBatch = pair / gridDim.y, blockHead = pair % gridDim.y;");
  }
  w.separate();
  printSequenceView();
  if (func->hasAttr(kCtaPairAttr)) {
    // The two CTAs of a cluster pair (Q tiles 2m and 2m + 1) run or return together: the pair's MMAs need both.
    w.line("if ((qTile & ~1) * kBlockM >= p.seqlenQ)");
    w.line("  return;  // varlen: this sequence ends before the rows of this block's cluster pair");
  } else {
    w.line("if (qTile * kBlockM >= p.seqlenQ)");
    w.line("  return;  // varlen: the grid covers the longest sequence, and this one ends before this block's rows");
  }
  printUnsplit();
}

void KernelPrinter::printUnsplit() {
  bool readsSplit = func.walk([](DimOp dim) {
                          return dim.getDim() == Dim::SplitBegin || dim.getDim() == Dim::SplitEnd ? WalkResult::interrupt()
                                                                                                  : WalkResult::advance();
                        })
                        .wasInterrupted();
  if (readsSplit)
    w.line("p.splitBegin = 0, p.splitEnd = p.seqlenK;  // " + tileDimWords({Dim::SplitBegin, Dim::SplitEnd}) +
           ": not split");
}

void KernelPrinter::printSequenceView() {
  w.comment("---- the sequence of this thread block: batch entry blockBatch ----");
  w.comment("Varlen (cuSeqlensQ set): sequence z = blockBatch is rows [cuSeqlensQ[z], cuSeqlensQ[z + 1]) of the");
  w.comment("packed Q, O and LSE and rows [cuSeqlensK[z], cuSeqlensK[z + 1]) of K and V, clamped to the packed rows");
  w.comment("(seqlenQ and seqlenK hold total_q and total_k). p is that sequence's view, base pointers and lengths, so");
  w.comment("every seqlen below (" + tileDimWords({Dim::SeqlenQ, Dim::SeqlenK}) +
            "), in the variant's functions too, is its own.");
  w.comment("Only fields that differ are rewritten: the others stay kernel-argument reads. p.keyOffset is");
  w.comment("b·seqlen_k dense and the sequence's first key row (cuSeqlensK[z], clamped) varlen; p.invSoftmaxScale");
  w.comment("is tile.softmax_scale inverse.");
  openSequenceView(w);
  w.line("p.q = static_cast<const unsigned short *>(params.q) + qBegin * params.qRowStride;");
  const std::string kvElement = hasKvDtype(func) ? "unsigned char" : "unsigned short"; // an e4m3 KV cache: bytes
  w.line("p.k = static_cast<const " + kvElement + " *>(params.k) + kBegin * params.kRowStride;");
  w.line("p.v = static_cast<const " + kvElement + " *>(params.v) + kBegin * params.vRowStride;");
  w.line("p.o = static_cast<unsigned short *>(params.o) + qBegin * params.oRowStride;");
  w.line("p.lse = params.lse + qBegin;");
  w.line("p.seqlenQ = qEnd - qBegin;");
  w.line("p.seqlenK = kEnd - kBegin;");
  w.line("p.keyOffset = kBegin;");
  w.close();
  if (takesPositions(func))
    printPositionsView(w);
}

void KernelPrinter::printWorkTile(const std::string &step) {
  w.comment("---- the work of this persistent block: units of two Q tiles of one (batch, head) pair, Q tile qTiles - 1 - k");
  w.comment("then Q tile k, which together cost the same under a causal mask (qTiles + 1 tile walks), so that taking");
  w.comment("one unit in every gridDim.x balances the blocks; the middle tile of an odd qTiles is a unit alone. Units");
  w.comment("are numbered pair by pair, query head fastest (a grouped-query group's heads, which read one K/V head,");
  w.comment("run side by side); step " + step + " is the heavy (even) or light (odd) tile of this block's unit " +
            step + " / 2. ----");
  w.line("const int halfTiles = (params.qTiles + 1) / 2;");
  w.line("const int unit = blockIdx.x + " + step + " / 2 * gridDim.x;");
  w.line("if (unit >= halfTiles * params.headsQ * params.batch)");
  w.line("  break;  // no unit left for this block");
  w.line("const int unitK = unit % halfTiles, pair = unit / halfTiles;");
  w.line("const int qTile = " + step + " % 2 == 0 ? params.qTiles - 1 - unitK : unitK;");
  w.line("if (" + step + " % 2 == 1 && qTile == params.qTiles - 1 - unitK)");
  w.line("  continue;  // the middle tile of an odd qTiles: its unit has one tile");
  w.line("const int blockBatch = pair / params.headsQ, blockHead = pair % params.headsQ;");
}

LogicalResult KernelPrinter::printDynamicWorkTile(WorkLoopOp loop, const std::string &count) {
  w.comment(
      "---- the dynamic scheduler: unit u is Q tile qTiles - 1 - u / pairs of (batch, head) pair u % pairs (query");
  w.comment("head fastest), so the counter hands out the tiles with the most keys under a causal mask first, across");
  w.comment("all pairs (longest-processing-time first; varlen: the highest tile index first, as its sequence's rows");
  w.comment("allow). The producer takes each unit with one atomicAdd on the launch's counter (params.tileCounter,");
  w.comment("zeroed on the launch's stream before the kernel) and hands it to the consumers through the work queue's");
  w.comment("cell (fullWork/emptyWork); a unit past the last ends every role's loop. ----");
  w.line("const int pairs = params.headsQ * params.batch, units = params.qTiles * pairs;");
  if (loop.getTake()) {
    target.barrierWait(w, barrierIndex.lookup(loop.getQueueEmpty()), count);
    w.line("int unit = atomicAdd(params.tileCounter, 1);");
    w.comment("varlen: a tile past its sequence's rows has no work; the producer takes the next unit instead");
    w.open("while (params.cuSeqlensQ && unit < units)");
    w.line("const int z = unit % pairs / params.headsQ, t = params.qTiles - 1 - unit / pairs;");
    w.line("const int qBegin = min(max(params.cuSeqlensQ[z], 0), params.seqlenQ);");
    w.line("if (t * kBlockM < min(max(params.cuSeqlensQ[z + 1], qBegin), params.seqlenQ) - qBegin)");
    w.line("  break;");
    w.line("unit = atomicAdd(params.tileCounter, 1);");
    w.close();
    if (!target.publishWorkUnit(w, barrierIndex.lookup(loop.getQueueFull()), "unit"))
      return notPrinted(loop, "takes its work tiles from a work queue (the dynamic scheduler)");
  } else if (!target.receiveWorkUnit(w, barrierIndex.lookup(loop.getQueueFull()), count, "unit")) {
    return notPrinted(loop, "receives its work tiles through a work queue (the dynamic scheduler)");
  }
  w.line("if (unit >= units)");
  w.line("  break;  // the launch's tiles are all taken");
  w.line("const int qTile = params.qTiles - 1 - unit / pairs, pair = unit % pairs;");
  w.line("const int blockBatch = pair / params.headsQ, blockHead = pair % params.headsQ;");
  return success();
}

LogicalResult KernelPrinter::printWorkLoop(WorkLoopOp loop) {
  if (splitKv() || packed())
    return loop.emitOpError() << "loops over work tiles in a program that splits its keys or packs query heads; the "
                                 "CUDA printer runs persistent blocks over whole Q tiles of one head";
  Block &body = loop.getBody().front();
  names.push();
  std::string count = names.unique("tileCount");
  std::vector<std::string> carried;
  for (auto [arg, init] : llvm::zip(loop.getCarriedArgs(), loop.getInits())) {
    FailureOr<std::string> initial = operand(init, loop);
    if (failed(initial))
      return failure();
    carried.push_back(names.unique("carried"));
    w.line("int " + carried.back() + " = " + *initial + ";  // carried from work tile to work tile");
  }
  std::string step = names.unique("step");
  if (loop.isDynamic()) {
    w.comment("==== the work tiles of this persistent block, one a unit taken at run time (dynamic scheduler); " +
              count + ": the tiles it ran before ====");
    w.open("for (int " + count + " = 0;;)");
  } else {
    w.comment("==== the work tiles of this persistent block, two a unit; " + count + ": the tiles it ran before ====");
    w.open("for (int " + step + " = 0, " + count + " = 0;; ++" + step + ")");
  }
  scalars.bind(loop.getTileCount(), count);
  for (auto [arg, name] : llvm::zip(loop.getCarriedArgs(), carried))
    scalars.bind(arg, name);
  if (loop.isDynamic()) {
    if (failed(printDynamicWorkTile(loop, count))) {
      names.pop();
      return failure();
    }
    w.separate();
    printSequenceView();
  } else {
    printWorkTile(step);
    w.separate();
    printSequenceView();
    w.line("if (qTile * kBlockM >= p.seqlenQ)");
    w.line("  continue;  // varlen: the tiles cover the longest sequence, and this one ends before this tile's rows");
  }
  printUnsplit();
  w.separate();
  target.setupTile(w);
  w.separate();
  bool savedRows = rowsDeclared, savedBounds = boundsCommented;
  rowsDeclared = boundsCommented = false;
  LogicalResult printed = success();
  for (Operation &op : body.without_terminator())
    if (failed(printed = printOp(&op)))
      break;
  rowsDeclared = savedRows;
  boundsCommented = savedBounds;
  if (failed(printed)) {
    names.pop();
    return failure();
  }
  auto yield = cast<YieldOp>(body.getTerminator());
  std::vector<std::string> next;
  for (Value v : yield.getValues()) {
    FailureOr<std::string> e = operand(v, yield);
    if (failed(e))
      return failure();
    next.push_back(*e);
  }
  // Every carried value is computed from this tile's before any is replaced.
  for (size_t i = 0; i < carried.size(); ++i)
    w.line("const int next" + std::to_string(i) + " = " + next[i] + ";");
  for (size_t i = 0; i < carried.size(); ++i)
    w.line(carried[i] + " = next" + std::to_string(i) + ";");
  w.line("++" + count + ";");
  w.close();
  names.pop();
  for (auto [result, name] : llvm::zip(loop.getResults(), carried))
    scalars.bind(result, name);
  w.separate();
  return success();
}

LogicalResult KernelPrinter::printCombineKernel(StringRef entry) {
  StoreSplitOp store = *func.getBody().getOps<StoreSplitOp>().begin();
  std::string sinkFn = store.hasSink() ? functionOf.lookup(store) : std::string();
  w.line("");
  w.comment("==== the combine step of split-KV: merges each query row's numSplits partial O and LSE ====");
  w.comment("LSE = ln(sum_i e^LSE_i" + std::string(sinkFn.empty() ? "" : " + e^s") +
            "), O = sum_i e^(LSE_i - LSE) O_i: exact, in fp32. Launch: grid (seqlenQ, headsQ, batch), one");
  w.comment("query row a block, block (32 * kWarps); varlen: grid.x = maxSeqlenQ. Launched only when");
  w.comment("numSplits > 1 (with one split the attention kernel writes O and LSE itself).");
  w.open("extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kCombineWarps * kWarpSize) + ") " +
         entry.str() + "(const FlashtileFwdParams params" + positionsParam(func) + ")");
  w.line("constexpr int kHeadDimV = " + std::to_string(func.getHeadDimV()) + ";  // V/O head dim");
  w.line("constexpr int kRows = " + std::to_string(kCombineRowsPerBlock) + ", kWarps = " + std::to_string(kCombineWarps) +
         ";  // query rows of a block; its warps share the row's splits");
  w.line("const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;");
  w.line("const int blockBatch = blockIdx.z, blockHead = blockIdx.y;");
  printSequenceView();
  w.line("const int b = blockBatch, h = blockHead, q = blockIdx.x * kRows;");
  w.line("if (q >= p.seqlenQ)");
  w.line("  return;  // past the (varlen: this sequence's) query rows");
  if (!target.combineRow(w, sinkFn))
    return notPrinted(store, "splits the key range, whose partials a combine kernel merges");
  w.close();
  return success();
}

LogicalResult KernelPrinter::printBlock(Block &block) {
  for (Operation &op : block)
    if (failed(printOp(&op)))
      return failure();
  return success();
}

LogicalResult KernelPrinter::printKvRange(KvRangeOp range) {
  if (!rowsDeclared && packed()) {
    w.comment("---- the query rows of this thread block, as the variant's KV-range rules see them: block rows");
    w.comment("[qTile·kBlockM, ...) are query rows row / headsPerKv of the group's heads ----");
    w.line("const int qFirst = qTile * kBlockM / headsPerKv;");
    w.line("const int qLast = (min(qTile * kBlockM + kBlockM, p.seqlenQ * headsPerKv) - 1) / headsPerKv;");
    w.separate();
    rowsDeclared = true;
  }
  if (!rowsDeclared) {
    w.comment("---- the query rows of this thread block, as the variant's KV-range rules see them ----");
    w.line("const int qFirst = qTile * kBlockM;");
    w.line("const int qLast = min(qFirst + kBlockM, p.seqlenQ) - 1;");
    w.separate();
    rowsDeclared = true;
  }
  std::string kind = stringifyRangeKind(range.getKind()).str();
  std::string lo = kind + "Lo", hi = kind + "Hi";
  std::string keys = "[" + lo + ", " + hi + ")";
  if (range.getKind() == RangeKind::May)
    w.comment("---- KV-range rule \"may\" (variant): no row of this block attends a key outside " + keys +
              ": tiles out there are skipped ----");
  else
    w.comment("---- KV-range rule \"full\" (variant): every row of this block attends every key in " + keys +
              ": tiles in there need no mask ----");
  Block &rule = range.getRule().front();
  scalars.bind(rule.getArgument(0), "qFirst");
  scalars.bind(rule.getArgument(1), "qLast");
  // The batch entry and query head of the block (printSequence).
  scalars.bind(rule.getArgument(2), "blockBatch");
  scalars.bind(rule.getArgument(3), "blockHead");
  for (Operation &op : rule.without_terminator()) {
    if (!ScalarEmitter::isScalarOp(&op))
      return op.emitOpError() << "cannot be printed in a KV-range rule; rules hold scalar arith/math ops";
    if (failed(scalars.emit(&op)))
      return failure();
  }
  auto yield = cast<YieldOp>(rule.getTerminator());
  for (auto [result, value] : llvm::zip(range.getResults(), yield.getValues())) {
    if (result.use_empty())
      continue;
    FailureOr<CExpr> e = scalars.expr(value, yield);
    if (failed(e))
      return failure();
    FailureOr<std::string> name = scalars.declare(result.getType(), *e, result == range.getLo() ? lo : hi);
    if (failed(name))
      return failure();
    scalars.bind(result, *name);
  }
  w.separate();
  return success();
}

LogicalResult KernelPrinter::printKvLoop(KvLoopOp loop) {
  if (!loop.isBounded())
    return loop.emitOpError() << "has no bounds; run tile-split-boundary before emitting CUDA";
  FailureOr<std::string> lo = operand(loop.getLower(), loop), hi = operand(loop.getUpper(), loop);
  if (failed(lo) || failed(hi))
    return failure();
  Block &body = loop.getBody().front();
  bool masked = !body.getOps<MaskOp>().empty();
  std::string segment = stringifySegment(loop.getSegment()).str();
  std::replace(segment.begin(), segment.end(), '_', ' ');
  bool descending = loop.getOrder() == KvOrder::Descending;
  w.comment("---- K/V tiles [" + *lo + ", " + *hi + "): " + segment + " segment, " + (masked ? "masked" : "no mask") +
            ", walked " + stringifyKvOrder(loop.getOrder()).str() + " ----");
  names.push();
  std::string j = names.unique("j");
  w.open(descending ? "for (int " + j + " = " + *hi + " - 1; " + j + " >= " + *lo + "; --" + j + ")"
                    : "for (int " + j + " = " + *lo + "; " + j + " < " + *hi + "; ++" + j + ")");
  scalars.bind(loop.getTileIndex(), j);
  LogicalResult printed = printBlock(body);
  w.close();
  names.pop();
  w.separate();
  return printed;
}

LogicalResult KernelPrinter::printKvWalk(KvWalkOp walk) {
  FailureOr<std::string> lo = operand(walk.getLower(), walk), hi = operand(walk.getUpper(), walk);
  if (failed(lo) || failed(hi))
    return failure();
  bool descending = walk.getOrder() == KvOrder::Descending;
  w.comment("---- K/V tiles [" + *lo + ", " + *hi + "), walked " + stringifyKvOrder(walk.getOrder()).str() +
            ": every tile the loop segments visit, in their order ----");
  names.push();
  std::string j = names.unique("j");
  w.open(descending ? "for (int " + j + " = " + *hi + " - 1; " + j + " >= " + *lo + "; --" + j + ")"
                    : "for (int " + j + " = " + *lo + "; " + j + " < " + *hi + "; ++" + j + ")");
  scalars.bind(walk.getBody().front().getArgument(0), j);
  LogicalResult printed = printBlock(walk.getBody().front());
  w.close();
  names.pop();
  w.separate();
  return printed;
}

LogicalResult KernelPrinter::printLoops(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](KvRangeOp range) { return printKvRange(range); })
      .Case([&](KvLoopOp loop) { return printKvLoop(loop); })
      .Case([&](KvWalkOp walk) { return printKvWalk(walk); })
      .Case([&](WorkLoopOp loop) { return printWorkLoop(loop); })
      .Case([&](YieldOp yield) -> LogicalResult {
        // A K/V loop's state: the registers carry it over. Carried scores (the next tile's, from its tile.qk) move
        // into the loop's; a carried P is rounded into the loop's P registers.
        auto loop = dyn_cast<KvLoopOp>(yield->getParentOp());
        if (!loop)
          return success();
        for (auto [arg, value] : llvm::zip(loop.getCarriedArgs(), yield.getValues().drop_front(2))) {
          auto qk = value.getDefiningOp<QkOp>();
          auto update = value.getDefiningOp<SoftmaxUpdateOp>();
          if (!qk && !update)
            continue;
          FailureOr<std::string> to = registers(arg, op);
          FailureOr<std::string> from = registers(qk ? qk.getS() : update.getS(), op);
          if (failed(to) || failed(from))
            return failure();
          if (qk)
            target.carryScores(w, *to, *from);
          else
            target.roundProbabilities(w, *from, *to, /*carried=*/true);
        }
        return success();
      })
      .Default([](Operation *) -> LogicalResult { llvm_unreachable("printOp sends only these ops here"); });
}
} // namespace flashtile::codegen::kernel

void flashtile::codegen::printGroupedBlockOrder(CudaWriter &w, int64_t groupBlocks, const char *tiles) {
  const std::string t = tiles, group = std::to_string(groupBlocks);
  w.line("const int blockLinear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);");
  w.line("const int " + t + " = gridDim.x, pairs = gridDim.y * gridDim.z;");
  w.line("const int groupPairs = min(pairs, (" + group + " + " + t + " - 1) / " + t + ");");
  w.line("const int groupFirst = blockLinear / (groupPairs * " + t + ") * groupPairs;  // first pair of this group");
  w.line("const int groupSize = min(groupPairs, pairs - groupFirst);              // the last group may be smaller");
  w.line("const int inGroup = blockLinear - groupFirst * " + t + ";");
}
