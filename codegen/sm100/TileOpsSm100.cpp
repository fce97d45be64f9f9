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
// No SM100 GPU exists here: every kernel this file prints is checked by NVRTC, ptxas and its SASS, never run.
//===----------------------------------------------------------------------===//
#include "codegen/sm100/TileOpsSm100.h"
#include "codegen/common/Concat.h"
#include "codegen/common/FragmentPrelude.h"
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
namespace {

/// The namespace of the common fragment primitives (FragmentPrelude.h: quad reductions, exp2, constants) in these
/// kernels; the family's own instruction wrappers are in `sm100`.
constexpr const char *kFragmentNamespace = "frag";
constexpr int kWarpSize = 32;
/// Rows a computing warp holds: its quarter of an M = 128 tcgen05.mma accumulator (its TMEM lane quarter).
constexpr int kRowsPerWarp = kTmemLanes / kWarpsPerWarpgroup;
/// O is rescaled and read in chunks of this many n8 tiles (64 columns, 32 registers a thread).
constexpr int kOChunkTiles = 8;
constexpr int kMaxRegisters = 256, kRegisterFile = 65536;
/// Shared memory past the tiles: the first tile's alignment to the swizzle repeat (the dynamic base is only 16-byte
/// aligned), the barriers (8 bytes each: Q's, 4 x 8 ring slots, one MMA barrier per warpgroup) and the TMEM base.
constexpr int kSmemReserve = 2 * kSwizzleAtomBytes;
/// Named barriers: 1 + g syncs computing warpgroup g's 128 threads before its thread issues an MMA; the one after
/// the last warpgroup's syncs every computing thread before tensor memory is freed. 0 is __syncthreads'.
constexpr int kFirstGroupBarrier = 1;
/// Computing warpgroups a block may have (hardware barriers 1..15 and TMEM's 128 lanes per warpgroup tile).
constexpr int kMaxGroups = 2;
/// The memory layer's kernels (FA4's own roles): shared memory past the ring's reserve for the channels' barriers and
/// the tensor-memory word, and per Q tile of 128 rows for its shared buffers (a rescale factor a row; m and l a row).
constexpr int kMemoryLayerBarrierBytes = 2048, kMemoryLayerRowBytes = 3 * 4;
/// The correction warpgroup moves O between tensor memory and registers 32 columns (tcgen05.ld/st.32x32b.x32) at a
/// time, one row a thread.
constexpr int kRowChunk = 32;
/// CTAs of a cluster pair (tile.cta_pair): the arrivals a pair barrier counts at the leader.
constexpr int kCtaPairCount = 2;

/// Whether `shape` is laid out for the memory layer's roles (FA4's own: softmax warpgroups, a correction warpgroup
/// and a warpgroup of one-warp roles, the MMA warp's among them) rather than the first form's (a producer
/// warpgroup and the computing warpgroups).
bool memoryLayerShape(const KernelShape &shape) {
  return shape.warps == kWarpsPerWarpgroup * (shape.blockM / kMmaM + 2);
}

int launchRegisters(int threads) { return std::min(kMaxRegisters - 1, kRegisterFile / threads) / 8 * 8; }

std::string hex64(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%016llxull", static_cast<unsigned long long>(value));
  return text;
}
std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08xu", value);
  return text;
}

MmaInputType inputType(const KernelShape &shape) {
  return shape.dtype == "bf16" ? MmaInputType::Bf16 : MmaInputType::F16;
}
/// S = Q·Kᵀ: M = 128 rows, N = the K/V tile's keys, both operands K-major, fp32 in tensor memory. A CTA pair
/// (shape.ctaPair): M = 256, cta_group::2, each CTA half of the keys.
MmaF16Shape qkShape(const KernelShape &shape) {
  return {inputType(shape), inputType(shape), MmaDtype::F32, shape.ctaPair ? kMmaMPair : kMmaM, shape.blockN,
          MmaMajor::K,      MmaMajor::K,      false,         shape.ctaPair ? 2 : 1};
}
/// O += P·V: P (A) from tensor memory, K-major; V (B) MN-major (its head dim is contiguous); N = the head dim of V.
/// A CTA pair: M = 256, cta_group::2, each CTA half of V's columns.
MmaF16Shape pvShape(const KernelShape &shape) {
  return {inputType(shape), inputType(shape), MmaDtype::F32, shape.ctaPair ? kMmaMPair : kMmaM, shape.headDimV,
          MmaMajor::K,      MmaMajor::MN,     true,          shape.ctaPair ? 2 : 1};
}
/// Computing warpgroups of `shape`: one per 128 query rows.
int groupsOf(const KernelShape &shape) { return shape.blockM / kMmaM; }
/// Tensor-memory columns the kernel allocates: S and O of every warpgroup, rounded up to a power of two (>= 32).
int tmemColumnsOf(const KernelShape &shape) {
  return std::max<int>(kTmemMinAllocColumns,
                       static_cast<int>(std::bit_ceil(static_cast<unsigned>(
                           groupsOf(shape) * (shape.blockN + shape.headDimV)))));
}

