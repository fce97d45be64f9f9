//===- MemoryLayerSm100.cpp - FA4's own roles on the memory layer --------===//
//
// TileTargetSm100's printing of programs written with the IR's memory layer (TileTargetSm100.h): the roles' warps
// and registers, tensor memory, the channels, the softmax and correction warpgroups. No SM100 GPU exists here:
// every kernel this file prints is checked by NVRTC, ptxas and its SASS, never run.
//===----------------------------------------------------------------------===//
#include "codegen/sm100/TileTargetSm100.h"

namespace flashtile::codegen::sm100::detail {

//===----------------------------------------------------------------------===//
// The memory layer: FA4's own roles (schedules/fa4, roles = 1)
//
//   warps          the warpgroup roles (the softmax warpgroups, Q tile g's at warps [4g, 4g + 4), then the
//                  correction warpgroup) in IR order, then one warpgroup of one-warp roles (the MMA warp, the load
//                  warp; its other warps idle): a warp reaches the tensor-memory lanes of its index mod 4, so a
//                  role that moves 128 rows is a whole, aligned warpgroup. setmaxnreg per warpgroup, the roles'
//                  budgets (the one-warp roles' warpgroup: the largest of theirs), printed before the roles.
//   tensor memory  the IR's buffers at their columns (S_g, P_g over S_g, O_g), one tcgen05.alloc by the allocating
//                  warp; the base reaches the other roles through the word tcgen05.alloc writes, read after the
//                  channel that says "allocated"
//   channels       one mbarrier each for full and empty, one slot; a role arrives once: its threads' tcgen05 work
//                  and shared-memory writes fenced (tcgen05.fence::before_thread_sync), its warpgroup's named barrier
//                  (a warp: __syncwarp), one thread's mbarrier.arrive.release; a wait is every thread's
//                  mbarrier.try_wait.parity then tcgen05.fence::after_thread_sync. tile.mma_commit is
//                  tcgen05.commit by the MMA warp's issuing thread (lane 0, which issued the MMAs it covers)
//   softmax        S in C fragments (tcgen05.ld.16x256b), the common register-tile math, P back over S
//                  (tcgen05.st.16x128b); alpha (lanes 4k of each quad: its two rows) and the final m, l to shared
//                  memory
//   correction     one row a thread (tcgen05.ld/st.32x32b.x32, the warp's 32 lanes): O zeroed, rescaled in place
//                  when a row of the warp has alpha != 1 (the threshold keeps alpha exactly 1 where no max moved),
//                  and at the end O / l and LSE of each Q tile stored (tile.store's tile.q_rows: the tile's rows)
//===----------------------------------------------------------------------===//

bool TileTargetSm100::memoryLayer(int tmemColumns, const std::vector<MemBufferInfo> &buffers,
                                  const std::vector<ChannelInfo> &channels,
                                  const std::vector<RoleMemoryInfo> &roleMemory) {
  if (!memoryLayerShape(shape) || tmemColumns < kTmemMinAllocColumns || tmemColumns > kTmemColumns ||
      !std::has_single_bit(static_cast<unsigned>(tmemColumns)))
    return false;
  int sharedFloats = 0;
  smemOffset.assign(buffers.size(), -1);
  for (size_t i = 0; i < buffers.size(); ++i) {
    const MemBufferInfo &b = buffers[i];
    if (b.rows != kMmaM)
      return false; // every buffer is a Q tile's 128 rows (tensor memory's lanes)
    if (b.space == MemSpace::Tensor) {
      if (b.tile == MemTile::Rows || b.tile == MemTile::Stats || b.column < 0 || b.column >= tmemColumns)
        return false;
    } else if (b.space == MemSpace::Shared) {
      if (b.tile != MemTile::Rows && b.tile != MemTile::Stats)
        return false;
      smemOffset[i] = sharedFloats;
      sharedFloats += b.tile == MemTile::Rows ? kMmaM : 2 * kMmaM;
    } else if (b.tile != MemTile::Stats) {
      return false; // registers buffers hold row statistics only
    }
  }
  const int groups = groupsOf(shape);
  if (sharedFloats * 4 > groups * kMmaM * kMemoryLayerRowBytes ||
      (channels.size() * 2 + 1) * 8 > static_cast<size_t>(kMemoryLayerBarrierBytes) - 64 * 8)
    return false;
  memoryMode = true;
  tmemAllocColumns = tmemColumns;
  memBuffers = buffers;
  channelList = channels;
  roleUses = roleMemory;
  const int fragmentTiles[] = {shape.blockN / 8};
  const int widths[] = {kRowChunk};
  preludeText = fragmentPrelude(kFragmentNamespace) +
                ::flashtile::codegen::sm100::prelude(widths, fragmentTiles, /*ctaPair=*/shape.ctaPair);
  return true;
}

std::optional<RoleProblem> TileTargetSm100::checkMemoryRoles(const std::vector<RoleInfo> &roleList) const {
  int warpgroupRoles = 0, warpRoles = 0;
  int64_t registers = 0;
  int lastRegisters = 0;
  for (size_t i = 0; i < roleList.size(); ++i) {
    const RoleInfo &role = roleList[i];
    const RoleMemoryInfo &uses = roleUses[i];
    if (role.pingpong)
      return RoleProblem{static_cast<int>(i), "takes GEMM turns (pingpong)", "one MMA warp issues every tcgen05.mma"};
    if (role.warps == kWarpsPerWarpgroup) {
      ++warpgroupRoles;
      registers += int64_t(kWarpgroupThreads) * role.regs;
    } else if (role.warps == 1) {
      if (uses.accessesBuffers)
        return RoleProblem{static_cast<int>(i), "reads or writes buffers with one warp",
                           "moves a Q tile's 128 tensor-memory lanes with a warpgroup (a warp reaches 32 of them)"};
      ++warpRoles;
      lastRegisters = std::max(lastRegisters, role.regs);
    } else {
      return RoleProblem{static_cast<int>(i), cat("has ", role.warps, " warps"),
                         "lays out roles of one warp or one warpgroup"};
    }
  }
  registers += int64_t(kWarpgroupThreads) * lastRegisters;
  const int launch = launchRegisters(shape.warps * kWarpSize);
  if (warpRoles < 1 || warpRoles > kWarpsPerWarpgroup || kWarpsPerWarpgroup * (warpgroupRoles + 1) != shape.warps)
    return RoleProblem{-1, cat("has ", warpgroupRoles, " warpgroup roles and ", warpRoles, " one-warp roles"),
                       cat("needs the block's ", shape.warps, " warps: its warpgroup roles and one warpgroup of 1 to 4 "
                           "one-warp roles")};
  if (registers > kRegisterFile)
    return RoleProblem{-1, cat("asks for ", registers, " registers"),
                       cat("has ", kRegisterFile, " in the register file (launch: ", launch, " a thread)")};
  if (std::count_if(roleUses.begin(), roleUses.end(), [](const RoleMemoryInfo &u) { return u.allocates; }) != 1)
    return RoleProblem{-1, "does not allocate tensor memory in exactly one role", "allocates in the MMA warp"};
  return std::nullopt;
}

void TileTargetSm100::setupMemoryRoles(CudaWriter &w) {
  // Warpgroup roles in IR order from warp 0, then the one-warp roles in IR order.
  firstWarp.assign(roles.size(), 0);
  int next = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < roles.size(); ++i)
      if ((roles[i].warps == kWarpsPerWarpgroup) == (pass == 0)) {
        firstWarp[i] = next;
        next += roles[i].warps;
      }
  w.comment("---- roles: the warpgroup roles first (aligned: warp w reaches tensor-memory lanes [32 (w % 4), +32)),");
  w.comment("then one warpgroup of one-warp roles; its other warps idle ----");
  for (size_t i = 0; i < roles.size(); ++i)
    w.comment(cat("\"", roles[i].name, "\": warps [", firstWarp[i], ", ", firstWarp[i] + roles[i].warps, "), ",
                  roles[i].regs, " registers a thread"));
  w.comment("A softmax warpgroup's warp w holds rows [32w, 32w + 32) of the block (Q tile w / 4, its lanes 32 (w % 4)");
  w.comment("on) as two 16-row C-fragment tiles: lane l holds rows fragRow and fragRow + 8 of each, columns fragCol and");
  w.comment("fragCol + 1 of every n8 block. The correction warpgroup holds one row a thread: lane l of warp w, row");
  w.comment("32 (w % 4) + l of each Q tile (tmemRow).");
  printTileCounts(w);
  w.line(cat("constexpr int kRowChunk = ", kRowChunk, ";  // columns of O a tcgen05.ld/st.32x32b moves, one row a thread"));
  if (shape.ctaPair) {
    w.line("constexpr int kVHalfBlocks = kHeadDimV / 128;  // 64-column blocks of V a CTA of the pair holds");
    w.line("constexpr unsigned kVBoxBytes = (kBlockN / 2) * kHeadDimV * 2;  // one V box: kBlockN / 2 keys, every block");
  }
  w.line("const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;");
  w.line("const int fragRow = lane / 4, fragCol = 2 * (lane % 4);");
  w.line("const int tmemRow = 32 * (warp % 4) + lane;  // this thread's lane of tensor memory (one row a thread)");
  w.line("float epilogueInvL = 0.f, epilogueLse = 0.f;  // the correction's finalized row, between finalize and stores");
  w.line("");

