//===- TileOpsSm100.cpp - tile ops as tcgen05.mma, tensor memory and TMA --===//
//
// Prints warp-specialized programs for sm_100a: programs written with the IR's memory layer (fa4's default roles:
// the second half of this file) and the first form's ring programs (fa4 roles = 0), described here. What changes
// from the sm90 family is where the tiles live:
//   tensor memory  one allocation a block (tcgen05.alloc by the first computing warp, freed by it at the end); per
//                  computing warpgroup g, S at column g·kBlockN and O at kGroups·kBlockN + g·kHeadDimV (fp32, row i
//                  of the warpgroup's 128 rows in lane i); P (16-bit pairs) over the first kBlockN / 2 columns of S
//   Q·Kᵀ, P·V      one elected thread of the warpgroup issues tcgen05.mma.cta_group::1.kind::f16, M = 128: SS with
//                  Q and K from their TMA slots (K-major), TS with P from tensor memory and V from its slot
//                  (MN-major); tcgen05.commit arrives on the warpgroup's MMA barrier, which retires the GEMM (its D
//                  written, its shared-memory operands read)
//   register tiles S is read from tensor memory straight into C fragments (tcgen05.ld.16x256b, two 16-row accesses
//                  a warp), so scale, score_mod, mask and the online softmax are the common register-tile math
//                  (FragmentTiles.h), as for sm80 and sm90; P goes back as A fragments (tcgen05.st.16x128b)
//   O              stays in tensor memory: zeroed once, rescaled and finally read in 64-column chunks (a warp's 32
//                  rows of O do not fit its registers beside S at head dim 128 and above)
//   roles, rings   as sm90's: consecutive warpgroups, TMA copies into ring slots behind full/empty mbarriers (this
//                  family's own wrappers: it includes nothing of sm80 or sm90). No setmaxnreg: every role keeps the
//                  launch's registers. With the producer's setmaxnreg.dec, ptxas for sm_100a spilled values live
//                  across it to local memory (softcap at head dims 128 and 256, 2026-12-02), and an increase without
//                  that decrease would wait for registers forever; the softmax code fits the launch's count (168 a
//                  thread with two softmax warpgroups, 255 with one) without spilling at the default 64-key tiles.
// The memory layer's printing (FA4's own roles) is MemoryLayerSm100.cpp's; the class the two files share is in
// TileTargetSm100.h.
// No SM100 GPU exists here: every kernel this file prints is checked by NVRTC, ptxas and its SASS, never run.
//===----------------------------------------------------------------------===//
#include "codegen/sm100/TileTargetSm100.h"
#include "codegen/sm100/TileOpsSm100.h"
#include "codegen/common/Concat.h"
#include "codegen/ptx/FragmentPrelude.h"
#include "codegen/common/FragmentTiles.h"
#include "codegen/common/TmaRing.h"
#include "codegen/sm100/DescriptorsSm100.h"
#include "codegen/sm100/InstructionsSm100.h"
#include "codegen/sm100/PreludeSm100.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdio>
#include <functional>

