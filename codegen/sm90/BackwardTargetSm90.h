//===- BackwardTargetSm90.h - the sm90 BackwardTarget, shared by its two files ===//
//
// Private to codegen/sm90: the BackwardSm90 class (BackwardSm90.h's printer) that BackwardSm90.cpp (the GEMMs, the
// staging, dQ's products) and BackwardRolesSm90.cpp (the roles: the dQ writer, the load warp, their barriers and
// shared memory) define between them, with the constants and layout helpers both use.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM90_BACKWARDTARGETSM90_H
#define FLASHTILE_CODEGEN_SM90_BACKWARDTARGETSM90_H

#include "codegen/sm90/BackwardSm90.h"
#include "codegen/ptx/BackwardPrelude.h"
#include "codegen/common/Concat.h"
#include "codegen/ptx/FragmentPrelude.h"
#include "codegen/common/FragmentTiles.h"
#include "codegen/sm90/InstructionsSm90.h"
#include "codegen/sm90/PreludeSm90.h"
#include <map>
#include <optional>
#include <vector>

namespace flashtile::codegen::sm90::detail {

constexpr int kWarpgroupWarps = 4;
/// The computing warpgroups a block has at most.
constexpr int kMaxWarpgroups = 2;
/// The unit of dQ's products (dqRounds): a 128-byte column block of K, 64 columns; a round takes one or two.
constexpr int kDqColumns = kSwizzleColumns;
/// Bytes of the m64 rows of one warpgroup in a column block of a swizzled tile.
constexpr int kWarpgroupRowBytes = kWgmmaM * kSwizzleBytes;
/// The named barrier of the computing warps when the block has roles (0 is __syncthreads'); the warpgroups' own
/// follow it (kComputeBarrier + 1 + the warpgroup's index).
constexpr int kComputeBarrier = 1;
/// The named barrier of the dQ writer warps (deterministic mode: the turn is taken and passed for all of them).
constexpr int kWriterBarrier = kComputeBarrier + 1 + kMaxWarpgroups;
/// The roles' mbarriers: the dQ writer's two (full, empty), then the load warp's (K/V; the ring's full and empty per
/// buffer), and after them the tile index the writer reads, 16-byte aligned.
/// With a single dO buffer (KernelShape::singleDo) two more follow the ring's: dO's full and empty.
constexpr int kDqBarriers = 2, kLoadBarriers = 5, kDoBarriers = 2, kRoleBarrierBytes = 64, kRoleBarrierBytesSingleDo = 80;
static_assert((kDqBarriers + kLoadBarriers) * 8 + 4 <= kRoleBarrierBytes, "the roles' barriers and tile index fit");
static_assert((kDqBarriers + kLoadBarriers + kDoBarriers) * 8 + 4 <= kRoleBarrierBytesSingleDo,
              "the roles' barriers, dO's and the tile index fit");
/// The dQ buffer's row pitch beyond the head dim, in floats, at head dims from kDqPadFrom: 8 (32 bytes) puts the rows
/// of a warp's fragment stores 8 banks apart, so that a warp's float2 stores take the two wavefronts of their 256
/// bytes (an unpadded row of 64 or 128 floats maps every row to the same banks: 8-way conflicts), at the price of one
/// bulk reduce-add a row instead of one a tile. Measured on the H100 (bench/NOTES.md v30): at head dim 128 (64 rows
/// a tile) +14% non-causal; at 64 (128 rows of 256 bytes a tile, each add issued in turn) -21%, so unpadded there.
constexpr int kDqPadFloats = 8, kDqPadFrom = 96;
/// The Q tile's rows of the transposed dQ's layout (transposesDq).
constexpr int kRowsTransposedDq = 80;

/// Whether the warpgroups split dK's and dV's columns (the column split: a K/V tile of one m64 of keys, every
/// warpgroup all of its keys and head_dim / W columns of dK and dV, W·32 keys of S and dP shared out as in the key
/// split): at head dims 192 and 256, where a warpgroup's 64 keys of dK and dV over the whole head dim pass the
/// registers.
inline bool splitsColumns(const KernelShape &shape) {
  return !shape.swapKv && shape.keyWarps > 1 && shape.keyWarps == shape.warps / kWarpgroupWarps &&
         shape.blockN == kWgmmaM;
}

/// dQ computed transposed (dQᵀ = Kᵀ·dSᵀ: the head dim on wgmma's M, a warpgroup's m64 of it; the Q tile's rows on N,
/// dS staged [query rows][keys] as dQᵀ's K-major B): under the swapped scores, Q tiles whose rows are not a wgmma's
/// m64 (block-m 80: FA3's dQ_swapAB at head dim 128).
inline bool transposesDq(const KernelShape &shape) { return shape.swapScores && shape.blockM != kWgmmaM; }

/// The swizzle span of a kernel's Q, dO, K and V tiles: 128 bytes (64-column blocks) where every column a GEMM
/// starts at is a multiple of 64 (the head dims, and under the column split a warpgroup's part of them), else 64
/// bytes (32-column blocks: head dim 96, and 192 split in 96-column parts: the column split's dK and dV, and dQ's
/// products under the transposed dK and dV). The staged P and dS keep 128 (their rows are a Q tile's 64 query rows).
inline int tileSwizzleBytes(const KernelShape &shape) {
  const int64_t parts = splitsColumns(shape) || shape.swapKv ? shape.keyWarps : 1;
  for (int64_t width : {shape.headDim, shape.headDimV})
    if (width % (kSwizzleColumns * parts) != 0)
      return kSwizzleBytes / 2;
  return kSwizzleBytes;
}

/// The family's backward primitives: fp32 reductions into global memory, one pair a thread or a whole buffer.
inline constexpr std::string_view kBackwardText = R"cuda(
// ==== sm90 backward primitives: fp32 reductions into global memory ====
namespace sm90 {
// dst[0] += x, dst[1] += y (dst 8-byte aligned), fp32, without reading the result back (red.global.add.v2: the order
// of concurrent adds is the hardware's).
__device__ __forceinline__ void redAdd2(float *dst, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
}
// dst[0..3] += x, y, z, u (dst 16-byte aligned), fp32, without reading the result back (red.global.add.v4).
__device__ __forceinline__ void redAdd4(float *dst, float x, float y, float z, float u) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(x), "f"(y), "f"(z), "f"(u) : "memory");
}
// dst[i] += src[i] for the `bytes` / 4 floats of a shared-memory buffer (16-byte aligned, bytes a multiple of 16), by
// the bulk copy engine (cp.reduce.async.bulk: one instruction, element-wise adds in global memory; each element added
// once). Committed with tma::storeCommit, waited for with tma::storeWaitRead (src reusable) or tma::storeWait (done).
__device__ __forceinline__ void bulkReduceAddF32(float *dst, const float *src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smemAddress(src)), "r"(bytes)
               : "memory");
}
// dst[0, bytes) = src[0, bytes) (both 16-byte aligned, bytes a multiple of 16) from shared to global memory by the
// bulk copy engine (cp.async.bulk: one instruction). Committed with tma::storeCommit, waited for with
// tma::storeWaitRead (src reusable, and before the block exits).
__device__ __forceinline__ void bulkStore(void *dst, const void *src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(smemAddress(src)),
               "r"(bytes)
               : "memory");
}
namespace desc {
// The byte offsets of k16 slice `step` in a tile (a constant for a constant step): kMajorStep(tileAddr, step, rows) is
// advance(kMajor(tileAddr), kMajorStepBytes(step, rows)), and mnMajorStep's likewise, one add to a descriptor made
// once per GEMM (the start address field cannot carry: shared addresses stay below 2^18 bytes, so the 64-bit add never
// reaches the high word). One 64-bit add, which ptxas issues as one UIADD3.64 on the uniform descriptor: an add to the
// low word alone (the high word masked back in) made it rebuild the constant high word with a UMOV before every wgmma
// (SASS, 2026-12-07: 2 UMOVs a wgmma, 65 in the hd128 iteration against FA4's 20).
template <int kSwizzleBytes = 128>
__device__ __forceinline__ constexpr unsigned kMajorStepBytes(int step, int rows) {
  return unsigned(step / Swizzle<kSwizzleBytes>::kStepsPerBlock) * unsigned(rows) * kSwizzleBytes +
         unsigned(step % Swizzle<kSwizzleBytes>::kStepsPerBlock) * 32u;
}
template <int kSwizzleBytes = 128>
__device__ __forceinline__ constexpr unsigned mnMajorStepBytes(int step) {
  return unsigned(step) * 16u * kSwizzleBytes;
}
)cuda";