  w.comment("---- barriers: the K/V ring's (full: the copy's bytes; empty: one tcgen05.commit), then a full and an");
  w.comment("empty barrier a channel, completed by the arrivals the IR gives (a role's one arrival, or a commit),");
  w.comment("then the word tcgen05.alloc writes and the shared buffers ----");
  const int offset = printRingBarrierDeclarations(w, kIsa, barriers);
  const int channels = static_cast<int>(channelList.size());
  w.line(cat("sm100::Mbarrier *const chanFull = barriers + ", offset, ", *const chanEmpty = chanFull + ", channels, ";"));
  for (int c = 0; c < channels; ++c)
    w.comment(cat("channel ", c, " \"", channelList[c].name, "\": chanFull[", c, "] ", channelList[c].fullArrivals,
                  " arrival(s), chanEmpty[", c, "] ", channelList[c].emptyArrivals));
  w.line(cat("unsigned *const tmemCell = reinterpret_cast<unsigned *>(barriers + ", offset + 2 * channels, ");"));
  w.line(cat("float *const memBuf = reinterpret_cast<float *>(barriers + ", offset + 2 * channels + 2,
             ");  // the shared buffers"));
  for (size_t i = 0; i < memBuffers.size(); ++i) {
    const MemBufferInfo &b = memBuffers[i];
    if (b.space == MemSpace::Shared)
      w.comment(cat("\"", b.name, "\": memBuf + ", smemOffset[i], ", ",
                    b.tile == MemTile::Rows ? "a value a row" : "m then l a row", " (128 rows)"));
    else if (b.space == MemSpace::Tensor)
      w.comment(cat("tensor memory column ", b.column, ": ",
                    b.tile == MemTile::Acc       ? "an accumulator (O), fp32"
                    : b.tile == MemTile::Scores ? "a score tile (S), fp32"
                                                : "P, 16-bit pairs"));
  }
  if (shape.ctaPair) {
    w.comment("---- a cluster pair (tile.cta_pair): this CTA is rank ctaRank of a cluster of two along x (Q tiles 2m and");
    w.comment("2m + 1); the leader's MMA warp issues the pair's tcgen05.mma.cta_group::2. The ring's full barriers and the");
    w.comment("pair channels' empty barriers count both CTAs' arrivals at the leader's (the other CTA's stay unused);");
    w.comment("commits arrive on both CTAs' barriers (multicast) ----");
    w.line("const unsigned ctaRank = sm100::pair::ctaRank();");
    w.line("const bool leaderCta = ctaRank == sm100::pair::kLeader;");
  }
  w.open("if (threadIdx.x == 0)");
  if (shape.ctaPair) {
    for (const BarrierInfo &barrier : barriers) {
      // Full: each CTA's load warp arrives once (expecting its own bytes) on the leader's; empty: one commit.
      const int count = barrier.bytes > 0 ? kCtaPairCount : static_cast<int>(barrier.arrivals);
      w.openUnrolledFor("i", cat(barrier.slots));
      w.line(cat("sm100::mbarrier::init(&", barrier.name, "[i], ", count, ");"));
      w.close();
    }
  } else {
    printRingBarrierInits(w, kIsa, barriers, /*consumerWarps=*/1);
  }
  for (int c = 0; c < channels; ++c) {
    w.line(cat("sm100::mbarrier::init(&chanFull[", c, "], ", channelList[c].fullArrivals, ");"));
    w.line(cat("sm100::mbarrier::init(&chanEmpty[", c, "], ",
               channelList[c].emptyArrivals * (shape.ctaPair && channelList[c].pairEmpty ? kCtaPairCount : 1),
               ");"));
  }
  w.line("sm100::mbarrier::initFence();");
  w.close();
  if (shape.ctaPair)
    w.line("sm100::pair::clusterSync();  // both CTAs' barriers initialized before any arrival of the other's");
  else
    w.line("__syncthreads();");
  w.line(cat("constexpr unsigned kTmemAllocColumns = ", tmemAllocColumns, ";"));
  // Register budgets. The one-warp roles' warpgroup keeps the launch's count: ptxas for sm_100a spilled the
  // kernel-scope values live across its setmaxnreg.dec (the K/V loop bounds: 32 bytes at 48, 64 or 96 registers,
  // causal hd 128, 2026-12-03) and none at the launch's. The warpgroup roles that ask for fewer get their count; the
  // ones that ask for more share what remains of the register file, up to what they ask for.
  const int launch = launchRegisters(shape.warps * kWarpSize);
  budgets.assign(roles.size(), launch);
  int64_t fixed = int64_t(kWarpgroupThreads) * launch;
  int increasing = 0;
  for (size_t i = 0; i < roles.size(); ++i) {
    if (roles[i].warps != kWarpsPerWarpgroup)
      continue;
    if (roles[i].regs <= launch) {
      budgets[i] = roles[i].regs;
      fixed += int64_t(kWarpgroupThreads) * roles[i].regs;
    } else {
      ++increasing;
    }
  }
  const int share = increasing == 0 ? launch
                                    : static_cast<int>((kRegisterFile - fixed) / (kWarpgroupThreads * increasing)) / 8 * 8;
  for (size_t i = 0; i < roles.size(); ++i)
    if (roles[i].warps == kWarpsPerWarpgroup && roles[i].regs > launch)
      budgets[i] = std::max(launch, std::min(roles[i].regs, share));
  if (next < shape.warps) {
    w.comment(cat("warps [", next, ", ", shape.warps, ") idle: nothing for them to do"));
    w.line(cat("if (warp >= ", next, ")"));
    w.line("  return;");
  }
}