namespace flashtile::codegen::sm100 {
namespace detail {

void TileTargetSm100::setup(CudaWriter &w, const std::vector<Operand> &) {
  w.comment("---- shared memory: sQ, then kStages K tiles and kStages V tiles, each a TMA box of its rows x the whole");
  w.comment("head dim in 128-byte-swizzled column blocks of 64 columns (block c of a tile of R rows at c·R·128 bytes,");
  w.comment("row r's 16-byte chunk k at r·128 + (k ^ r % 8)·16: what the descriptors below describe). Tiles start on");
  w.comment("1024-byte boundaries (the swizzle repeats every 8 rows); the dynamic base is only 16-byte aligned. ----");
  printRingTiles(w, kIsa, shape.stages);
  w.comment("---- tcgen05.mma descriptors, encoded on the host (codegen/sm100/DescriptorsSm100.h): every field but the");
  w.comment("tile's address (sm100::desc::make adds it). Shared-memory descriptors: 128-byte swizzle, SBO 1024 bytes");
  w.comment("(8 rows), version 1; Q and K K-major (LBO unused: 16 bytes), V MN-major (LBO: the next 64 columns of the");
  w.comment("head dim, kBlockN rows x 128 bytes on). Instruction descriptors (.kind::f16): M = 128, fp32 accumulators.");
  if (shape.ctaPair) {
    w.comment("A CTA pair (cta_group::2, M = 256): each CTA holds half of a K tile's keys (its slot's first kBlockN / 2");
    w.comment("rows) and half of a V tile's columns (in both CTAs at column blocks [kHeadDimV / 128, kHeadDimV / 64) of");
    w.comment("each of the V slot's two boxes of kBlockN / 2 keys: LBO, the next column block, is kBlockN / 2 rows x 128");
    w.comment("bytes); the instruction descriptors' M and N are the pair's.");
  }
  // A pair's V boxes hold kBlockN / 2 rows: a column block of V is half as long.
  const int vRows = shape.ctaPair ? shape.blockN / 2 : shape.blockN;
  const uint64_t kMajor = encode(kMajorDescriptor(SwizzlingMode::Swizzle128B));
  const uint64_t vMajor =
      encode(mnMajorDescriptor(SwizzlingMode::Swizzle128B, static_cast<uint32_t>(vRows * kSwizzleBytes)));
  w.line(cat("constexpr unsigned long long kQDesc = ", hex64(kMajor), ", kKDesc = ", hex64(kMajor), ";"));
  w.line(cat("constexpr unsigned long long kVDesc = ", hex64(vMajor), ";"));
  w.line(cat("constexpr unsigned kQkIdesc = ", hex32(encode(instructionDescriptor(qkShape(shape)))),
             ";  // S = Q·Kᵀ: N = kBlockN, A and B K-major"));
  w.line(cat("constexpr unsigned kPvIdesc = ", hex32(encode(instructionDescriptor(pvShape(shape)))),
             ";  // O += P·V: N = kHeadDimV, B MN-major"));
}

void TileTargetSm100::setupTile(CudaWriter &w) { printRingTileCoordinates(w); }


std::optional<RoleProblem> TileTargetSm100::checkRoles(const std::vector<RoleInfo> &roleList) const {
  if (memoryMode)
    return checkMemoryRoles(roleList);
  for (size_t i = 0; i < roleList.size(); ++i)
    if (roleList[i].warps % kWarpsPerWarpgroup != 0)
      return RoleProblem{static_cast<int>(i), cat("has ", roleList[i].warps, " warps"),
                         "lays roles out as whole warpgroups (a warp reaches the TMEM lanes of its warp index mod 4)"};
  const int computingRoles =
      static_cast<int>(std::count_if(roleList.begin(), roleList.end(), [](const RoleInfo &r) { return r.computes; }));
  auto computing = std::find_if(roleList.begin(), roleList.end(), [](const RoleInfo &r) { return r.computes; });
  if (computingRoles != 1 || computing->warps != consumerWarps)
    return RoleProblem{-1,
                       computingRoles == 1 ? cat("has a computing role of ", computing->warps, " warps")
                                           : cat("has ", computingRoles, " computing roles"),
                       cat("one computing role of ", consumerWarps, " warps (block-m ", shape.blockM, " / ",
                           kRowsPerWarp, " rows a warp)")};
  for (const RoleInfo &role : roleList)
    if (role.pingpong)
      return RoleProblem{static_cast<int>(computing - roleList.begin()), "takes GEMM turns (pingpong)",
                         "one thread issues every tcgen05.mma of a warpgroup: no turns"};
  return std::nullopt;
}

void TileTargetSm100::setupRoles(CudaWriter &w, const std::vector<RoleInfo> &roleList,
                                 const std::vector<BarrierInfo> &barrierList) {
  roles = roleList;
  barriers = barrierList;
  firstWarp.clear();
  if (memoryMode)
    return setupMemoryRoles(w);
  int next = 0, computing = 0;
  for (size_t i = 0; i < roles.size(); ++i) {
    firstWarp.push_back(next);
    if (roles[i].computes)
      computing = static_cast<int>(i);
    next += roles[i].warps;
  }
  const int groups = groupsOf(shape);
  w.comment("---- roles (consecutive warpgroups, in IR order) ----");
  for (size_t i = 0; i < roles.size(); ++i)
    w.comment(cat("\"", roles[i].name, "\": warps [", firstWarp[i], ", ", firstWarp[i] + roles[i].warps, "), ",
                  roles[i].regs, " registers a thread", roles[i].computes ? "" : ", its region in one thread"));
  const int consumerFirst = firstWarp[computing];
  w.comment("The computing role's warp w owns query rows [32w, 32w + 32) of the block: warpgroup w / 4 owns 128 rows,");
  w.comment("its S and O in tensor memory with row i in lane i, and warp w reaches lanes [32 (w % 4), +32). A warp");
  w.comment("reads S as two 16-row C-fragment tiles (m16 tile mt: its lanes 16mt..16mt+15): lane l holds rows");
  w.comment("fragRow and fragRow + 8 of each, columns fragCol and fragCol + 1 of every n8 block.");
  printTileCounts(w);
  w.line(cat("constexpr int kOChunkTiles = ", kOChunkTiles, ";  // O moves through registers 64 columns at a time"));
  w.line(cat("constexpr int kGroups = ", groups, ";  // computing warpgroups, 128 rows each"));
  w.line(cat("const int warp = threadIdx.x / 32 - ", consumerFirst, ", lane = threadIdx.x % 32;"));
  w.line("const int fragRow = lane / 4, fragCol = 2 * (lane % 4);");
  w.line("");

  w.comment("---- barriers, one per ring slot: full (one arrival, the producer's arrive.expect_tx, plus the copy's");
  w.comment("bytes), empty (one arrival per computing warp; a slot starts released); then one MMA barrier per");
  w.comment("warpgroup (tcgen05.commit's arrival: its GEMM completed) and the word tcgen05.alloc writes ----");
  const int offset = printRingBarrierDeclarations(w, kIsa, barriers);
  w.line(cat("sm100::Mbarrier *const mmaDone = barriers + ", offset, ";  // kGroups: warpgroup g's Q·Kᵀ or P·V done"));
  w.line(cat("unsigned *const tmemCell = reinterpret_cast<unsigned *>(barriers + ", offset + groups, ");"));
  w.line("unsigned mmaPhase = 0;  // parity of this warpgroup's next MMA completion: every GEMM is waited on once");
  w.open("if (threadIdx.x == 0)");
  printRingBarrierInits(w, kIsa, barriers, consumerWarps);
  w.openUnrolledFor("i", "kGroups");
  w.line("sm100::mbarrier::init(&mmaDone[i], 1);");
  w.close();
  w.line("sm100::mbarrier::initFence();");
  w.close();
  const int columns = tmemColumnsOf(shape);
  w.comment(cat("---- tensor memory: ", columns, " columns (S then O of each warpgroup: kGroups x (kBlockN + kHeadDimV)"));
  w.comment("rounded up to a power of two), allocated by the first computing warp, which frees them at its end; the");
  w.comment("base reaches every thread through shared memory (fence, barrier, fence) ----");
  w.line(cat("constexpr unsigned kTmemAllocColumns = ", columns, ";"));
  w.open(cat("if (threadIdx.x / 32 == ", consumerFirst, ")"));
  w.line("sm100::tmem::alloc<kTmemAllocColumns>(tmemCell);");
  w.line("sm100::tmem::relinquishAllocPermit();");
  w.close();
  w.line("sm100::fence::beforeThreadSync();");
  w.line("__syncthreads();");
  w.line("sm100::fence::afterThreadSync();");
  w.line("const unsigned tmemBase = *tmemCell;");
  w.line("const int group = warp / 4;  // this computing warp's warpgroup");
  w.line("const unsigned tmemS = tmemBase + group * kBlockN;                      // S, then P over it");
  w.line("const unsigned tmemO = tmemBase + kGroups * kBlockN + group * kHeadDimV;  // O");
}

void TileTargetSm100::openRole(CudaWriter &w, int index) {
  const RoleInfo &role = roles[index];
  currentRole = index;
  if (memoryMode) {
    const int first = firstWarp[index];
    w.comment(cat("==== role \"", role.name, "\": warps [", first, ", ", first + role.warps, "), ", role.regs,
                  " registers a thread ===="));
    w.open(cat("if (threadIdx.x / 32 >= ", first, " && threadIdx.x / 32 < ", first + role.warps, ")"));
    printBudget(w, budgets[index], role.warps == kWarpsPerWarpgroup ? cat("\"", role.name, "\" asks for ", role.regs)
                                                                     : std::string("the one-warp roles' warpgroup"));
    const RoleMemoryInfo &uses = roleUses[index];
    if (!uses.allocates && !uses.issuesMma && !uses.accessesBuffers) {
      w.comment("one thread issues the role's copies and waits (TMA copies are issued by a thread, not a warp)");
      w.open(cat("if (threadIdx.x == ", first * kWarpSize, ")"));
    }
    return;
  }
  const int first = firstWarp[index], regs = launchRegisters(shape.warps * kWarpSize);
  w.comment(cat("==== role \"", role.name, "\": warps [", first, ", ", first + role.warps, ") ===="));
  w.open(cat("if (threadIdx.x / 32 >= ", first, " && threadIdx.x / 32 < ", first + role.warps, ")"));
  if (role.regs < regs && producerKeepsLaunchRegisters(index))
    w.comment(cat("keeps the launch's ", regs, " registers: the computing roles' budgets fit beside them (a decrease to ",
                  role.regs, " made ptxas spill values live across it)"));
  else if (role.regs < regs)
    w.line(cat("sm100::warpgroup::decreaseRegisters<", role.regs, ">();  // from ", regs, " at launch"));
  else if (role.regs > regs)
    w.line(cat("sm100::warpgroup::increaseRegisters<", role.regs, ">();  // from ", regs, " at launch"));
  if (!role.computes) {
    w.comment("one thread issues the role's copies and waits (TMA copies are issued by a thread, not a warp)");
    w.open(cat("if (threadIdx.x == ", first * kWarpSize, ")"));
  }
}

void TileTargetSm100::closeRole(CudaWriter &w, int index) {
  currentRole = -1;
  if (memoryMode) {
    const RoleMemoryInfo &uses = roleUses[index];
    if (!uses.allocates && !uses.issuesMma && !uses.accessesBuffers)
      w.close();
    if (shape.ctaPair)
      w.line("sm100::pair::clusterSync();  // no CTA of the pair exits while the other may still reach its barriers");
    w.close();
    return;
  }
  if (!roles[index].computes) {
    w.close();
    w.close();
    return;
  }
  w.comment("every computing thread's tcgen05 accesses are done before the allocating warp frees tensor memory");
  w.line("sm100::fence::beforeThreadSync();");
  w.line(cat("sm100::namedBarrier::sync(", kFirstGroupBarrier, " + kGroups, kGroups * 128);"));
  w.open("if (warp == 0)");
  w.line("sm100::fence::afterThreadSync();");
  w.line("sm100::tmem::dealloc<kTmemAllocColumns>(tmemBase);");
  w.close();
  w.close();
}

void TileTargetSm100::barrierWait(CudaWriter &w, int index, const std::string &position) {
  if (memoryMode && shape.ctaPair && barriers[index].bytes > 0) {
    w.comment("a cluster pair: both CTAs' copies complete on the leader's barrier, which its MMA warp waits on");
    w.open("if (leaderCta)");
    printRingWait(w, kIsa, barriers[index], position);
    w.close();
    return;
  }
  printRingWait(w, kIsa, barriers[index], position);
}

void TileTargetSm100::barrierArrive(CudaWriter &w, int index, const std::string &position) {
  printRingRelease(w, kIsa, barriers[index], position,
                   "its MMA completed (the commit covers the reads of its operands); one arrival per warp");
}

void TileTargetSm100::copyToSlot(CudaWriter &w, Operand operand, const std::string &tile, const std::string &position,
                                 int index) {
  if (memoryMode && shape.ctaPair)
    return copyPairHalf(w, operand, tile, position, barriers[index]);
  printRingCopy(w, kIsa, operand, tile, position, barriers[index]);
}

void TileTargetSm100::copyPairHalf(CudaWriter &w, Operand operand, const std::string &tile,
                                   const std::string &position, const BarrierInfo &barrier) const {
  const std::string slot = ringSlot(position, barrier.slots);
  const std::string leaderBar = cat("sm100::pair::mapTo(&", barrier.name, "[slot], sm100::pair::kLeader)");
  w.open("");
  w.line(cat("const int slot = ", slot, ";"));
  w.line(cat("const unsigned bar = ", leaderBar, ";  // the leader's: both CTAs' bytes complete its phase"));
  if (operand == Operand::Q) {
    w.comment("TMA: this CTA's Q tile (its own kBlockM rows: the A operand of its rows of the pair's MMAs)");
    w.line("sm100::pair::arriveExpectTx(bar, kQTileBytes);");
    w.line("sm100::pair::load5d(sQ, &maps.q, bar, 0, qRow0 + m0, 0, h, tmaBatch);");
  } else if (operand == Operand::K) {
    w.comment(cat("TMA: this CTA's half of K tile ", tile, " (keys [ctaRank · kBlockN / 2, +kBlockN / 2) of it: the pair's "
                  "B operand of Q·Kᵀ is both halves)"));
    w.line("sm100::pair::arriveExpectTx(bar, kKTileBytes / 2);");
    w.line(cat("sm100::pair::load5d(sK + slot * kKTileBytes, &maps.k, bar, 0, kRow0 + ", tile,
               " * kBlockN + ctaRank * (kBlockN / 2), 0, hKv, tmaBatch);"));
  } else {
    w.comment(cat("TMA: this CTA's half of V tile ", tile, "'s columns (rank r: columns [r · kHeadDimV / 2, +kHeadDimV / 2)),"));
    w.comment("as two boxes of kBlockN / 2 keys x kHeadDimV / 64 column blocks starting at column block (r - 1) · kVHalfBlocks:");
    w.comment("the blocks outside V read as zeros, so both CTAs' halves land at column blocks [kVHalfBlocks, 2 kVHalfBlocks)");
    w.comment("of each box, the same offset in both (the pair's MMA names one address for both); rank 1's boxes also read");
    w.comment("the first half, unused (the boxes span the whole head dim)");
    w.line("sm100::pair::arriveExpectTx(bar, kVTileBytes);");
    w.openUnrolledFor("box", "2");
    w.line(cat("sm100::pair::load5d(sV + slot * kVTileBytes + box * kVBoxBytes, &maps.v, bar, 0, kRow0 + ", tile,
               " * kBlockN + box * (kBlockN / 2), (static_cast<int>(ctaRank) - 1) * kVHalfBlocks, hKv, tmaBatch);"));
    w.close();
  }
  w.close();
}

void TileTargetSm100::forEachOChunk(CudaWriter &w, const std::function<void()> &body) const {
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("oc", "kOTiles / kOChunkTiles");
  w.line("float o[kOChunkTiles][4];");
  w.line("sm100::tmem::Fragments<kOChunkTiles>::loadC(sm100::tmem::warpHalfAddress(tmemO, mt, 8 * kOChunkTiles * oc), "
         "o);");
  w.line("sm100::tmem::waitLoad();");
  w.line("sm100::tmem::Fragments<kOChunkTiles>::fenceC(o);");
  body();
  w.close();
  w.close();
}

void TileTargetSm100::initState(CudaWriter &w, const StateNames &st) {
  w.comment("---- online-softmax state: this thread's rows' running max m (log2 domain) and running sum l in");
  w.comment("registers; the accumulator O in tensor memory (tmemO), zeroed here: every P·V accumulates into it ----");
  w.line(cat("float ", st.rowMax, "[kMTiles][2], ", st.rowSum, "[kMTiles][2];"));
  fragments.forEachRow(w, [&] {
    w.line(cat(st.rowMax, "[mt][r] = ", kFragmentNamespace, "::kNegInf;"));
    w.line(cat(st.rowSum, "[mt][r] = 0.f;"));
  });
  w.open("");
  w.line("const float zero[kOChunkTiles][4] = {};");
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("oc", "kOTiles / kOChunkTiles");
  w.line("sm100::tmem::Fragments<kOChunkTiles>::storeC(sm100::tmem::warpHalfAddress(tmemO, mt, 8 * kOChunkTiles * oc),"
         " zero);");
  w.close();
  w.close();
  w.line("sm100::tmem::waitStore();");
  w.close();
}

void TileTargetSm100::openIssue(CudaWriter &w) const {
  w.line("sm100::fence::beforeThreadSync();");
  w.line(cat("sm100::namedBarrier::sync(", kFirstGroupBarrier, " + group, 128);  // this warpgroup's threads"));
  w.open("if (warp % 4 == 0)");
  w.line("sm100::fence::afterThreadSync();");
  w.open("if (sm100::warp::elect())");
}

void TileTargetSm100::closeIssue(CudaWriter &w) const {
  w.line("sm100::mma::commit(&mmaDone[group]);");
  w.close();
  w.line("__syncwarp();");
  w.close();
}

void TileTargetSm100::qk(CudaWriter &w, const std::string &kSlot, const std::string &scores) {
  w.comment(cat(scores, " = Q·Kᵀ into tensor memory (tmemS): tcgen05.mma M = 128, N = kBlockN, k16 steps, ",
                shape.dtype, " SS: this warpgroup's 128 rows of sQ and the K tile in slot ", kSlot,
                " % kStages, both K-major (a k16 step is 32 bytes of a 128-byte row; the next 64 columns are the"));
  w.comment("next column block). Issued by one thread once every thread of the warpgroup is done with the S and P");
  w.comment("it overwrites; read after its wait");
  w.line(cat("float ", scores, "[kMTiles][kSTiles][4];"));
  w.open("");
  w.line("const unsigned qAddr = sm100::smemAddress(sQ) + group * 128 * 128;");
  w.line(cat("const unsigned kAddr = sm100::smemAddress(sK) + (", kSlot, ") % kStages * kKTileBytes;"));
  openIssue(w);
  w.comment("not unrolled: unrolled, the compiler hoists every k16 step's Q descriptor (loop-invariant, 64 bits each)");
  w.comment("out of the K/V loop, registers the softmax needs (local-memory spills at head dim 256)");
  w.line("#pragma unroll 1");
  w.open("for (int ks = 0; ks < kHeadDim / 16; ++ks)");
  w.line("sm100::mma::f16SS(tmemS, sm100::desc::make(kQDesc, qAddr + ks / 4 * kBlockM * 128 + ks % 4 * 32),");
  w.line("                  sm100::desc::make(kKDesc, kAddr + ks / 4 * kBlockN * 128 + ks % 4 * 32), kQkIdesc, ks > 0);");
  w.close();
  closeIssue(w);
  w.close();
}

void TileTargetSm100::roundProbabilities(CudaWriter &w, const std::string &s, const std::string &p, bool carried) {
  assert(!carried && "the sm100 family retires each P·V before the next softmax: P is never carried");
  (void)carried;
  fragments.packProbabilities(w, s, p, /*declare=*/true);
  w.comment(cat("P over S in tensor memory (tcgen05.st.16x128b: the A fragments land where the TMEM-A form of"));
  w.comment("tcgen05.mma reads P·V's A, row r in lane r, keys 2c and 2c + 1 in column c)");
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat("sm100::tmem::Fragments<kSTiles>::storeA(sm100::tmem::warpHalfAddress(tmemS, mt, 0), ", p, "[mt]);"));
  w.close();
  w.line("sm100::tmem::waitStore();");
}

void TileTargetSm100::rescale(CudaWriter &w, const StateNames &, bool onlyWhenMoved) {
  w.comment("rescale: O *= alpha in tensor memory, a 64-column chunk at a time (no MMA writes O now: the last P·V was");
  w.comment("waited on)");
  if (onlyWhenMoved) {
    w.comment("only when the softmax step moved this warp's maxes: else every alpha is 1");
    w.open("if (maxMoved)");
  } else {
    w.open("");
  }
  forEachOChunk(w, [&] {
    w.openUnrolledFor("nt", "kOChunkTiles");
    w.openUnrolledFor("i", "4");
    w.line("o[nt][i] *= alpha[mt][i / 2];");
    w.close();
    w.close();
    w.line("sm100::tmem::Fragments<kOChunkTiles>::storeC(sm100::tmem::warpHalfAddress(tmemO, mt, 8 * kOChunkTiles * "
           "oc), o);");
  });
  w.line("sm100::tmem::waitStore();");
  w.close();
}

void TileTargetSm100::pv(CudaWriter &w, const StateNames &, const std::string &p, const std::string &vSlot) {
  w.comment(cat("O += P·V: tcgen05.mma M = 128, N = kHeadDimV, TS: P (", p,
                ", stored over S) from tensor memory, one k16 step every 8 columns, the V tile in slot ", vSlot,
                " % kStages MN-major (a k16 step is 16 rows, 2048 bytes, of every column block)"));
  w.open("");
  w.line(cat("const unsigned vAddr = sm100::smemAddress(sV) + (", vSlot, ") % kStages * kVTileBytes;"));
  openIssue(w);
  w.openUnrolledFor("k", "kBlockN / 16");
  w.line("sm100::mma::f16TS(tmemO, tmemS + 8 * k, sm100::desc::make(kVDesc, vAddr + k * 16 * 128), kPvIdesc, 1);");
  w.close();
  closeIssue(w);
  w.close();
}

void TileTargetSm100::mmaWait(CudaWriter &w, MmaResult result, const std::string &tile, const std::string &,
                              int newerInFlight, bool) {
  // One MMA barrier a warpgroup, one phase per GEMM: a wait retires the newest GEMM, so none may stay in flight
  // (the fa4 schedule waits on every GEMM before issuing the next; the family refuses nothing else here).
  assert(newerInFlight == 0 && "the sm100 family retires each GEMM before the next one is issued");
  (void)newerInFlight;
  w.comment(cat("wait for this warpgroup's ", result == MmaResult::Scores ? "Q·Kᵀ" : "P·V",
                " (tcgen05.commit arrived on mmaDone): its result is in tensor memory, its operands are free"));
  w.line("sm100::mbarrier::wait(&mmaDone[group], mmaPhase);");
  w.line("mmaPhase ^= 1;");
  w.line("sm100::fence::afterThreadSync();");
  if (result == MmaResult::Acc)
    return;
  w.comment(cat(tile, " from tensor memory into C fragments: two 16-row accesses (tcgen05.ld.16x256b) a warp"));
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat("sm100::tmem::Fragments<kSTiles>::loadC(sm100::tmem::warpHalfAddress(tmemS, mt, 0), ", tile, "[mt]);"));
  w.close();
  w.line("sm100::tmem::waitLoad();");
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat("sm100::tmem::Fragments<kSTiles>::fenceC(", tile, "[mt]);"));
  w.close();
}