class TileTargetSm100 final : public TileTarget {
public:
  explicit TileTargetSm100(const KernelShape &shape)
      : shape(shape), fragments({kFragmentNamespace, shape.dtype, shape.packQueryHeads}) {
    consumerWarps = shape.blockM / kRowsPerWarp;
    const int fragmentTiles[] = {shape.blockN / 8, kOChunkTiles};
    preludeText = fragmentPrelude(kFragmentNamespace) + ::flashtile::codegen::sm100::prelude({}, fragmentTiles);
  }

  std::string_view prelude() const override { return preludeText; }
  std::string_view preludeNamespace() const override { return "sm100"; }
  std::vector<std::string> reservedNames() const override {
    std::vector<std::string> names = fragments.reservedNames();
    for (const char *name :
         {"sm100",     "maps",     "smemRaw",  "kQTileBytes", "kKTileBytes", "kVTileBytes", "kStages",  "qRow0",
          "kRow0",     "tmaBatch", "qAddr",    "kAddr",       "vAddr",       "slot",        "fullQ",    "fullK",
          "fullV",     "emptyQ",   "emptyK",   "emptyV",      "mmaDone",     "mmaPhase",    "tmemCell", "tmemBase",
          "tmemS",     "tmemO",    "kGroups",  "kOChunkTiles", "kTmemAllocColumns", "o",          "oc",       "zero",
          "kQDesc",    "kKDesc",   "kVDesc",   "kQkIdesc",    "kPvIdesc",    "group",       "ks",
          "chanFull",  "chanEmpty", "memBuf", "tmemRow",   "epilogueInvL", "epilogueLse", "kRowChunk", "chunk",
          "rowQ",      "gRow",     "wordsOut", "issuer",   "oRow",        "alphaRow",    "ctaRank",  "leaderCta",
          "kVBoxBytes", "kVHalfBlocks"})
      names.push_back(name);
    return names;
  }

  void setup(CudaWriter &w, const std::vector<Operand> &copied) override;
  void setupTile(CudaWriter &w) override;
  /// Copies arrive on barriers (copyToSlot) and waits are barrier waits: no cp.async groups.
  bool copyAsync(CudaWriter &, Operand, const std::string &, const std::string &) override { return false; }
  bool wait(CudaWriter &, const std::vector<Operand> &, int64_t) override { return false; }
  void load(CudaWriter &w, Operand operand, const std::string &tile) override {
    w.comment(cat(operandName(operand), operand == Operand::Q ? "" : cat(" tile ", tile),
                  " stays in its slot: tcgen05.mma reads it there through a descriptor"));
  }
  void initState(CudaWriter &w, const StateNames &st) override;
  void qk(CudaWriter &w, const std::string &kSlot, const std::string &scores) override;
  void carryScores(CudaWriter &w, const std::string &to, const std::string &from) override {
    fragments.carryScores(w, to, from);
  }
  void scale(CudaWriter &w, const std::string &s) override { fragments.scale(w, s); }
  void scoreMod(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn,
                KeyArg key) override {
    fragments.scoreMod(w, s, kTile, fn, key);
  }
  void mask(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn, KeyArg key,
            bool readsInputs) override {
    fragments.mask(w, s, kTile, fn, key, readsInputs);
  }
  /// P stays fp32 in the scores until roundProbabilities packs it and writes it over S in tensor memory.
  void softmaxUpdate(CudaWriter &w, const StateNames &st, const std::string &s, const std::string &, bool foldScale,
                     int rescaleThreshold) override {
    fragments.softmaxUpdate(w, st, s, foldScale, rescaleThreshold, "sm100::math::exp2Poly3x2", shape.exp2PolyShare);
  }
  void roundProbabilities(CudaWriter &w, const std::string &s, const std::string &p, bool carried) override;
  void rescale(CudaWriter &w, const StateNames &st, bool onlyWhenMoved) override;
  void pv(CudaWriter &w, const StateNames &st, const std::string &p, const std::string &vSlot) override;
  void finalize(CudaWriter &w, const StateNames &st, const std::string &sinkFn) override {
    fragments.finalize(w, st, sinkFn, /*scaleAcc=*/false);
  }
  void storeO(CudaWriter &w, const StateNames &st, bool stagedInQ) override;
  void storeLse(CudaWriter &w) override { fragments.storeLse(w); }
  /// No split of the key range (split-KV) here.
  bool storeSplit(CudaWriter &, const StateNames &, const std::string &, bool) override { return false; }
  bool combineRow(CudaWriter &, const std::string &) override { return false; }