void TileTargetSm100::printBudget(CudaWriter &w, int regs, const std::string &who) const {
  const int launch = launchRegisters(shape.warps * kWarpSize);
  if (regs < launch)
    w.line(cat("sm100::warpgroup::decreaseRegisters<", regs, ">();  // ", who, ", from ", launch, " at launch"));
  else if (regs > launch)
    w.line(cat("sm100::warpgroup::increaseRegisters<", regs, ">();  // ", who, ", from ", launch, " at launch"));
  else
    w.comment(cat(who, ": the launch's ", launch, " registers"));
}

void TileTargetSm100::roleSync(CudaWriter &w) const {
  w.line("sm100::fence::beforeThreadSync();");
  if (inWarpgroup())
    w.line(cat("sm100::namedBarrier::sync(", kFirstGroupBarrier + firstWarp[currentRole] / 4,
               ", 128);  // this role's warpgroup"));
  else
    w.line("__syncwarp();");
}

bool TileTargetSm100::tmemAlloc(CudaWriter &w) {
  if (currentRole < 0 || inWarpgroup())
    return false;
  w.comment(cat("tensor memory: ", tmemAllocColumns, " columns for every buffer of the block, allocated by this warp"));
  w.comment("(which frees them), its base written to tmemCell; no other allocation in this block");
  if (shape.ctaPair) {
    w.comment("a cluster pair: this warp in both CTAs allocates the same columns of both CTAs' tensor memory together");
    w.line("sm100::pair::alloc<kTmemAllocColumns>(tmemCell);");
    w.line("sm100::pair::relinquishAllocPermit();");
  } else {
    w.line("sm100::tmem::alloc<kTmemAllocColumns>(tmemCell);");
    w.line("sm100::tmem::relinquishAllocPermit();");
  }
  w.line("sm100::fence::beforeThreadSync();");
  w.line("__syncwarp();");
  w.line("sm100::fence::afterThreadSync();");
  return true;
}