void TileTargetSm100::storeO(CudaWriter &w, const StateNames &, bool stagedInQ) {
  assert(!stagedInQ && "the sm100 family stores O from tensor memory through registers");
  (void)stagedInQ;
  const char *pack = shape.dtype == "bf16" ? "sm100::pack::bf16x2" : "sm100::pack::f16x2";
  w.comment(cat("store O = acc / l: chunks of O from tensor memory (C fragments), times 1 / l of their rows, converted to ",
                shape.dtype, ", two adjacent columns (4 bytes) a store, rows < seqlen_q"));
  w.line("unsigned short *const gO = static_cast<unsigned short *>(p.o) + b * p.oBatchStride + h * p.oHeadStride;");
  forEachOChunk(w, [&] {
    w.openUnrolledFor("r", "2");
    w.line(cat("const int q = ", FragmentTiles::threadRow(), ";"));
    w.open("if (q < p.seqlenQ)");
    w.openUnrolledFor("nt", "kOChunkTiles");
    w.line(cat("*reinterpret_cast<unsigned *>(gO + q * p.oRowStride + 8 * (kOChunkTiles * oc + nt) + fragCol) = ",
               pack, "("));
    w.line("    o[nt][2 * r] * invL[mt][r], o[nt][2 * r + 1] * invL[mt][r]);");
    w.close();
    w.close();
    w.close();
  });
}

} // namespace detail