/// desc::offsetLow, advance(d, bytes) for a descriptor whose start address plus bytes stays in its 14-bit field: one
/// 64-bit add (kBackwardText's comment), or with `masked` the add to the low word alone, the high word masked back in
/// (the form before 2026-12-07). Both give the same descriptor.
inline std::string offsetLowText(bool masked) {
  return std::string("// advance(d, bytes) for a descriptor whose start address plus bytes stays in its 14-bit field")
      .append(masked ? " (the low\n// word's add, the high word masked back in: BackwardSm90::masksDescriptorAdds)" : "")
      .append(".\n__device__ __forceinline__ unsigned long long offsetLow(unsigned long long d, unsigned bytes) {\n")
      .append(masked ? "  return (d & 0xffffffff00000000ull) | (unsigned(d) + (bytes >> 4));\n" : "  return d + (bytes >> 4);\n")
      .append("}\n");
}

inline constexpr std::string_view kBackwardTextTail = R"cuda(} // namespace desc
// The TMA descriptors of a backward main kernel with a load warp, its second parameter (`const __grid_constant__
// sm90::BackwardTensorMaps maps`): Q and dO in Q-tile boxes, K and V in K/V-tile boxes, built per call by the runtime
// (runtime/TensorMap.h, backwardTensorMaps).
struct BackwardTensorMaps {
  TensorMap q, k, v, dO;
};
} // namespace sm90
)cuda";