bool TileTargetSm100::tmemFree(CudaWriter &w) {
  if (currentRole < 0 || inWarpgroup())
    return false;
  w.comment("every role is done with tensor memory (the channel's wait fenced their accesses before this): free it");
  if (shape.ctaPair)
    w.line("sm100::pair::dealloc<kTmemAllocColumns>(*tmemCell);  // this warp in both CTAs");
  else
    w.line("sm100::tmem::dealloc<kTmemAllocColumns>(*tmemCell);");
  return true;
}

bool TileTargetSm100::channelWait(CudaWriter &w, int channel, bool full, const std::string &position) {
  if (!memoryMode || currentRole < 0)
    return false;
  const ChannelInfo &c = channelList[channel];
  // A cluster pair: the MMA warp's waits for the data of its MMAs are the leader's only (the other CTA's MMA warp
  // issues nothing, and a waiter that issues nothing could fall two phases behind a barrier the leader's commits
  // drive); it waits with the leader only for its own CTA's roles to release what it allocated.
  const bool leaderOnly = pairIssuer() && (full || c.pairEmpty), pairWait = leaderOnly && !full;
  if (pairWait)
    w.comment(cat("a cluster pair: \"", c.name, "\" empty counts both CTAs' arrivals at the leader's barrier, and only "
                  "the leader's MMA warp waits (cluster scope)"));
  else if (leaderOnly)
    w.comment("a cluster pair: only the leader's MMA warp, which issues the pair's MMAs, waits");
  if (leaderOnly)
    w.open("if (leaderCta)");
  if (full) {
    w.comment(cat("wait for \"", c.name, "\" full, phase ", position, " (parity; a position before 0 passes)"));
    w.line(cat("sm100::mbarrier::wait(&chanFull[", channel, "], (", position, ") & 1);"));
  } else {
    w.comment(cat("wait until \"", c.name, "\" was released at position ", position,
                  " - 1 (position 0: a fresh barrier's parity-1 wait passes)"));
    w.line(cat(pairWait ? "sm100::pair::wait" : "sm100::mbarrier::wait", "(&chanEmpty[", channel, "], ((", position,
               ") & 1) ^ 1);"));
  }
  w.line("sm100::fence::afterThreadSync();");
  if (leaderOnly)
    w.close();
  return true;
}

bool TileTargetSm100::channelArrive(CudaWriter &w, int channel, bool full, const std::string &position) {
  if (!memoryMode || currentRole < 0)
    return false;
  w.comment(cat("this role's one arrival on \"", channelList[channel].name, "\" ", full ? "full" : "empty",
                " (position ", position, "): its threads' work before it, fenced"));
  w.open("");
  roleSync(w);
  w.line(cat("if (threadIdx.x == ", firstWarp[currentRole] * kWarpSize, ")"));
  if (shape.ctaPair && !full && channelList[channel].pairEmpty)
    w.line(cat("  sm100::pair::arrive(sm100::pair::mapTo(&chanEmpty[", channel,
               "], sm100::pair::kLeader));  // the pair's count, at the leader's"));
  else
    w.line(cat("  sm100::mbarrier::arrive(&", full ? "chanFull" : "chanEmpty", "[", channel, "]);"));
  w.close();
  return true;
}