namespace {

using namespace detail;

class FamilySm100 final : public TargetFamily {
public:
  std::string_view name() const override { return kIsa; }
  std::string_view summary() const override {
    return "tcgen05.mma into tensor memory, TMA (cp.async.bulk.tensor), mbarrier (sm_100a; compiled, "
           "never run: no SM100 GPU was available)";
  }
  const std::vector<ArchLimits> &archs() const override {
    static const std::vector<ArchLimits> limits = {{kArch, kMaxSmemBytes, /*dependentLaunch=*/true}};
    return limits;
  }
  MmaShape mmaShape() const override { return {kMmaM, kMmaNStep, kMmaK}; }
  bool asyncProtocol() const override { return true; }

  std::optional<std::string> checkShape(const KernelShape &shape) const override {
    if (shape.dtype != "bf16" && shape.dtype != "f16")
      return "sm100: tcgen05.mma .kind::f16 takes bf16 or f16 tiles here, got " + shape.dtype;
    if (!shape.kvDtype.empty())
      return "sm100: K and V are read in the program's dtype here; kv_dtype " + shape.kvDtype +
             " (an e4m3 KV cache) is read by the sm80 family's decode kernels";
    for (auto [name, value] : {std::pair{"head_dim", shape.headDim}, {"head_dim_v", shape.headDimV}})
      if (value % kSwizzleColumns != 0 || value < kSwizzleColumns || value > kMmaMaxN)
        return cat("sm100: ", name, " (", value, ") must be a multiple of ", kSwizzleColumns, " up to ", kMmaMaxN,
                   " (whole 128-byte swizzled column blocks)");
    if (shape.blockN < 16 || shape.blockN > kMmaMaxN || !std::has_single_bit(static_cast<unsigned>(shape.blockN)))
      return cat("sm100: block-n (", shape.blockN, ") must be a power of two in [16, ", kMmaMaxN,
                 "] (the N of Q·Kᵀ's tcgen05.mma and the tcgen05.ld.16x256b access of S)");
    if (shape.warpLayout != WarpLayout::SplitQ)
      return cat("sm100: warp layout ", warpLayoutName(shape.warpLayout),
                 " is not printed; accepted: ", warpLayoutName(WarpLayout::SplitQ));
    const int groups = groupsOf(shape);
    if (shape.blockM % kMmaM != 0 || groups < 1 || groups > kMaxGroups ||
        (shape.warps != kWarpsPerWarpgroup * (groups + 1) && !memoryLayerShape(shape)))
      return cat("sm100: block-m (", shape.blockM, ") with ", shape.warps,
                 " warps: a block is one producer warpgroup plus one or two computing warpgroups of 128 rows each, "
                 "or (the memory layer's roles) those warpgroups, a correction warpgroup and one of one-warp roles");
    if (shape.warpRows != kRowsPerWarp)
      return cat("sm100: split_q warpRows (", shape.warpRows, ") must be ", kRowsPerWarp,
                 ": a computing warp holds its quarter of an M = 128 accumulator's lanes");
    if (groups * (shape.blockN + shape.headDimV) > kTmemColumns)
      return cat("sm100: ", groups, " warpgroup(s) x (block-n ", shape.blockN, " + head_dim_v ", shape.headDimV,
                 ") columns of S and O exceed tensor memory's ", kTmemColumns, " columns");
    if (shape.stages < 1 || shape.stages > 8)
      return cat("sm100: stages (", shape.stages, ") must be 1 to 8 slots per K/V ring");
    if (shape.packQueryHeads)
      return std::string("sm100: GQA packing is printed by the sm80 family");
    if (shape.exp2PolyShare < 0 || shape.exp2PolyShare > 8)
      return cat("sm100: exp2 poly share (", shape.exp2PolyShare, ") must be 0 to 8 eighths of the n8 tiles");
    if (shape.maxChains != 1)
      return std::string("sm100: the row maxima take one chain here (tile.max_chains must be 1)");
    if (shape.laneVote)
      return std::string("sm100: the rescale vote is taken from the quad maxima here (no tile.lane_vote)");
    if (shape.latePvWait)
      return std::string("sm100: no wgmma wait to place here (no tile.late_pv_wait)");
    for (const MmaF16Shape &mma : {qkShape(shape), pvShape(shape)})
      if (std::optional<std::string> why = checkMmaF16Shape(mma))
        return "sm100: " + *why;
    if (shape.ctaPair) {
      if (!memoryLayerShape(shape))
        return std::string("sm100: a cluster pair (tile.cta_pair) is printed for the memory layer's roles only (one MMA "
                           "warp issuing the pair's MMAs)");
      if (shape.headDimV % (2 * kSwizzleColumns) != 0)
        return cat("sm100: a cluster pair needs head_dim_v (", shape.headDimV, ") a multiple of ", 2 * kSwizzleColumns,
                   ": each CTA holds half of V's columns, whole 64-column blocks");
      if (shape.blockN < 2 * kMmaK || (shape.blockN / 2) % 8 != 0)
        return cat("sm100: a cluster pair needs block-n (", shape.blockN,
                   ") of at least 32: each CTA holds half of a K/V tile's keys, whole k16 steps");
    }
    return std::nullopt;
  }

  int64_t smemBytes(const KernelShape &shape) const override {
    if (memoryLayerShape(shape))
      return ringSmemBytes(shape, kSmemReserve + kMemoryLayerBarrierBytes +
                                      int64_t(groupsOf(shape)) * kMmaM * kMemoryLayerRowBytes);
    return ringSmemBytes(shape, kSmemReserve);
  }

  std::unique_ptr<TileTarget> createPrinter(const KernelShape &shape) const override {
    assert(!checkShape(shape) && "createPrinter needs a shape checkShape accepts");
    return std::make_unique<TileTargetSm100>(shape);
  }
};

} // namespace

std::unique_ptr<TargetFamily> createFamily() { return std::make_unique<FamilySm100>(); }

} // namespace flashtile::codegen::sm100