class BackwardSm90 final : public BackwardTarget {
public:
  explicit BackwardSm90(const KernelShape &shape)
      : shape(shape), fragments({kFragmentNamespace, shape.dtype, false, shape.keyWarps > 1 ? "warpCol0" : ""}),
        warpgroups(shape.warps / kWarpgroupWarps), keySplit(shape.keyWarps > 1),
        columnSplit(splitsColumns(shape)), swizzle(tileSwizzleBytes(shape)) {
    mmaType = shape.dtype == "bf16" ? "bf16" : "f16";
    pack = ns + (shape.dtype == "bf16" ? "packBf16x2" : "packF16x2");
  }

  std::string prelude() const override {
    const SharedTile k = kTile();
    // dV's and dK's products are a warpgroup's columns of them: all, or a W-th under the column split.
    const int64_t parts = columnSplit ? warpgroups : 1;
    // S's and dP's N: the warpgroup's keys, or under the swap the Q tile's rows.
    std::vector<int> widths = {static_cast<int>(shape.swapScores ? shape.blockM : shape.blockN / shape.keyWarps)};
    if (!shape.swapKv)
      widths.insert(widths.end(), {static_cast<int>(shape.headDim / parts), static_cast<int>(shape.headDimV / parts)});
    // The GEMMs with an MN-major A: dQ's (dS staged [keys][query rows]) and, transposed, dV's and dK's (dOᵀ, Qᵀ: N the
    // warpgroup's keys).
    std::vector<int> dqWidths;
    for (const DqBlock &block : dqRounds(k))
      if (std::find(dqWidths.begin(), dqWidths.end(), block.width) == dqWidths.end())
        dqWidths.push_back(static_cast<int>(block.width));
    if (const int keys = static_cast<int>(shape.blockN / shape.keyWarps);
        shape.swapKv && std::find(dqWidths.begin(), dqWidths.end(), keys) == dqWidths.end())
      dqWidths.push_back(keys);
    if (dqReadsRegisters())
      widths.insert(widths.end(), dqWidths.begin(), dqWidths.end());
    std::string text = fragmentPrelude(kFragmentNamespace) + ::flashtile::codegen::sm90::prelude(widths);
    if (!dqReadsRegisters())
      for (int n : dqWidths)
        text += wgmmaMnMajorAText(n);
    return text + backwardPrelude(kFragmentNamespace, "") + std::string(kBackwardText) +
           offsetLowText(masksDescriptorAdds()) + std::string(kBackwardTextTail);
  }
  std::string_view primitivesNamespace() const override { return kFragmentNamespace; }
  std::vector<std::string> reservedNames() const override {
    return {"sm90",   "smemRaw", "aAddr", "bAddr", "dsFrag", "dqBlock", "dqPart", "frag",
            "key",    "q",      "sDq",     "dqBars", "sDqTile", "dqUses", "use",   "tile",   "row",  "rows",
            "kDqPitch", "maps", "kvBar", "fullBars", "emptyBars", "stage", "tileUses", "loads", "qRow0", "kRow0",
            "tmaBatch", "kQTileBytes", "dotFrag0", "dotFrag1", "qRing", "doRing", "ringOffset", "doBars", "kDoTileBytes",
            "sStageRing", "stagingRing", "stagingOffset", "kStagingBytes"};
  }
  bool splitsKeys() const override { return true; }
  bool swapsKv() const override { return true; }
  /// A warpgroup's four warps share its keys: warp w is row group w % 4 of the keys from 64·(w / 4).
  std::string keySplitLayout() const override {
    return cat("const int warpM = warp % ", kWarpgroupWarps, ", warpCol0 = warp / ", kWarpgroupWarps,
               " * (kBlockN / kKeyWarps);  // S: rows, keys (a warpgroup's)");
  }
  /// Under the column split warp w holds keys [16(w % 4), ...) of the tile (its warpgroup's m64 rows: all the keys)
  /// and column part w / 4.
  std::string kvSplitLayout() const override {
    if (shape.swapKv)
      return cat("const int kvRowGroup = warp % ", kWarpgroupWarps, ", kvColPart = warp / ", kWarpgroupWarps,
                 ";  // dKᵀ, dVᵀ: the warp's m16 of each m64 of columns, its warpgroup's keys");
    if (!columnSplit)
      return BackwardTarget::kvSplitLayout();
    return cat("const int kvRowGroup = warp % ", kWarpgroupWarps, ", kvColPart = warp / ", kWarpgroupWarps,
               ";  // dK, dV: the K/V tile's keys (a warpgroup's m64 rows), the warpgroup's columns");
  }
  std::string checkMainShape() const override {
    std::optional<std::string> error = checkBackwardShape(shape);
    return error ? *error : std::string();
  }