bool TileTargetSm100::mmaCommit(CudaWriter &w, int channel, int ringBarrier, const std::string &position) {
  if (!memoryMode || currentRole < 0 || inWarpgroup())
    return false;
  const std::string bar =
      ringBarrier >= 0
          ? cat("&", barriers[ringBarrier].name, "[", ringSlot(position, barriers[ringBarrier].slots), "]")
          : cat("&chanFull[", channel, "]");
  w.comment(cat("tcgen05.commit: one arrival on ",
                ringBarrier >= 0 ? cat(barriers[ringBarrier].name, " (the slot of ring position ", position, ")")
                                 : cat("\"", channelList[channel].name, "\" full (position ", position, ")"),
                " once every MMA this thread issued completed"));
  if (shape.ctaPair) {
    w.comment("a cluster pair: the leader's commit arrives on this barrier in both CTAs (multicast)");
    w.line("if (lane == 0 && leaderCta)");
    w.line(cat("  sm100::pair::commit(", bar, ", sm100::pair::kBothCtas);"));
    return true;
  }
  w.line("if (lane == 0)");
  w.line(cat("  sm100::mma::commit(", bar, ");"));
  return true;
}

bool TileTargetSm100::mmaQk(CudaWriter &w, const std::string &kSlot, int s, int64_t qRowOffset) {
  if (!memoryMode || currentRole < 0 || inWarpgroup() || memBuffers[s].space != MemSpace::Tensor)
    return false;
  if (shape.ctaPair) {
    w.comment(cat("S (tensor memory column ", memBuffers[s].column, ", in both CTAs) = Q rows [", qRowOffset,
                  ", +128) of each CTA · Kᵀ: tcgen05.mma.cta_group::2 M = 256, N = kBlockN, SS (each CTA's sQ and its "
                  "half of the K tile in slot ", kSlot, " % kStages: kBlockN / 2 keys, column blocks kBlockN / 2 rows"));
    w.comment("apart), by the leader's lane 0 for the pair; k16 steps not unrolled");
    w.open("if (lane == 0 && leaderCta)");
    w.line(cat("const unsigned qAddr = sm100::smemAddress(sQ) + ", qRowOffset, " * 128;"));
    w.line(cat("const unsigned kAddr = sm100::smemAddress(sK) + (", kSlot, ") % kStages * kKTileBytes;"));
    w.line("#pragma unroll 1");
    w.open("for (int ks = 0; ks < kHeadDim / 16; ++ks)");
    w.line(cat("sm100::pair::f16SS(", tmemOf(s),
               ", sm100::desc::make(kQDesc, qAddr + ks / 4 * kBlockM * 128 + ks % 4 * 32),"));
    w.line("                   sm100::desc::make(kKDesc, kAddr + ks / 4 * (kBlockN / 2) * 128 + ks % 4 * 32), kQkIdesc,"
           " ks > 0);");
    w.close();
    w.close();
    return true;
  }
  w.comment(cat("S (tensor memory column ", memBuffers[s].column, ") = Q rows [", qRowOffset, ", +128) · Kᵀ: tcgen05.mma ",
                "M = 128, N = kBlockN, SS (sQ and the K tile in slot ", kSlot, " % kStages, both K-major), by this"));
  w.comment("warp's lane 0; k16 steps not unrolled (unrolled, the compiler hoists every step's descriptor)");
  w.open("if (lane == 0)");
  w.line(cat("const unsigned qAddr = sm100::smemAddress(sQ) + ", qRowOffset, " * 128;"));
  w.line(cat("const unsigned kAddr = sm100::smemAddress(sK) + (", kSlot, ") % kStages * kKTileBytes;"));
  w.line("#pragma unroll 1");
  w.open("for (int ks = 0; ks < kHeadDim / 16; ++ks)");
  w.line(cat("sm100::mma::f16SS(", tmemOf(s), ", sm100::desc::make(kQDesc, qAddr + ks / 4 * kBlockM * 128 + ks % 4 * 32),"));
  w.line("                  sm100::desc::make(kKDesc, kAddr + ks / 4 * kBlockN * 128 + ks % 4 * 32), kQkIdesc, ks > 0);");
  w.close();
  w.close();
  return true;
}