  std::string extraKernelParams() const override { return ", const __grid_constant__ sm100::TensorMaps maps"; }
  bool takesTensorMaps() const override { return true; }
  int tensorMapSwizzleBytes() const override { return kSwizzleBytes; }
  std::optional<RoleProblem> checkRoles(const std::vector<RoleInfo> &roles) const override;
  void setupRoles(CudaWriter &w, const std::vector<RoleInfo> &roles, const std::vector<BarrierInfo> &barriers) override;
  void openRole(CudaWriter &w, int role) override;
  void closeRole(CudaWriter &w, int role) override;
  void barrierWait(CudaWriter &w, int barrier, const std::string &position) override;
  void barrierArrive(CudaWriter &w, int barrier, const std::string &position) override;
  void copyToSlot(CudaWriter &w, Operand operand, const std::string &tile, const std::string &position,
                  int barrier) override;
  void mmaWait(CudaWriter &w, MmaResult result, const std::string &tile, const std::string &operand,
               int newerInFlight) override;

  // ---- The memory layer (FA4's own roles; TileOpsSm100.cpp's second half) ----
  bool memoryLayer(int tmemColumns, const std::vector<MemBufferInfo> &buffers, const std::vector<ChannelInfo> &channels,
                   const std::vector<RoleMemoryInfo> &roleMemory) override;
  bool tmemAlloc(CudaWriter &w) override;
  bool tmemFree(CudaWriter &w) override;
  bool channelWait(CudaWriter &w, int channel, bool full, const std::string &position) override;
  bool channelArrive(CudaWriter &w, int channel, bool full, const std::string &position) override;
  bool mmaCommit(CudaWriter &w, int channel, int ringBarrier, const std::string &position) override;
  bool mmaQk(CudaWriter &w, const std::string &kSlot, int s, int64_t qRowOffset) override;
  bool mmaPv(CudaWriter &w, int p, const std::string &vSlot, int o) override;
  bool loadScores(CudaWriter &w, int buffer, const std::string &scores) override;
  bool initStats(CudaWriter &w, const StateNames &st) override;
  bool storeAlpha(CudaWriter &w, int buffer) override;
  bool storeProbabilities(CudaWriter &w, int buffer, const std::string &s, const std::string &p) override;
  bool storeStats(CudaWriter &w, int buffer, const StateNames &st) override;
  bool loadStats(CudaWriter &w, int buffer, const StateNames &st) override;
  bool zeroAcc(CudaWriter &w, int buffer) override;
  bool loadRows(CudaWriter &w, int buffer, const std::string &rows) override;
  bool rescaleInPlace(CudaWriter &w, int acc, const std::string &alpha, bool onlyWhenMoved) override;
  bool finalizeBuffer(CudaWriter &w, const StateNames &st, int acc, const std::string &sinkFn) override;
  bool storeOFromBuffer(CudaWriter &w, int acc, int64_t rowOffset) override;
  bool storeLseRows(CudaWriter &w, int acc, int64_t rowOffset) override;

private:
  // ---- the memory layer ----
  /// setupRoles and the role layout of a memory-layer program.
  std::optional<RoleProblem> checkMemoryRoles(const std::vector<RoleInfo> &roleList) const;
  void setupMemoryRoles(CudaWriter &w);
  /// The C expression of buffer `buffer`'s tensor-memory address (column; lane 0) / its shared-memory floats.
  std::string tmemOf(int buffer) const { return cat("(*tmemCell + ", memBuffers[buffer].column, "u)"); }
  std::string smemOf(int buffer) const { return cat("(memBuf + ", smemOffset[buffer], ")"); }
  /// Whether the role being printed runs in a warpgroup (else one warp) and its named barrier.
  bool inWarpgroup() const { return roles[currentRole].warps == kWarpsPerWarpgroup; }
  /// Everything the role's threads did (their tensor-memory stores, shared-memory writes) before one of them arrives
  /// on a channel: a fence, the role's barrier (a warp's __syncwarp), a fence.
  void roleSync(CudaWriter &w) const;
  /// Loops over this thread's row of the accumulator in buffer `acc`, kRowChunk columns (chunk `chunk`) at a time,
  /// loaded into `oRow` (tcgen05.ld.32x32b); `body` works on them.
  void forEachRowChunk(CudaWriter &w, int acc, const std::function<void()> &body) const;
  /// A cluster pair: this CTA's share of a ring copy (its Q tile; half of a K tile's keys; half of a V tile's columns),
  /// counted on the leader's full barrier.
  void copyPairHalf(CudaWriter &w, Operand operand, const std::string &tile, const std::string &position,
                    const BarrierInfo &barrier) const;
  /// Whether the role being printed issues the pair's MMAs (its waits for the pair and its MMAs and commits are the
  /// leader CTA's only).
  bool pairIssuer() const { return shape.ctaPair && currentRole >= 0 && roleUses[currentRole].issuesMma; }
  /// The warpgroup of Q-tile rows buffer `buffer` (a tensor-memory tile of 128 lanes) serves: its S / P / O group.
  bool memoryMode = false;
  int tmemAllocColumns = 0;
  std::vector<MemBufferInfo> memBuffers;
  std::vector<int> smemOffset; ///< per shared buffer: its first float in memBuf
  std::vector<ChannelInfo> channelList;
  std::vector<RoleMemoryInfo> roleUses;
  int currentRole = -1;
  std::vector<int> budgets; ///< per role: the registers a thread its setmaxnreg gives (or the launch's)
  void printBudget(CudaWriter &w, int regs, const std::string &who) const;