  int64_t tileBytes(int64_t rows, int64_t width) const override { return rows * width * 2; }
  std::string tileBytesExpr(const std::string &rows, const std::string &width) const override {
    return cat(rows, " * ", width, " * 2");
  }
  std::string tileLayoutWords() const override {
    return cat("sm90::swizzleOffset<", swizzle, ">, 1024-byte aligned");
  }
  void declareSharedMemory(CudaWriter &w) const override {
    w.line("extern __shared__ __align__(1024) unsigned char smemRaw[];");
    w.line(cat("unsigned char *const smem = smemRaw + (", kSwizzleAtomBytes, " - ", ns, "smemAddress(smemRaw) % ",
               kSwizzleAtomBytes, ") % ", kSwizzleAtomBytes, ";  // the swizzle atom's alignment"));
  }
  int sharedMemoryReserve() const override { return kSwizzleAtomBytes; }

  std::string copyWords() const override { return "cp.async"; }
  std::string copyChunk(const SharedTile &tile, const std::string &row, const std::string &col, const std::string &src,
                        const std::string &valid) const override {
    return cat(ns, "cpAsync16(", ns, "smemAddress(", tile.name, ") + sm90::swizzleOffset<", swizzle, ">(", row, ", 8 * ",
               col, ", ", tile.rows, "), ", src, ", ", valid, ");");
  }
  /// LSE and D from global memory, two rows a thread where the program loads them: 1 KB less shared memory a block,
  /// so that two blocks fit an SM at head dim 128 (115 712 bytes each).
  bool stagesRows() const override { return false; }
  void commitCopies(CudaWriter &w) override { w.line(cat(ns, "cpAsyncCommit();")); }
  void waitCopies(CudaWriter &w) override {
    w.line(cat(ns, "cpAsyncWait<0>();"));
    w.line("sm90::fence::proxyAsync();  // the copies' bytes visible to wgmma (the async proxy)");
  }

  void scoreGemm(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) override;
  bool issuesScoresTogether() const override { return shape.gemmOverlap; }
  void scoreGemms(CudaWriter &w, const std::string &first, const SharedTile &a, const SharedTile &b,
                  const std::string &second, const SharedTile &a2, const SharedTile &b2) override;
  void scoreWait(CudaWriter &w, const std::string &acc) override { waitFor(w, acc); }
  void endIteration(CudaWriter &w) override;
  void stage(CudaWriter &w, const std::string &buffer, const std::string &from) override;
  void stagedBarrier(CudaWriter &w) override {
    w.line("sm90::fence::proxyAsync();  // this thread's staged rows visible to wgmma");
    w.line(cat(computeBarrier(), "  // every warp's rows staged"));
  }
  /// Under the key split a warpgroup's staged rows are its own keys, the rows of its dotTn's A: its four warps'
  /// barrier (named barrier 2 + its index) is enough.
  void earlyStagedBarrier(CudaWriter &w) override {
    if (!keySplit)
      return stagedBarrier(w);
    w.line("sm90::fence::proxyAsync();  // this thread's staged rows visible to wgmma");
    w.line(cat("sm90::namedBarrier::sync(", kComputeBarrier + 1, " + warp / ", kWarpgroupWarps, ", ",
               kWarpgroupWarps * 32, ");  // the warpgroup's rows (its keys) staged"));
  }
  void dotTnEarly(CudaWriter &w, const std::string &acc, const std::string &a, const SharedTile &b,
                  int64_t warpCols) override;
  /// Under the swap: the score tile `a` rounded to 16 bits into the next dotFrag (returned), the A fragments of
  /// `acc`'s RS GEMM.
  std::string packDotOperand(CudaWriter &w, const std::string &a, const std::string &acc);
  /// stage()'s stmatrix words of k16 step nt of the score tile `from`: dotTn's packed words where it packed them,
  /// else `frag`, declared here from the fp32 tile.
  std::string stageWords(CudaWriter &w, const std::string &from) const;
  /// One warpgroup's dS in registers spans all of its Q tile's keys only when it is the block's one warpgroup.
  bool dqReadsRegisters() const override { return warpgroups == 1; }
  /// desc::offsetLow's masked form (offsetLowText): head dim 192 under swap-dkv (192/192), where with the 64-bit add
  /// ptxas spills in the Q-tile loops (15-27 local loads an iteration; SASS, 2026-12-07) and the kernel measured 3-5%
  /// slower non-causal (bench/NOTES.md v48); the 64-bit add elsewhere (fewer instructions, the same spills).
  bool masksDescriptorAdds() const { return shape.swapKv && shape.headDim == 192 && shape.headDimV == 192; }
  /// Under the swap Pᵀ and dSᵀ are in registers, each warp 16 keys × the Q tile's rows: the A fragments of dV's and
  /// dK's GEMMs (wgmma RS).
  bool dotReadsRegisters() const override { return shape.swapScores; }