bool TileTargetSm100::mmaPv(CudaWriter &w, int p, const std::string &vSlot, int o) {
  if (!memoryMode || currentRole < 0 || inWarpgroup() || memBuffers[p].space != MemSpace::Tensor ||
      memBuffers[o].space != MemSpace::Tensor)
    return false;
  if (shape.ctaPair) {
    w.comment(cat("O (column ", memBuffers[o].column, ", in both CTAs) += P (column ", memBuffers[p].column,
                  ", each CTA's own) · V: tcgen05.mma.cta_group::2 M = 256, N = kHeadDimV, TS (a k16 step is 8 columns"));
    w.comment(cat("of P); B is each CTA's half of V's columns in slot ", vSlot,
                  " % kStages: k16 step k reads keys 16k.., box 16k / (kBlockN / 2), row 16k % (kBlockN / 2), at column "
                  "block kVHalfBlocks of the box; by the leader's lane 0 for the pair"));
    w.open("if (lane == 0 && leaderCta)");
    w.line(cat("const unsigned vAddr = sm100::smemAddress(sV) + (", vSlot,
               ") % kStages * kVTileBytes + kVHalfBlocks * (kBlockN / 2) * 128;"));
    w.openUnrolledFor("k", "kBlockN / 16");
    w.line(cat("sm100::pair::f16TS(", tmemOf(o), ", ", tmemOf(p),
               " + 8 * k, sm100::desc::make(kVDesc, vAddr + 16 * k / (kBlockN / 2) * kVBoxBytes + 16 * k % (kBlockN / 2)"
               " * 128), kPvIdesc, 1);"));
    w.close();
    w.close();
    return true;
  }
  w.comment(cat("O (column ", memBuffers[o].column, ") += P (column ", memBuffers[p].column,
                ") · V: tcgen05.mma M = 128, N = kHeadDimV, TS: P from tensor memory (a k16 step is 8 columns), the V"));
  w.comment(cat("tile in slot ", vSlot, " % kStages MN-major (a k16 step is 16 rows, 2048 bytes, of every column block); ",
                "by lane 0"));
  w.open("if (lane == 0)");
  w.line(cat("const unsigned vAddr = sm100::smemAddress(sV) + (", vSlot, ") % kStages * kVTileBytes;"));
  w.openUnrolledFor("k", "kBlockN / 16");
  w.line(cat("sm100::mma::f16TS(", tmemOf(o), ", ", tmemOf(p),
             " + 8 * k, sm100::desc::make(kVDesc, vAddr + k * 16 * 128), kPvIdesc, 1);"));
  w.close();
  w.close();
  return true;
}

bool TileTargetSm100::loadScores(CudaWriter &w, int buffer, const std::string &scores) {
  const MemBufferInfo &b = memBuffers[buffer];
  // The role's warpgroup holds the rows of the Q tile whose S this is (warpRow0 = m0 + 32 warp).
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || b.space != MemSpace::Tensor || b.tile != MemTile::Scores ||
      b.cols != shape.blockN || b.column != firstWarp[currentRole] / 4 * shape.blockN)
    return false;
  w.comment(cat(scores, " = S from tensor memory (column ", b.column,
                ") into C fragments: two 16-row accesses (tcgen05.ld.16x256b) a warp"));
  w.line(cat("float ", scores, "[kMTiles][kSTiles][4];"));
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat("sm100::tmem::Fragments<kSTiles>::loadC(sm100::tmem::warpHalfAddress(", tmemOf(buffer), ", mt, 0), ",
             scores, "[mt]);"));
  w.close();
  w.line("sm100::tmem::waitLoad();");
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat("sm100::tmem::Fragments<kSTiles>::fenceC(", scores, "[mt]);"));
  w.close();
  return true;
}

bool TileTargetSm100::initStats(CudaWriter &w, const StateNames &st) {
  if (!memoryMode || currentRole < 0 || !inWarpgroup())
    return false;
  w.comment("---- the softmax's row statistics of this thread's rows: running max m (log2 domain), running sum l");
  w.comment("(this lane's part until reduced over its quad); kept in registers across the K/V segments ----");
  w.line(cat("float ", st.rowMax, "[kMTiles][2], ", st.rowSum, "[kMTiles][2];"));
  fragments.forEachRow(w, [&] {
    w.line(cat(st.rowMax, "[mt][r] = ", kFragmentNamespace, "::kNegInf;"));
    w.line(cat(st.rowSum, "[mt][r] = 0.f;"));
  });
  return true;
}

bool TileTargetSm100::storeAlpha(CudaWriter &w, int buffer) {
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || memBuffers[buffer].space != MemSpace::Shared ||
      memBuffers[buffer].tile != MemTile::Rows)
    return false;
  w.comment(cat("alpha of this step into \"", memBuffers[buffer].name,
                "\" (shared): the first lane of each quad writes its two rows of each m16 tile"));
  w.open("if (lane % 4 == 0)");
  fragments.forEachRow(w, [&] {
    w.line(cat(smemOf(buffer), "[32 * (warp % 4) + 16 * mt + fragRow + 8 * r] = alpha[mt][r];"));
  });
  w.close();
  return true;
}

