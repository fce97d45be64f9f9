//===- TileTargetSm100.h - the sm100 family's tile printer, shared by its files -===//
//
// Private to codegen/sm100: the TileTargetSm100 class that TileOpsSm100.cpp (the first form: a producer warpgroup
// and the computing warpgroups, and the family) and MemoryLayerSm100.cpp (FA4's own roles on the memory layer)
// define between them, with the constants and helpers they share. No SM100 GPU exists here: every kernel these
// files print is checked by NVRTC, ptxas and its SASS, never run.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM100_TILETARGETSM100_H
#define FLASHTILE_CODEGEN_SM100_TILETARGETSM100_H

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

namespace flashtile::codegen::sm100::detail {


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
inline bool memoryLayerShape(const KernelShape &shape) {
  return shape.warps == kWarpsPerWarpgroup * (shape.blockM / kMmaM + 2);
}

inline int launchRegisters(int threads) { return std::min(kMaxRegisters - 1, kRegisterFile / threads) / 8 * 8; }

inline std::string hex64(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%016llxull", static_cast<unsigned long long>(value));
  return text;
}
inline std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08xu", value);
  return text;
}

inline MmaInputType inputType(const KernelShape &shape) {
  return shape.dtype == "bf16" ? MmaInputType::Bf16 : MmaInputType::F16;
}
/// S = Q·Kᵀ: M = 128 rows, N = the K/V tile's keys, both operands K-major, fp32 in tensor memory. A CTA pair
/// (shape.ctaPair): M = 256, cta_group::2, each CTA half of the keys.
inline MmaF16Shape qkShape(const KernelShape &shape) {
  return {inputType(shape), inputType(shape), MmaDtype::F32, shape.ctaPair ? kMmaMPair : kMmaM, shape.blockN,
          MmaMajor::K,      MmaMajor::K,      false,         shape.ctaPair ? 2 : 1};
}
/// O += P·V: P (A) from tensor memory, K-major; V (B) MN-major (its head dim is contiguous); N = the head dim of V.
/// A CTA pair: M = 256, cta_group::2, each CTA half of V's columns.
inline MmaF16Shape pvShape(const KernelShape &shape) {
  return {inputType(shape), inputType(shape), MmaDtype::F32, shape.ctaPair ? kMmaMPair : kMmaM, shape.headDimV,
          MmaMajor::K,      MmaMajor::MN,     true,          shape.ctaPair ? 2 : 1};
}
/// Computing warpgroups of `shape`: one per 128 query rows.
inline int groupsOf(const KernelShape &shape) { return shape.blockM / kMmaM; }
/// Tensor-memory columns the kernel allocates: S and O of every warpgroup, rounded up to a power of two (>= 32).
inline int tmemColumnsOf(const KernelShape &shape) {
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
  void mmaWait(CudaWriter &w, MmaResult result, const std::string &tile, const std::string &operand, int newerInFlight,
               bool afterUnmaskedSoftmax) override;

  // ---- The memory layer (FA4's own roles; MemoryLayerSm100.cpp) ----
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

/// The register-tile counts both layouts declare: a warp's rows and m16 tiles, n8 tiles of a score and an output row.
inline void printTileCounts(CudaWriter &w) {
  w.line(cat("constexpr int kWarpRows = ", kRowsPerWarp, ", kMTiles = ", kRowsPerWarp / kFragmentAccessRows, ";"));
  w.line("constexpr int kSTiles = kBlockN / 8;     // n8 blocks of a score row");
  w.line("constexpr int kOTiles = kHeadDimV / 8;   // n8 blocks of an output row");
}

} // namespace flashtile::codegen::sm100::detail

#endif // FLASHTILE_CODEGEN_SM100_TILETARGETSM100_H