  // The dQ writer (KernelShape::dqWriter): a producer warpgroup after the computing ones; its first warp adds each Q
  // tile's dQ from sDq into dq_accum with one bulk reduce-add, handed over by dqBars[0] (full: every computing
  // thread arrives once its part is in sDq) and back by dqBars[1] (empty: the writer's arrival once the engine read
  // sDq). Its other warps have nothing to do: they give their registers back (setmaxnreg) and leave.
  int roleThreads() const override { return roles() ? kWarpgroupWarps * 32 : 0; }
  bool storesInBulk() const override { return true; }
  std::string bulkStoreRow(const std::string &dst, const std::string &src, const std::string &bytes) const override {
    return cat("sm90::bulkStore(", dst, ", ", src, ", ", bytes, ");");
  }
  std::string bulkStoreFence() const override { return "sm90::fence::proxyAsync();"; }
  std::string bulkStoreCommit() const override { return "sm90::tma::storeCommit();"; }
  std::string bulkStoreDrain() const override { return "sm90::tma::storeWaitRead<0>();"; }
  std::string computeBarrier() const override {
    return roles() ? cat("sm90::namedBarrier::sync(", kComputeBarrier, ", kThreads);") : "__syncthreads();";
  }
  int64_t roleSharedBytes() const override {
    return (shape.dqWriter ? int64_t(shape.blockM) * (shape.headDim + dqPad()) * 4 : 0) +
           (roles() ? (shape.singleDo ? kRoleBarrierBytesSingleDo : kRoleBarrierBytes) + (shape.lateV ? 8 : 0) : 0);
  }
  void declareRoleShared(CudaWriter &w, const std::string &at) const override;
  /// late-v's barrier (vBar): the role area's last 8 bytes (roleSharedBytes adds them).
  void declareLateVBarrier(CudaWriter &w, const std::string &at) const;
  void beginRoles(CudaWriter &w, const std::string &dqCounter, const std::string &dqTurn) override;
  void endRoles(CudaWriter &w) override;
  void endWalk(CudaWriter &w) override;