bool TileTargetSm100::storeProbabilities(CudaWriter &w, int buffer, const std::string &s, const std::string &p) {
  const MemBufferInfo &b = memBuffers[buffer];
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || b.space != MemSpace::Tensor ||
      b.tile != MemTile::Probabilities || b.column != firstWarp[currentRole] / 4 * shape.blockN)
    return false;
  fragments.packProbabilities(w, s, p, /*declare=*/true);
  w.comment(cat("P over S in tensor memory (column ", b.column, "; tcgen05.st.16x128b: the A fragments land where the"));
  w.comment("TMEM-A form of tcgen05.mma reads P·V's A, row r in lane r, keys 2c and 2c + 1 in column c)");
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat("sm100::tmem::Fragments<kSTiles>::storeA(sm100::tmem::warpHalfAddress(", tmemOf(buffer), ", mt, 0), ", p,
             "[mt]);"));
  w.close();
  w.line("sm100::tmem::waitStore();");
  return true;
}

bool TileTargetSm100::storeStats(CudaWriter &w, int buffer, const StateNames &st) {
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || memBuffers[buffer].space != MemSpace::Shared ||
      memBuffers[buffer].tile != MemTile::Stats)
    return false;
  w.comment(cat("the final m and l (reduced over the quad) into \"", memBuffers[buffer].name,
                "\" (shared: m of row i at i, l at 128 + i)"));
  fragments.forEachRow(w, [&] {
    w.line(cat("const float l = ", kFragmentNamespace, "::quadSum(", st.rowSum, "[mt][r]);"));
    w.open("if (lane % 4 == 0)");
    w.line("const int i = 32 * (warp % 4) + 16 * mt + fragRow + 8 * r;");
    w.line(cat(smemOf(buffer), "[i] = ", st.rowMax, "[mt][r];"));
    w.line(cat(smemOf(buffer), "[128 + i] = l;"));
    w.close();
  });
  return true;
}

bool TileTargetSm100::loadStats(CudaWriter &w, int buffer, const StateNames &st) {
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || memBuffers[buffer].space != MemSpace::Shared ||
      memBuffers[buffer].tile != MemTile::Stats)
    return false;
  w.comment(cat("this thread's row's final m and l from \"", memBuffers[buffer].name, "\""));
  w.line(cat("const float ", st.rowMax, " = ", smemOf(buffer), "[tmemRow], ", st.rowSum, " = ", smemOf(buffer),
             "[128 + tmemRow];"));
  return true;
}

bool TileTargetSm100::zeroAcc(CudaWriter &w, int buffer) {
  const MemBufferInfo &b = memBuffers[buffer];
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || b.space != MemSpace::Tensor || b.tile != MemTile::Acc ||
      b.cols % kRowChunk != 0)
    return false;
  w.comment(cat("O (column ", b.column, ") = 0 in tensor memory, one row a thread, kRowChunk columns a store"));
  w.open("");
  w.line("const unsigned zero[kRowChunk] = {};");
  w.openUnrolledFor("chunk", cat(b.cols / kRowChunk));
  w.line(cat("sm100::tmem::Access32x32b<kRowChunk>::store(sm100::tmem::warpAddress(", tmemOf(buffer),
             ", chunk * kRowChunk), zero);"));
  w.close();
  w.line("sm100::tmem::waitStore();");
  w.close();
  return true;
}

bool TileTargetSm100::loadRows(CudaWriter &w, int buffer, const std::string &rows) {
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || memBuffers[buffer].space != MemSpace::Shared ||
      memBuffers[buffer].tile != MemTile::Rows)
    return false;
  w.line(cat("const float ", rows, " = ", smemOf(buffer), "[tmemRow];  // \"", memBuffers[buffer].name,
             "\" of this thread's row"));
  return true;
}

void TileTargetSm100::forEachRowChunk(CudaWriter &w, int acc, const std::function<void()> &body) const {
  w.openUnrolledFor("chunk", cat(memBuffers[acc].cols / kRowChunk));
  w.line("unsigned oRow[kRowChunk];");
  w.line(cat("sm100::tmem::Access32x32b<kRowChunk>::load(sm100::tmem::warpAddress(", tmemOf(acc),
             ", chunk * kRowChunk), oRow);"));
  w.line("sm100::tmem::waitLoad();");
  w.line("sm100::tmem::fenceRegisters(oRow);");
  body();
  w.close();
}

bool TileTargetSm100::rescaleInPlace(CudaWriter &w, int acc, const std::string &alpha, bool onlyWhenMoved) {
  const MemBufferInfo &b = memBuffers[acc];
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || b.space != MemSpace::Tensor || b.cols % kRowChunk != 0)
    return false;
  w.comment(cat("rescale O (column ", b.column, ") *= ", alpha,
                " in tensor memory, one row a thread, kRowChunk columns at a time (tcgen05.ld/st.32x32b)"));
  if (onlyWhenMoved) {
    w.comment("conditional rescaling: skipped by the whole warp when none of its 32 rows has alpha != 1 (a row whose");
    w.comment("max did not move has alpha exactly 1: the product is the same)");
    w.open(cat("if (__any_sync(0xffffffffu, ", alpha, " != 1.f))"));
  } else {
    w.open("");
  }
  forEachRowChunk(w, acc, [&] {
    w.openUnrolledFor("i", "kRowChunk");
    w.line(cat("oRow[i] = __float_as_uint(__uint_as_float(oRow[i]) * ", alpha, ");"));
    w.close();
    w.line(cat("sm100::tmem::Access32x32b<kRowChunk>::store(sm100::tmem::warpAddress(", tmemOf(acc),
               ", chunk * kRowChunk), oRow);"));
  });
  w.line("sm100::tmem::waitStore();");
  w.close();
  return true;
}