  /// Opens the block in which one elected thread of the calling warpgroup issues its MMAs: every thread's earlier
  /// tcgen05 accesses (the loads of S, the stores of P and O) are ordered before them by fence, warpgroup barrier,
  /// fence. Closed by closeIssue after the commit.
  void openIssue(CudaWriter &w) const;
  void closeIssue(CudaWriter &w) const;
  /// Loops over this warp's O in chunks: m16 tile `mt` (16 rows at lane 16·mt of the warp's quarter), chunk `oc`
  /// of kOChunkTiles n8 tiles, loaded into `o` in C fragments; `body` works on o.
  void forEachOChunk(CudaWriter &w, const std::function<void()> &body) const;
  /// Whether role `index`, which asks for fewer registers than the launch gives, may keep the launch's count: the
  /// other roles' budgets fit the register file beside it. ptxas for sm_100a spilled values that live across a
  /// setmaxnreg.dec to local memory (one value, head dim 256 with one softmax warpgroup, 2026-12-02): a decrease
  /// nobody needs is not printed.
  bool producerKeepsLaunchRegisters(int index) const {
    const int regs = launchRegisters(shape.warps * kWarpSize);
    int64_t total = 0;
    for (size_t i = 0; i < roles.size(); ++i)
      total += int64_t(roles[i].warps) * kWarpSize * (static_cast<int>(i) == index ? regs : roles[i].regs);
    return total <= kRegisterFile;
  }

  KernelShape shape;
  int consumerWarps = 0;
  FragmentTiles fragments;
  std::string preludeText;
  std::vector<RoleInfo> roles;
  std::vector<BarrierInfo> barriers;
  std::vector<int> firstWarp; ///< per role
};

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

/// The register-tile counts both layouts declare: a warp's rows and m16 tiles, n8 tiles of a score and an output row.
void printTileCounts(CudaWriter &w) {
  w.line(cat("constexpr int kWarpRows = ", kRowsPerWarp, ", kMTiles = ", kRowsPerWarp / kFragmentAccessRows, ";"));
  w.line("constexpr int kSTiles = kBlockN / 8;     // n8 blocks of a score row");
  w.line("constexpr int kOTiles = kHeadDimV / 8;   // n8 blocks of an output row");
}

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
                              int newerInFlight) {
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