  // The load warp (KernelShape::loadWarp): the producer warpgroup's second warp brings K and V (kvBar: two arrivals
  // and their bytes) and then, Q tile after Q tile as the walk goes, Q and dO (TMA) and the LSE and D rows (its lanes'
  // loads and stores: LSE·log2(e) and D, +inf and 0 past seqlen_q) into the ring's buffer `loads % 2`: fullBars[s] completes with its 32
  // lanes' arrivals and the TMA's bytes, emptyBars[s] with one arrival of each computing thread once the tile's
  // GEMMs landed. Rows of a Q tile past the sequence come as TMA gives them (zeros past the tensor; under varlen the next
  // sequence's rows): their LSE is -inf, so their P and dS are 0 and they add nothing.
  bool loadsInRole() const override { return shape.loadWarp; }
  /// The load warp stages LSE·log2(e) (loadQTile).
  bool stagesLseLog2() const override { return shape.loadWarp; }
  /// KernelShape::singleDo: dO in sDO0 alone, behind doBars[0] (full: the TMA's bytes) and doBars[1] (empty: every
  /// computing thread, once dV's GEMM landed: dqOperand, or releaseQTile without an early dV).
  bool singleDoBuffer() const override { return shape.singleDo; }
  std::string mainExtraParams() const override {
    return shape.loadWarp ? ", const __grid_constant__ sm90::BackwardTensorMaps maps" : "";
  }
  int tensorMapSwizzleBytes() const override { return swizzle; }
  void beginLoadRole(CudaWriter &w) override;
  void endLoadRole(CudaWriter &w) override { w.close(); }
  void loadOwnTile(CudaWriter &w, const SharedTile &tile, bool k) override;
  /// Lane 0's TMA of the block's K or V tile onto barrier `bar` (kvBar, or vBar under late-v).
  void printOwnTileLoad(CudaWriter &w, const SharedTile &tile, bool k, const std::string &bar) const;
  void loadQTile(CudaWriter &w, const std::string &qt) override;
  void waitOwnTiles(CudaWriter &w) override {
    w.line(shape.lateV ? "sm90::mbarrier::wait(kvBar, 0);  // K landed (the load warp's TMA; V on vBar, late-v)"
                       : "sm90::mbarrier::wait(kvBar, 0);  // K and V landed (the load warp's TMA)");
  }
  void acquireQTile(CudaWriter &w) override;
  void releaseQTile(CudaWriter &w) override;
  bool dqTurnsInRole() const override { return shape.dqWriter; }
  void dotTn(CudaWriter &w, const std::string &acc, const std::string &a, const SharedTile &b,
             int64_t warpCols) override;
  void dqOperand(CudaWriter &w, const std::string &staged, const std::string &regs) override;
  void dqProduct(CudaWriter &w, const SharedTile &k) override;
  std::string reduceAdd2(const std::string &dst, const std::string &x, const std::string &y) const override {
    return cat("sm90::redAdd2(", dst, ", ", x, ", ", y, ");");
  }

private:
  /// A committed wgmma group still in flight: the accumulator it writes (its name) and its flat reference.
  struct Group {
    std::string acc, flat;
    std::string operand = {}; ///< its register A operand (RS), fenced with it: not reused before the wgmma read it
  };
  /// One dQ product (a round: one wgmma group a warpgroup, its accumulator dqPart): columns [col, col + width) of K
  /// (col a C expression, naming the warpgroup's own columns or every warpgroup the same), of which the warpgroup keeps
  /// all but its first `skip` 8-column fragments (a C expression; empty: keeps all). Every warpgroup issues the same
  /// GEMM shape: a branch on the warpgroup around a wgmma makes ptxas serialize every wgmma of the kernel.
  struct DqBlock {
    std::string col;
    int64_t width;
    std::string skip = {};
  };
  /// A dotTn whose issue waits for dQ's products (overlap).
  struct DeferredDot {
    std::string acc, a;
    std::string frag; ///< under the swap: the packed RS A operand of `a` (dotFrag0, dotFrag1), packed at dotTn
    SharedTile b;
    int64_t warpCols;
  };
  /// Commits the GEMMs issued since the last commit as a group writing `acc` (`flat`), left in flight.
  void commit(CudaWriter &w, const std::string &acc, const std::string &flat) {
    w.line("sm90::warpgroup::commitGroup();");
    inFlight.push_back({acc, flat});
  }
  /// Waits for the group that writes `acc` (and so for every group committed before it), then fences their
  /// accumulators.
  void waitFor(CudaWriter &w, const std::string &acc) {
    size_t i = 0;
    while (i < inFlight.size() && inFlight[i].acc != acc)
      ++i;
    if (i == inFlight.size())
      return; // waited for already
    const int later = static_cast<int>(inFlight.size() - 1 - i);
    w.line(cat("sm90::warpgroup::wait<", later, ">();  // ", acc, " landed (", later, " later group(s) in flight)"));
    for (size_t j = 0; j <= i; ++j) {
      w.line(cat("sm90::warpgroup::fenceOperands(", inFlight[j].flat, ");"));
      if (!inFlight[j].operand.empty())
        w.line(cat("sm90::warpgroup::fenceOperands(", inFlight[j].operand, ");"));
    }
    inFlight.erase(inFlight.begin(), inFlight.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  /// Issues dotTn's GEMMs into `acc` (committed as one group when `overlap`, else waited on).
  void issueDot(CudaWriter &w, const DeferredDot &dot);
  /// issueDot under KernelShape::swapKv: accᵀ += Bᵀ·A, one wgmma an m64 of B's columns and k16 of query rows.
  void issueSwappedKvDot(CudaWriter &w, const DeferredDot &dot);
  /// Issues the score GEMM into `acc` (declared by the caller), not committed.
  void issueScore(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) const;
  /// dQ's GEMMs in flight (overlap): dqOperand issues the first column block's product (of the K tile `k`) and then
  /// the deferred dV and dK GEMMs, a group each; dqProduct runs each block's reductions once its product landed,
  /// issuing the next block's into the same registers after them.
  void issueDqProducts(CudaWriter &w, const SharedTile &k);
  /// dQ's products of `round` of the K tile `k` into `part`, issued, not committed: A from the registers dsFrag (one
  /// warpgroup) or from the staged dS (dqA).
  void dqGemm(CudaWriter &w, const SharedTile &k, const DqBlock &round, const std::string &part);
  /// Issues and commits dQ's products of `round` into dqPart.
  void issueDqRound(CudaWriter &w, const SharedTile &k, const DqBlock &round);
  /// Keeps the compiler from reusing dS's RS fragments before the last wgmma that reads them retired.
  void fenceDsFragments(CudaWriter &w) const;
  void dqProductOverlapped(CudaWriter &w, const SharedTile &k);
  /// The K tile, dQ's B operand (the printer's tile.load k into sK).
  SharedTile kTile() const { return SharedTile{"sK", "kBlockN", shape.headDim}; }
  /// Whether the block has a producer warpgroup (the dQ writer's, the load warp's, or both).
  bool roles() const { return shape.dqWriter || shape.loadWarp; }
  /// The dQ buffer's row padding in floats (0: its rows are dq_accum's, one bulk add a tile).
  int dqPad() const {
    return !shape.dqSwizzle && !shape.dqFragments && shape.headDim >= kDqPadFrom ? kDqPadFloats : 0;
  }
  /// The blocks of `round` of `part` (its fp32 C fragment) into sDq, this thread's rows (the dQ writer's).
  void dqToShared(CudaWriter &w, const std::string &part, const DqBlock &round);
  /// dqToShared's stores in rows ([query rows][kDqPitch]): every tile but dq-fragments' whole ones.
  void dqRowsToShared(CudaWriter &w, const std::string &part, const DqBlock &round);
  /// dq_accum's (and sDq's) rows with their 16-byte chunks XOR-permuted by the row (KernelShape::dqSwizzle): chunk c
  /// of row i at c ^ (i % 8), within its 128 bytes. A warp's float2 stores of 8 rows then fall on 8 chunk positions
  /// twice: two wavefronts, no conflict, and a Q tile's rows stay contiguous (one bulk reduce-add).
  std::string dqAccumColumn(const std::string &row, const std::string &col) const override {
    if (!shape.dqSwizzle)
      return col;
    return cat("(((((", col, ") >> 2) ^ ((", row, ") & 7)) << 2) | ((", col, ") & 3))");
  }
  /// KernelShape::dqFragments: a whole Q tile of dq_accum (and sDq) holds float e of 16-byte chunk j of computing
  /// thread t at 4·(j·kThreads + t) + e, chunk j being the thread's dQ fragment n8 tile j (its four floats), so that
  /// the threads' 16-byte stores of one chunk fill consecutive bytes (no bank conflict) and the tile is one bulk
  /// reduce-add. dqFragmentIndex is the float of (row, col) of the tile (the postprocess's read). A tile cut by
  /// seqlen_q stays in rows, in sDq as in dq_accum (dqRowsToShared).
  std::string dqFragmentIndex(const std::string &row, const std::string &col) const override;
  /// acquireQTile's ring offset and LSE and D rows.
  void acquireRows(CudaWriter &w);
  /// KernelShape::singleDo: the computing thread's release of dO's buffer (once per iteration), after waiting for
  /// dV's GEMM (earlyDot) where it was issued early.
  void releaseDo(CudaWriter &w);
  /// The dQ writer's hand-over: before the tile's first write into sDq (`start`), after its last.
  void dqHandOver(CudaWriter &w, bool start);
  /// The reductions of the blocks of `round` of `part` (its fp32 C fragment) into gDqAccum.
  void dqReductions(CudaWriter &w, const SharedTile &k, const std::string &part, const DqBlock &round);

  /// Retires the warpgroup's wgmma group and fences `flat` (a C expression of a float array reference).
  void retire(CudaWriter &w, const std::string &flat) const {
    w.line("sm90::warpgroup::commitGroup();");
    w.line("sm90::warpgroup::wait<0>();");
    w.line(cat("sm90::warpgroup::fenceOperands(", flat, ");"));
  }
  static std::string flat(const std::string &acc, const std::string &floats) {
    return cat("reinterpret_cast<float (&)[", floats, "]>(", acc, "[0])");
  }

  /// The shared-memory address of `tile` plus `offset` (" + ..."), a GEMM operand's base: the same in every lane of
  /// the warp, and broadcast from lane 0 (sm90::warp::uniform) so that ptxas keeps it, and the wgmma descriptors made
  /// from it, in uniform registers: without the broadcast it builds each k16 step's descriptor in vector registers
  /// and moves it to uniform ones (four R2URs a wgmma; SASS at hd128: 431 R2URs and 168 bytes of spills in the main
  /// kernel, 224 and none with it).
  /// The load warp's ring buffers (sQ, sDO) are the first buffer's address, broadcast once before the walk, plus the
  /// stage's offset: broadcast inside the loop, ptxas proves the address uniform (a constant window address and a
  /// uniform stage), drops the shuffle and selects the buffer in vector registers again (SASS at hd128: 502
  /// instructions an interior iteration, 458 with the ring's bases hoisted).
  std::string address(const std::string &tile, const std::string &offset = "") const {
    if (shape.loadWarp && shape.singleDo && tile == "sDO")
      return cat("(doRing", offset, ")");
    if (shape.loadWarp && (tile == "sQ" || tile == "sDO") && !offset.empty() && offset == ringRowsOffset())
      return cat("(", tile == "sQ" ? "qRingRows" : "doRingRows", " + ringOffset)");
    if (shape.loadWarp && (tile == "sQ" || tile == "sDO"))
      return cat("(", tile == "sQ" ? "qRing" : "doRing", " + ringOffset", offset, ")");
    if (shape.stagingRing && tile == "sStage0")
      return cat("(stagingRing + stagingOffset", offset, ")");
    return cat("sm90::warp::uniform(", ns, "smemAddress(", tile, ")", offset, ")");
  }
  /// The template argument that names the tiles' swizzle span in sm90::desc calls ("" for the default 128 bytes).
  std::string sw() const { return swizzle == kSwizzleBytes ? std::string() : cat("<", swizzle, ">"); }
  /// " + <the byte offset of this thread's warpgroup's m64 rows in a column block>" (nothing with one warpgroup).
  /// With `ring-rows 1` (KernelShape::ringRows), the split-Q layout's warpgroup rows of the load warp's ring buffers
  /// (warpgroupRows() where the warpgroups split the Q tile's rows, else ""): the ring's bases plus these are
  /// broadcast once before the walk (qRingRows, doRingRows), so that only the uniform stage offset is added inside it
  /// (SASS at head dim 64: with `warp / 4` added in the loop, ptxas builds the S and dP descriptors in vector
  /// registers, 2-4 R2URs a wgmma; with this, 215 -> 169 R2URs non-causal, but one causal loop segment grows by 288
  /// instructions: bench/NOTES.md v44). Off by default: timed within the rounds' spread (v45).
  std::string ringRowsOffset() const {
    return !shape.ringRows || keySplit || shape.swapKv ? std::string() : warpgroupRows();
  }
  std::string warpgroupRows() const {
    return warpgroups == 1 ? std::string() : cat(" + warp / ", kWarpgroupWarps, " * ", kWarpgroupRowBytes);
  }
  /// dQ's products in rounds of one product a warpgroup. One warpgroup, or the query rows split: every 64-column block
  /// of the head dim in turn. The keys split over W warpgroups: one round of head_dim / W columns a warpgroup where
  /// that is whole column blocks of the tiles' span and at most 128 columns (the registers); else every W-th 64-column
  /// block from the warpgroup's own where the head dim is a multiple of W·64; else (head dim 96, two warpgroups) one
  /// round of 64 columns each, the first warpgroup's the first 64 and the second's the last 64, of which it keeps the
  /// columns past the first's (the windows overlap: the same GEMM in both, the second idle for as long otherwise).
  std::vector<DqBlock> dqRounds(const SharedTile &k) const {
    // dQ transposed: one product a warpgroup, its m64 of the head dim on M and the Q tile's rows (the width) on N.
    if (transposesDq(shape))
      return {{cat(kWgmmaM, " * (warp / ", kWarpgroupWarps, ")"), shape.blockM}};
    const int64_t part = k.width / warpgroups;
    // (dq-slices 2: the column split's 128 columns a warpgroup as two rounds of 64, the loop below)
    if (keySplit && k.width % warpgroups == 0 && part % (swizzle / 2) == 0 && part <= 2 * kDqColumns &&
        !(shape.dqSliced && part > kDqColumns))
      return {{cat(part, " * (warp / ", kWarpgroupWarps, ")"), part}};
    if (keySplit && k.width % (kDqColumns * warpgroups) != 0) {
      // checkBackwardShape admits this case only at two warpgroups with kDqColumns < k.width < 2 · kDqColumns, the
      // second window starting on a whole column block of the span.
      const int64_t shift = k.width - kDqColumns;
      return {{cat(shift, " * (warp / ", kWarpgroupWarps, ")"), kDqColumns,
               cat((kDqColumns - shift) / 8, " * (warp / ", kWarpgroupWarps, ")")}};
    }
    std::vector<DqBlock> rounds;
    for (int64_t c = 0; c < k.width; c += keySplit ? kDqColumns * warpgroups : kDqColumns) {
      const std::string col =
          keySplit ? cat(kDqColumns, " * (warp / ", kWarpgroupWarps, c ? cat(" + ", c / kDqColumns) : std::string(), ")")
                   : cat(c);
      rounds.push_back({col, std::min<int64_t>(kDqColumns, k.width - c)});
    }
    return rounds;
  }
  /// The widest product of dQ's rounds (dqPart's columns).
  int64_t dqWidth(const SharedTile &k) const {
    int64_t widest = 0;
    for (const DqBlock &block : dqRounds(k))
      widest = std::max(widest, block.width);
    return widest;
  }
  /// Opens the loop over the 8-column fragments of `block` that the warpgroup keeps (nt; the caller closes it).
  void openKeptFragments(CudaWriter &w, const DqBlock &block) const {
    w.openUnrolledFor("nt", cat(block.width / 8));
    if (!block.skip.empty()) {
      w.line(cat("if (nt < ", block.skip, ")"));
      w.line("  continue;");
    }
  }

  KernelShape shape;
  FragmentTiles fragments;
  int warpgroups;     ///< computing warpgroups of the block
  bool keySplit;      ///< the warpgroups split the keys of S (else the query rows)
  bool columnSplit;   ///< the warpgroups split dK's and dV's columns (splitsColumns)
  int swizzle;        ///< the swizzle span of the Q, dO, K and V tiles (tileSwizzleBytes)
  std::string dqA;    ///< dQ's A operand in shared memory (the staged dS) when it is not read from registers
  std::vector<Group> inFlight;       ///< committed groups not yet waited for, oldest first (overlap)
  std::vector<DeferredDot> deferred; ///< dotTn calls not yet issued (overlap)
  int dotFrags = 0;                  ///< RS A operands of dotTn declared in this iteration (dotFrag0, dotFrag1)
  std::string earlyDot;              ///< this iteration's dotTnEarly accumulator (dV's), or empty
  bool doReleased = false;           ///< this iteration released the single dO buffer (KernelShape::singleDo)
  std::optional<SharedTile> lateVTile; ///< late-v: V's tile, loaded by loadQTile after the walk's first Q tile
  std::map<std::string, std::string> packed; ///< this iteration's score tiles packed by dotTn -> their words
  /// "<the fragment primitives' namespace>::": their cp.async, smemAddress and packs.
  const std::string ns = cat(kFragmentNamespace, "::");
  std::string mmaType, pack;
};

} // namespace flashtile::codegen::sm90::detail

#endif // FLASHTILE_CODEGEN_SM90_BACKWARDTARGETSM90_H