bool TileTargetSm100::finalizeBuffer(CudaWriter &w, const StateNames &st, int acc, const std::string &sinkFn) {
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || memBuffers[acc].space != MemSpace::Tensor)
    return false;
  const std::string ns = kFragmentNamespace;
  if (sinkFn.empty()) {
    w.comment("---- finalize this thread's row: O = acc / l, LSE = (m + log2 l)·ln 2 (m in the log2 domain); a row");
    w.comment("that saw no key (l = 0) gets O = 0 and LSE = -inf ----");
    w.line(cat("epilogueInvL = ", st.rowSum, " == 0.f ? 0.f : 1.f / ", st.rowSum, ";"));
    w.line(cat("epilogueLse = ", st.rowSum, " == 0.f ? ", ns, "::kNegInf : (", st.rowMax, " + log2f(", st.rowSum,
               ")) * ", ns, "::kLn2;"));
    return true;
  }
  w.comment(cat("---- finalize this thread's row with the attention sink s = ", sinkFn,
                "(b, h): m' = max(m, s·log2 e), l' = l·2^(m - m') + 2^(s·log2 e - m'),"));
  w.comment("O = acc·2^(m - m') / l', LSE = (m' + log2 l')·ln 2; a row that saw no key gets O = 0 and LSE = s ----");
  w.open("");
  w.line(cat("const float sinkLog2 = ", sinkFn, "(b, h, p) * ", ns, "::kLog2e;"));
  w.line(cat("const float maxNew = fmaxf(", st.rowMax, ", sinkLog2);"));
  w.line(cat("const float maxUsed = maxNew == ", ns, "::kNegInf ? 0.f : maxNew;"));
  w.line(cat("const float carry = ", ns, "::exp2(", st.rowMax, " - maxUsed);"));
  w.line(cat("const float l = ", st.rowSum, " * carry + ", ns, "::exp2(sinkLog2 - maxUsed);"));
  w.line("epilogueInvL = l == 0.f ? 0.f : carry / l;");
  w.line(cat("epilogueLse = l == 0.f ? ", ns, "::kNegInf : (maxUsed + log2f(l)) * ", ns, "::kLn2;"));
  w.close();
  return true;
}

bool TileTargetSm100::storeOFromBuffer(CudaWriter &w, int acc, int64_t rowOffset) {
  const MemBufferInfo &b = memBuffers[acc];
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || b.space != MemSpace::Tensor || b.cols % kRowChunk != 0)
    return false;
  const char *pack = shape.dtype == "bf16" ? "sm100::pack::bf16x2" : "sm100::pack::f16x2";
  w.comment(cat("store O = acc / l of rows [", rowOffset, ", +128) of the block: this thread's row from tensor memory ",
                "(column ", b.column, "), kRowChunk columns at a time, times 1 / l, converted to ", shape.dtype,
                ", rows < seqlen_q"));
  w.open("");
  w.line(cat("const int rowQ = m0 + ", rowOffset, " + tmemRow;"));
  w.line("unsigned short *const gRow = static_cast<unsigned short *>(p.o) + b * p.oBatchStride + h * p.oHeadStride +");
  w.line("                            static_cast<long long>(rowQ) * p.oRowStride;");
  forEachRowChunk(w, acc, [&] {
    w.open("if (rowQ < p.seqlenQ)");
    w.openUnrolledFor("i", "kRowChunk / 2");
    w.line(cat("*reinterpret_cast<unsigned *>(gRow + chunk * kRowChunk + 2 * i) = ", pack,
               "(__uint_as_float(oRow[2 * i]) * epilogueInvL, __uint_as_float(oRow[2 * i + 1]) * epilogueInvL);"));
    w.close();
    w.close();
  });
  w.close();
  return true;
}

bool TileTargetSm100::storeLseRows(CudaWriter &w, int acc, int64_t rowOffset) {
  if (!memoryMode || currentRole < 0 || !inWarpgroup() || memBuffers[acc].space != MemSpace::Tensor)
    return false;
  w.comment(cat("store LSE of rows [", rowOffset, ", +128) (fp32; B x Hq x Sq, varlen Hq x total_q): this thread's row, ",
                "rows < seqlen_q"));
  w.open("");
  w.line(cat("const int rowQ = m0 + ", rowOffset, " + tmemRow;"));
  w.line("if (rowQ < p.seqlenQ)");
  w.line("  p.lse[b * p.lseBatchStride + h * p.lseHeadStride + rowQ] = epilogueLse;");
  w.close();
  return true;
}

} // namespace flashtile::codegen::sm100::detail
