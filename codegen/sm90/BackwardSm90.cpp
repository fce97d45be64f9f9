//===- BackwardSm90.cpp - the backward's GEMMs as wgmma -------------------===//
//
// One or two computing warpgroups a block (KernelShape::warps / 4 = W). A wgmma m64 accumulator is the split-Q C
// fragment of its warpgroup's four warps, so the elementwise math is FragmentTiles' as on sm80. Three layouts:
//   split-Q      (keyWarps 1) W·64 query rows × W·64 keys: warpgroup g holds query rows [64g, 64g + 64) of S, dP, P
//                and dS over all the keys (warp w rows [16w, 16w + 16)), and keys [64g, 64g + 64) of dK and dV;
//   key split    (keyWarps W) 64 query rows × W·64 keys: warpgroup g holds keys [64g, 64g + 64) of S, dP, P and dS
//                (warp w the rows [16(w % 4), ...) of the Q tile: warpM, warpCol0 = 64g) and of dK and dV;
//   column split (keyWarps W, block-n 64; splitsColumns) 64 query rows × 64 keys: warpgroup g holds keys
//                [64g / W, ...) of S, dP, P and dS, and all 64 keys × columns [g·d / W, ...) of dK and dV (head dims
//                192 and 256, where a warpgroup's 64 keys over all the columns pass the registers).
// Warp w holds key rows [16w, 16w + 16) of dK and dV in the first two, [16(w % 4), ...) of column part w / 4 in the
// third: the m64 of the GEMMs whose rows are keys.
//   tiles      Q, dO (Q-tile rows) and K, V (K/V-tile rows) in the swizzled column-block layout (128-byte span, or 64
//              where a GEMM starts at a column that is not a multiple of 64: tileSwizzleBytes): by TMA from the load
//              warp (KernelShape::loadWarp), or by cp.async 16-byte chunks of the computing threads, fenced into the
//              async proxy before wgmma reads
//   S, dP      wgmma SS m64nNk16, A (Q or dO) and B (K or V) K-major, N the warpgroup's keys
//   P, dS      rounded to 16 bits and stored transposed (stmatrix.x4.trans): [keys][query rows], a K-major A for
//   dV, dK     wgmma SS m64nNk16, B (dO or Q) MN-major, as V in the forward's P·V; N the head dim, or the
//              warpgroup's part of it under the column split
//   dQ         in rounds of one product a warpgroup (dqRounds; K MN-major), into dq_accum by the dQ writer or with
//              red.global.add.v2: one warpgroup (W = 1) reads dS from registers (wgmma RS, its 64 keys); W = 2 read it
//              from the staged [keys][query rows] buffer as an MN-major A (wgmma SS, trans-a), so each product sums
//              over all the tile's keys and a block adds each Q-tile element once per K/V tile.
// Without overlap (KernelShape::gemmOverlap off) every GEMM is waited on when issued. With it, a Q tile's GEMMs stay in
// flight together and each is waited on (wgmma.wait_group with the count of groups committed after it) where its
// result is first read: S and dP issued back to back, S's softmax under dP; then dQ's products issued first and dV's
// and dK's after them, so that dQ's reductions run under dV and dK, which the end of the iteration waits for.
//===----------------------------------------------------------------------===//
#include "codegen/sm90/BackwardSm90.h"
#include "codegen/ptx/BackwardPrelude.h"
#include "codegen/common/Concat.h"
#include "codegen/ptx/FragmentPrelude.h"
#include "codegen/common/FragmentTiles.h"
#include "codegen/sm90/InstructionsSm90.h"
#include "codegen/sm90/PreludeSm90.h"

#include <map>
#include <vector>

namespace flashtile::codegen::sm90 {
namespace {

/// The fragment primitives' namespace in this family's kernels (TileOpsSm90.cpp's kFragmentNamespace).
constexpr const char *kFragmentNamespace = "sm80";
constexpr int kWarpgroupWarps = 4;
/// The computing warpgroups a block has at most.
constexpr int kMaxWarpgroups = 2;
/// The unit of dQ's products (dqRounds): a 128-byte column block of K, 64 columns; a round takes one or two.
constexpr int kDqColumns = kSwizzleColumns;
/// Bytes of the m64 rows of one warpgroup in a column block of a swizzled tile.
constexpr int kWarpgroupRowBytes = kWgmmaM * kSwizzleBytes;
/// The named barrier of the computing warps when the block has roles (0 is __syncthreads').
constexpr int kComputeBarrier = 1;
/// The roles' mbarriers: the dQ writer's two (full, empty), then the load warp's (K/V; the ring's full and empty per
/// buffer), and after them the tile index the writer reads, 16-byte aligned.
constexpr int kDqBarriers = 2, kLoadBarriers = 5, kRoleBarrierBytes = 64;
static_assert((kDqBarriers + kLoadBarriers) * 8 + 4 <= kRoleBarrierBytes, "the roles' barriers and tile index fit");
/// The dQ buffer's row pitch beyond the head dim, in floats, at head dims from kDqPadFrom: 8 (32 bytes) puts the rows
/// of a warp's fragment stores 8 banks apart, so that a warp's float2 stores take the two wavefronts of their 256
/// bytes (an unpadded row of 64 or 128 floats maps every row to the same banks: 8-way conflicts), at the price of one
/// bulk reduce-add a row instead of one a tile. Measured on the H100 (bench/NOTES.md v30): at head dim 128 (64 rows
/// a tile) +14% non-causal; at 64 (128 rows of 256 bytes a tile, each add issued in turn) -21%, so unpadded there.
constexpr int kDqPadFloats = 8, kDqPadFrom = 96;

/// Whether the warpgroups split dK's and dV's columns (the column split: a K/V tile of one m64 of keys, every
/// warpgroup all of its keys and head_dim / W columns of dK and dV, W·32 keys of S and dP shared out as in the key
/// split): at head dims 192 and 256, where a warpgroup's 64 keys of dK and dV over the whole head dim pass the
/// registers.
bool splitsColumns(const KernelShape &shape) {
  return shape.keyWarps > 1 && shape.keyWarps == shape.warps / kWarpgroupWarps && shape.blockN == kWgmmaM;
}

/// The swizzle span of a kernel's Q, dO, K and V tiles: 128 bytes (64-column blocks) where every column a GEMM
/// starts at is a multiple of 64 (the head dims, and under the column split a warpgroup's part of them), else 64
/// bytes (32-column blocks: head dim 96, and 192 split in 96-column parts). The staged P and dS keep 128 (their rows
/// are a Q tile's 64 query rows).
int tileSwizzleBytes(const KernelShape &shape) {
  const int64_t parts = splitsColumns(shape) ? shape.keyWarps : 1;
  for (int64_t width : {shape.headDim, shape.headDimV})
    if (width % (kSwizzleColumns * parts) != 0)
      return kSwizzleBytes / 2;
  return kSwizzleBytes;
}

/// The family's backward primitives: fp32 reductions into global memory, one pair a thread or a whole buffer.
constexpr std::string_view kBackwardText = R"cuda(
// ==== sm90 backward primitives: fp32 reductions into global memory ====
namespace sm90 {
// dst[0] += x, dst[1] += y (dst 8-byte aligned), fp32, without reading the result back (red.global.add.v2: the order
// of concurrent adds is the hardware's).
__device__ __forceinline__ void redAdd2(float *dst, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
}
// dst[i] += src[i] for the `bytes` / 4 floats of a shared-memory buffer (16-byte aligned, bytes a multiple of 16), by
// the bulk copy engine (cp.reduce.async.bulk: one instruction, element-wise adds in global memory; each element added
// once). Committed with tma::storeCommit, waited for with tma::storeWaitRead (src reusable) or tma::storeWait (done).
__device__ __forceinline__ void bulkReduceAddF32(float *dst, const float *src, unsigned bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smemAddress(src)), "r"(bytes)
               : "memory");
}
namespace desc {
// The byte offsets of k16 slice `step` in a tile (a constant for a constant step): kMajorStep(tileAddr, step, rows) is
// advance(kMajor(tileAddr), kMajorStepBytes(step, rows)), and mnMajorStep's likewise, one add to a descriptor made
// once per GEMM (the start address field cannot carry: shared addresses stay below 2^18 bytes, so offsetLow adds to the
// low word alone: one 32-bit add a GEMM step rather than a 64-bit one).
template <int kSwizzleBytes = 128>
__device__ __forceinline__ constexpr unsigned kMajorStepBytes(int step, int rows) {
  return unsigned(step / Swizzle<kSwizzleBytes>::kStepsPerBlock) * unsigned(rows) * kSwizzleBytes +
         unsigned(step % Swizzle<kSwizzleBytes>::kStepsPerBlock) * 32u;
}
template <int kSwizzleBytes = 128>
__device__ __forceinline__ constexpr unsigned mnMajorStepBytes(int step) {
  return unsigned(step) * 16u * kSwizzleBytes;
}
// advance(d, bytes) for a descriptor whose start address plus bytes stays in its 14-bit field.
__device__ __forceinline__ unsigned long long offsetLow(unsigned long long d, unsigned bytes) {
  return (d & 0xffffffff00000000ull) | (unsigned(d) + (bytes >> 4));
}
} // namespace desc
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
    std::vector<int> widths = {static_cast<int>(shape.swapScores ? shape.blockM : shape.blockN / shape.keyWarps),
                               static_cast<int>(shape.headDim / parts), static_cast<int>(shape.headDimV / parts)};
    std::vector<int> dqWidths;
    for (const auto &round : dqRounds(k))
      for (const DqBlock &block : round)
        if (std::find(dqWidths.begin(), dqWidths.end(), block.width) == dqWidths.end())
          dqWidths.push_back(static_cast<int>(block.width));
    if (dqReadsRegisters())
      widths.insert(widths.end(), dqWidths.begin(), dqWidths.end());
    std::string text = fragmentPrelude(kFragmentNamespace) + ::flashtile::codegen::sm90::prelude(widths);
    if (!dqReadsRegisters())
      for (int n : dqWidths)
        text += wgmmaMnMajorAText(n);
    return text + backwardPrelude(kFragmentNamespace, "") + std::string(kBackwardText);
  }
  std::string_view primitivesNamespace() const override { return kFragmentNamespace; }
  std::vector<std::string> reservedNames() const override {
    return {"sm80",   "sm90",   "smemRaw", "aAddr", "bAddr", "dsFrag", "dqBlock", "dqPart", "frag",
            "key",    "q",      "sDq",     "dqBars", "sDqTile", "dqUses", "use",   "tile",   "row",  "rows",
            "kDqPitch", "maps", "kvBar", "fullBars", "emptyBars", "stage", "tileUses", "loads", "qRow0", "kRow0",
            "tmaBatch", "kQTileBytes", "dotFrag0", "dotFrag1"};
  }
  bool splitsKeys() const override { return true; }
  /// A warpgroup's four warps share its keys: warp w is row group w % 4 of the keys from 64·(w / 4).
  std::string keySplitLayout() const override {
    return cat("const int warpM = warp % ", kWarpgroupWarps, ", warpCol0 = warp / ", kWarpgroupWarps,
               " * (kBlockN / kKeyWarps);  // S: rows, keys (a warpgroup's)");
  }
  /// Under the column split warp w holds keys [16(w % 4), ...) of the tile (its warpgroup's m64 rows: all the keys)
  /// and column part w / 4.
  std::string kvSplitLayout() const override {
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
  /// One warpgroup's dS in registers spans all of its Q tile's keys only when it is the block's one warpgroup.
  bool dqReadsRegisters() const override { return warpgroups == 1; }
  /// Under the swap Pᵀ and dSᵀ are in registers, each warp 16 keys × the Q tile's rows: the A fragments of dV's and
  /// dK's GEMMs (wgmma RS).
  bool dotReadsRegisters() const override { return shape.swapScores; }

  // The dQ writer (KernelShape::dqWriter): a producer warpgroup after the computing ones; its first warp adds each Q
  // tile's dQ from sDq into dq_accum with one bulk reduce-add, handed over by dqBars[0] (full: every computing
  // thread arrives once its part is in sDq) and back by dqBars[1] (empty: the writer's arrival once the engine read
  // sDq). Its other warps have nothing to do: they give their registers back (setmaxnreg) and leave.
  int roleThreads() const override { return roles() ? kWarpgroupWarps * 32 : 0; }
  std::string computeBarrier() const override {
    return roles() ? cat("sm90::namedBarrier::sync(", kComputeBarrier, ", kThreads);") : "__syncthreads();";
  }
  int64_t roleSharedBytes() const override {
    return (shape.dqWriter ? int64_t(shape.blockM) * (shape.headDim + dqPad()) * 4 : 0) +
           (roles() ? kRoleBarrierBytes : 0);
  }
  void declareRoleShared(CudaWriter &w, const std::string &at) const override;
  void beginRoles(CudaWriter &w, const std::string &dqCounter, const std::string &dqTurn) override;
  void endRoles(CudaWriter &w) override;
  void endWalk(CudaWriter &w) override;

  // The load warp (KernelShape::loadWarp): the producer warpgroup's second warp brings K and V (kvBar: two arrivals
  // and their bytes) and then, Q tile after Q tile as the walk goes, Q and dO (TMA) and the LSE and D rows (its lanes'
  // loads and stores, -inf and 0 past seqlen_q) into the ring's buffer `loads % 2`: fullBars[s] completes with its 32
  // lanes' arrivals and the TMA's bytes, emptyBars[s] with one arrival of each computing thread once the tile's
  // GEMMs landed. Rows of a Q tile past the sequence come as TMA gives them (zeros past the tensor; under varlen the next
  // sequence's rows): their LSE is -inf, so their P and dS are 0 and they add nothing.
  bool loadsInRole() const override { return shape.loadWarp; }
  std::string mainExtraParams() const override {
    return shape.loadWarp ? ", const __grid_constant__ sm90::BackwardTensorMaps maps" : "";
  }
  int tensorMapSwizzleBytes() const override { return swizzle; }
  void beginLoadRole(CudaWriter &w) override;
  void endLoadRole(CudaWriter &w) override { w.close(); }
  void loadOwnTile(CudaWriter &w, const SharedTile &tile, bool k) override;
  void loadQTile(CudaWriter &w, const std::string &qt) override;
  void waitOwnTiles(CudaWriter &w) override {
    w.line("sm90::mbarrier::wait(kvBar, 0);  // K and V landed (the load warp's TMA)");
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
  /// One dQ product of a round: columns [col, col + width) (col a C expression), of the warpgroup `warpgroup` alone
  /// (-1: every warpgroup issues it, col naming its own columns or every warpgroup the same).
  struct DqBlock {
    std::string col;
    int64_t width;
    int warpgroup;
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
  /// Issues the score GEMM into `acc` (declared by the caller), not committed.
  void issueScore(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) const;
  /// dQ's GEMMs in flight (overlap): dqOperand issues the first column block's product (of the K tile `k`) and then
  /// the deferred dV and dK GEMMs, a group each; dqProduct runs each block's reductions once its product landed,
  /// issuing the next block's into the same registers after them.
  void issueDqProducts(CudaWriter &w, const SharedTile &k);
  /// dQ's products of `round` of the K tile `k` into `part`, issued, not committed: A from the registers dsFrag (one
  /// warpgroup) or from the staged dS (dqA).
  void dqGemm(CudaWriter &w, const SharedTile &k, const std::vector<DqBlock> &round, const std::string &part);
  /// Issues and commits dQ's products of `round` into dqPart.
  void issueDqRound(CudaWriter &w, const SharedTile &k, const std::vector<DqBlock> &round);
  /// Keeps the compiler from reusing dS's RS fragments before the last wgmma that reads them retired.
  void fenceDsFragments(CudaWriter &w) const;
  void dqProductOverlapped(CudaWriter &w, const SharedTile &k);
  /// The K tile, dQ's B operand (the printer's tile.load k into sK).
  SharedTile kTile() const { return SharedTile{"sK", "kBlockN", shape.headDim}; }
  /// Whether the block has a producer warpgroup (the dQ writer's, the load warp's, or both).
  bool roles() const { return shape.dqWriter || shape.loadWarp; }
  /// The dQ buffer's row padding in floats (0: its rows are dq_accum's, one bulk add a tile).
  int dqPad() const { return shape.headDim >= kDqPadFrom ? kDqPadFloats : 0; }
  /// The blocks of `round` of `part` (its fp32 C fragment) into sDq, this thread's rows (the dQ writer's).
  void dqToShared(CudaWriter &w, const std::string &part, const std::vector<DqBlock> &round);
  /// The dQ writer's hand-over: before the tile's first write into sDq (`start`), after its last.
  void dqHandOver(CudaWriter &w, bool start);
  /// The reductions of the blocks of `round` of `part` (its fp32 C fragment) into gDqAccum.
  void dqReductions(CudaWriter &w, const SharedTile &k, const std::string &part, const std::vector<DqBlock> &round);

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
  std::string address(const std::string &tile, const std::string &offset = "") const {
    return cat("sm90::warp::uniform(", ns, "smemAddress(", tile, ")", offset, ")");
  }
  /// The template argument that names the tiles' swizzle span in sm90::desc calls ("" for the default 128 bytes).
  std::string sw() const { return swizzle == kSwizzleBytes ? std::string() : cat("<", swizzle, ">"); }
  /// " + <the byte offset of this thread's warpgroup's m64 rows in a column block>" (nothing with one warpgroup).
  std::string warpgroupRows() const {
    return warpgroups == 1 ? std::string() : cat(" + warp / ", kWarpgroupWarps, " * ", kWarpgroupRowBytes);
  }
  /// dQ's products in rounds: a round is one product a warpgroup (one wgmma group, its accumulator dqPart), either
  /// one block every warpgroup issues or one guarded block per warpgroup. One warpgroup, or the query rows split: every
  /// 64-column block of the head dim in turn. The keys split over W warpgroups: one round of head_dim / W columns a
  /// warpgroup where that is whole column blocks of the tiles' span and at most 128 columns (the registers); else
  /// every W-th 64-column block from the warpgroup's own where the head dim is a multiple of W·64; else (head dim 96)
  /// one round of a block per warpgroup, the first 64 columns and the rest.
  std::vector<std::vector<DqBlock>> dqRounds(const SharedTile &k) const {
    std::vector<std::vector<DqBlock>> rounds;
    const int64_t part = k.width / warpgroups;
    if (keySplit && k.width % warpgroups == 0 && part % (swizzle / 2) == 0 && part <= 2 * kDqColumns) {
      rounds.push_back({{cat(part, " * (warp / ", kWarpgroupWarps, ")"), part, -1}});
      return rounds;
    }
    if (keySplit && k.width % (kDqColumns * warpgroups) != 0) {
      std::vector<DqBlock> round;
      for (int g = 0; g < warpgroups && g * kDqColumns < k.width; ++g)
        round.push_back({cat(g * kDqColumns), std::min<int64_t>(kDqColumns, k.width - g * kDqColumns), g});
      rounds.push_back(round);
      return rounds;
    }
    for (int64_t c = 0; c < k.width; c += keySplit ? kDqColumns * warpgroups : kDqColumns) {
      const std::string col =
          keySplit ? cat(kDqColumns, " * (warp / ", kWarpgroupWarps, c ? cat(" + ", c / kDqColumns) : std::string(), ")")
                   : cat(c);
      rounds.push_back({{col, std::min<int64_t>(kDqColumns, k.width - c), -1}});
    }
    return rounds;
  }
  /// The widest product of dQ's rounds (dqPart's columns).
  int64_t dqWidth(const SharedTile &k) const {
    int64_t widest = 0;
    for (const auto &round : dqRounds(k))
      for (const DqBlock &block : round)
        widest = std::max(widest, block.width);
    return widest;
  }
  /// Prints `body` for each block of `round`: as it is for a block of every warpgroup, else under the guard of its
  /// warpgroup (a warpgroup-uniform branch: the wgmmas inside stay aligned).
  template <typename Body>
  void forEachBlock(CudaWriter &w, const std::vector<DqBlock> &round, Body body) const {
    for (size_t i = 0; i < round.size(); ++i) {
      const DqBlock &block = round[i];
      if (block.warpgroup < 0) {
        body(block);
        continue;
      }
      const bool last = i + 1 == round.size() && i > 0 && round.size() == size_t(warpgroups);
      w.open(last ? std::string("else") : cat(i ? "else if" : "if", " (warp / ", kWarpgroupWarps, " == ", block.warpgroup, ")"));
      body(block);
      w.close();
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
  std::map<std::string, std::string> packed; ///< this iteration's score tiles packed by dotTn -> their words
  /// "<the fragment primitives' namespace>::": their cp.async, smemAddress and packs.
  const std::string ns = cat(kFragmentNamespace, "::");
  std::string mmaType, pack;
};

void BackwardSm90::issueScore(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) const {
  if (shape.swapScores) {
    // Sᵀ = K·Qᵀ (dPᵀ = V·dOᵀ): the warpgroup's 64 keys of the K/V tile on M, the Q tile's rows on N.
    w.comment(cat(acc, " = (", a.name.substr(1), "·", b.name.substr(1), "ᵀ)ᵀ = ", b.name.substr(1), "·", a.name.substr(1),
                  "ᵀ (tile.qk, swapped; wgmma m64n", shape.blockM, "k16 ", mmaType,
                  " SS, both K-major, fp32): the warpgroup's keys x the Q tile's rows"));
    w.open("");
    w.line(cat("const unsigned aAddr = ", address(b.name, cat(" + warpCol0 * ", swizzle)), ", bAddr = ", address(a.name),
               ";"));
    w.line(cat("const unsigned long long aDesc = sm90::desc::kMajor", sw(), "(aAddr), bDesc = sm90::desc::kMajor", sw(),
               "(bAddr);"));
    w.line("sm90::warpgroup::arrive();");
    w.openUnrolledFor("ks", cat(a.width / 16));
    w.line(cat("sm90::warpgroup::Wgmma<kBlockM>::", mmaType, "SS<sm90::warpgroup::kKMajor>(", flat(acc, "kSTiles * 4"),
               ", sm90::desc::offsetLow(aDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockN)), "
               "sm90::desc::offsetLow(bDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockM)), ks > 0);"));
    w.close();
    w.close();
    return;
  }
  w.comment(cat(acc, " = ", a.name.substr(1), "·", b.name.substr(1), "ᵀ (tile.qk; wgmma m64n", shape.blockN / shape.keyWarps,
                "k16 ", mmaType, " SS, both K-major, fp32): the warpgroup's query rows x ",
                keySplit ? "its keys of the K/V tile" : "the K/V tile's keys"));
  w.open("");
  w.line(cat("const unsigned aAddr = ", address(a.name, keySplit ? "" : warpgroupRows()),
             ", bAddr = ", address(b.name, keySplit ? cat(" + warpCol0 * ", swizzle) : ""), ";"));
  w.line(cat("const unsigned long long aDesc = sm90::desc::kMajor", sw(), "(aAddr), bDesc = sm90::desc::kMajor", sw(),
             "(bAddr);"));
  w.line("sm90::warpgroup::arrive();");
  w.openUnrolledFor("ks", cat(a.width / 16));
  w.line(cat("sm90::warpgroup::Wgmma<", keySplit ? "kSTiles * 8" : "kBlockN", ">::", mmaType,
             "SS<sm90::warpgroup::kKMajor>(", flat(acc, "kSTiles * 4"),
             ", sm90::desc::offsetLow(aDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockM)), "
             "sm90::desc::offsetLow(bDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockN)), ks > 0);"));
  w.close();
  w.close();
}

void BackwardSm90::scoreGemm(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) {
  w.line(cat("float ", acc, "[kMTiles][kSTiles][4];"));
  issueScore(w, acc, a, b);
  retire(w, flat(acc, "kSTiles * 4"));
}

void BackwardSm90::scoreGemms(CudaWriter &w, const std::string &first, const SharedTile &a, const SharedTile &b,
                              const std::string &second, const SharedTile &a2, const SharedTile &b2) {
  w.comment(cat("overlap: ", first, " and ", second, " issued back to back, a group each; ", first,
                "'s math runs while ", second, " computes"));
  w.line(cat("float ", first, "[kMTiles][kSTiles][4], ", second, "[kMTiles][kSTiles][4];"));
  issueScore(w, first, a, b);
  commit(w, first, flat(first, "kSTiles * 4"));
  issueScore(w, second, a2, b2);
  commit(w, second, flat(second, "kSTiles * 4"));
  waitFor(w, first);
}

void BackwardSm90::endIteration(CudaWriter &w) {
  dotFrags = 0;
  packed.clear();
  if (deferred.empty() && inFlight.empty())
    return;
  for (const DeferredDot &dot : deferred)
    issueDot(w, dot);
  deferred.clear();
  w.comment("overlap: the iteration's GEMMs landed before the next Q tile's barrier hands its buffers on");
  waitFor(w, inFlight.back().acc);
}

void BackwardSm90::stage(CudaWriter &w, const std::string &buffer, const std::string &from) {
  if (shape.swapScores) {
    w.comment(cat(from, " (transposed: keys x query rows) rounded to 16 bits into ", buffer,
                  " [kBlockN keys][kBlockM query rows] (stmatrix.x4, swizzled):"));
    w.comment("this warp's 16 keys, the MN-major A operand of dQ's GEMM");
    // The four 8x8 matrices of n8 tiles 2nt, 2nt + 1 are the words of k16 step nt of dotTn's packing.
    const auto it = packed.find(from);
    w.openUnrolledFor("nt", "kSTiles / 2");
    if (it == packed.end()) {
      w.line(cat("const unsigned frag[4] = {", pack, "(", from, "[0][2 * nt][0], ", from, "[0][2 * nt][1]), ", pack, "(",
                 from, "[0][2 * nt][2], ", from, "[0][2 * nt][3]),"));
      w.line(cat("                          ", pack, "(", from, "[0][2 * nt + 1][0], ", from, "[0][2 * nt + 1][1]), ",
                 pack, "(", from, "[0][2 * nt + 1][2], ", from, "[0][2 * nt + 1][3])};"));
    }
    w.comment("lane l addresses row l % 8 of matrix l / 8: key 8·((l / 8) % 2) + l % 8 of this warp's keys, query rows");
    w.comment("16·nt + 8·(l / 16)");
    w.line("const int key = warpCol0 + 16 * warpM + 8 * ((lane / 8) % 2) + lane % 8, q = 16 * nt + 8 * (lane / 16);");
    w.line(cat("sm90::warp::stmatrixX4(", ns, "smemAddress(", buffer, ") + sm90::swizzle128Offset(key, q, kBlockN), ",
               it == packed.end() ? std::string("frag") : it->second + "[nt]", ");"));
    w.close();
    return;
  }
  w.comment(cat(from, " rounded to 16 bits and transposed into ", buffer,
                " [kBlockN keys][kBlockM query rows] (stmatrix.x4.trans, swizzled):"));
  w.comment("this warp's query columns, the K-major A operand of the GEMMs whose rows are keys");
  w.openUnrolledFor("nt", "kSTiles / 2");
  w.line(cat("const unsigned frag[4] = {", pack, "(", from, "[0][2 * nt][0], ", from, "[0][2 * nt][1]), ", pack, "(",
             from, "[0][2 * nt][2], ", from, "[0][2 * nt][3]),"));
  w.line(cat("                          ", pack, "(", from, "[0][2 * nt + 1][0], ", from, "[0][2 * nt + 1][1]), ", pack,
             "(", from, "[0][2 * nt + 1][2], ", from, "[0][2 * nt + 1][3])};"));
  w.comment("lane l addresses row l % 8 of matrix l / 8: key 16·nt + 8·(l / 16) + l % 8 of this warp's keys, query");
  w.comment("rows from this warp's first + 8·((l / 8) % 2)");
  w.line(cat("const int key = ", keySplit ? "warpCol0 + " : "", "16 * nt + 8 * (lane / 16) + lane % 8, q = ",
             keySplit ? "warpM" : "warp", " * kWarpRows + 8 * ((lane / 8) % 2);"));
  w.line(cat("sm90::warp::stmatrixX4Trans(", ns, "smemAddress(", buffer,
             ") + sm90::swizzle128Offset(key, q, kBlockN), frag);"));
  w.close();
}

void BackwardSm90::dotTn(CudaWriter &w, const std::string &acc, const std::string &a, const SharedTile &b,
                         int64_t warpCols) {
  std::string frag;
  if (shape.swapScores) {
    // Aᵀ in registers: the transposed score tile's C fragments of n8 tiles 2k, 2k + 1 are the A fragment of k16 step
    // k (the forward's P·V). Packed here, where the tile is final, so its fp32 registers die before dQ's GEMM; stage()
    // stores dS from the same words.
    frag = cat("dotFrag", dotFrags++);
    packed[a] = frag;
    w.comment(cat(a, " rounded to 16 bits into ", frag, ": the A fragments of ", acc, "'s GEMM (k16 step k: n8 tiles 2k, "
                  "2k + 1)"));
    w.line(cat("unsigned ", frag, "[kSTiles / 2][4];"));
    w.openUnrolledFor("k", "kSTiles / 2");
    for (int r = 0; r < 4; ++r)
      w.line(cat(frag, "[k][", r, "] = ", pack, "(", a, "[0][2 * k", r >= 2 ? " + 1" : "", "][", 2 * (r % 2), "], ", a,
                 "[0][2 * k", r >= 2 ? " + 1" : "", "][", 2 * (r % 2) + 1, "]);"));
    w.close();
  }
  if (shape.gemmOverlap) {
    w.comment(cat(acc, " += Aᵀ·", b.name.substr(1), " (tile.dot_tn): issued after dQ's products (overlap)"));
    deferred.push_back({acc, a, frag, b, warpCols});
    return;
  }
  issueDot(w, {acc, a, frag, b, warpCols});
}

void BackwardSm90::issueDot(CudaWriter &w, const DeferredDot &dot) {
  const std::string floats = cat(dot.warpCols / 2);
  if (shape.swapScores) {
    // Aᵀ from the words dotTn packed (fenced where the group is waited for: not reused before the wgmma read them).
    const std::string &frag = dot.frag;
    w.comment(cat(dot.acc, " += Aᵀ·", dot.b.name.substr(1), " (tile.dot_tn; wgmma m64n", dot.warpCols, "k16 ", mmaType,
                  " RS, fp32): Aᵀ = ", dot.a, " from registers (", frag, "), ", dot.b.name.substr(1), " MN-major;"));
    w.comment("the warpgroup's rows are its keys of the K/V tile");
    w.open("");
    w.line(cat("const unsigned long long bDesc = sm90::desc::mnMajor", sw(), "(", address(dot.b.name), ", kBlockM * ",
               swizzle, ");"));
    w.line(cat("sm90::warpgroup::fenceOperands(", flat(dot.acc, floats), ");"));
    w.line("sm90::warpgroup::arrive();");
    w.openUnrolledFor("ks", "kSTiles / 2");
    w.line(cat("sm90::warpgroup::Wgmma<", dot.warpCols, ">::", mmaType, "RS<sm90::warpgroup::kMNMajor>(",
               flat(dot.acc, floats), ", ", frag, "[ks], sm90::desc::offsetLow(bDesc, sm90::desc::mnMajorStepBytes", sw(),
               "(ks)), 1);"));
    w.close();
    const std::string operand = cat("reinterpret_cast<unsigned (&)[kSTiles / 2 * 4]>(", frag, "[0])");
    if (shape.gemmOverlap) {
      w.line("sm90::warpgroup::commitGroup();");
      inFlight.push_back({dot.acc, flat(dot.acc, floats), operand});
    } else {
      retire(w, flat(dot.acc, floats));
      w.line(cat("sm90::warpgroup::fenceOperands(", operand, ");"));
    }
    w.close();
    return;
  }
  w.comment(cat(dot.acc, " += Aᵀ·", dot.b.name.substr(1), " (tile.dot_tn; wgmma m64n", dot.warpCols, "k16 ", mmaType,
                " SS, fp32): Aᵀ staged in ", dot.a, " (K-major), ", dot.b.name.substr(1), " MN-major;"));
  w.comment(columnSplit ? "the warpgroup's rows are all the K/V tile's keys, its columns its part of the head dim"
                        : "the warpgroup's rows are the K/V tile's keys");
  w.open("");
  // The column split: every warpgroup all the keys (A's m64 rows) and its own columns of B; else its own keys.
  w.line(cat("const unsigned aAddr = ", address(dot.a, columnSplit ? std::string() : warpgroupRows()),
             ", bAddr = ",
             address(dot.b.name, columnSplit ? cat(" + warp / ", kWarpgroupWarps, " * ", dot.warpCols, " * kBlockM * 2")
                                             : std::string()),
             ";"));
  w.line(cat("const unsigned long long aDesc = sm90::desc::kMajor(aAddr), bDesc = sm90::desc::mnMajor", sw(),
             "(bAddr, kBlockM * ", swizzle, ");"));
  w.line(cat("sm90::warpgroup::fenceOperands(", flat(dot.acc, floats), ");"));
  w.line("sm90::warpgroup::arrive();");
  w.openUnrolledFor("ks", "kBlockM / 16");
  w.line(cat("sm90::warpgroup::Wgmma<", dot.warpCols, ">::", mmaType, "SS<sm90::warpgroup::kMNMajor>(",
             flat(dot.acc, floats),
             ", sm90::desc::offsetLow(aDesc, sm90::desc::kMajorStepBytes(ks, kBlockN)), "
             "sm90::desc::offsetLow(bDesc, sm90::desc::mnMajorStepBytes", sw(), "(ks)), 1);"));
  w.close();
  if (shape.gemmOverlap)
    commit(w, dot.acc, flat(dot.acc, floats));
  else
    retire(w, flat(dot.acc, floats));
  w.close();
}

void BackwardSm90::dqOperand(CudaWriter &w, const std::string &staged, const std::string &regs) {
  if (dqReadsRegisters()) {
    w.comment(cat("tile.accumulate dq_accum[qt]: dQ += A·K, A = ", regs,
                  " from registers (wgmma RS: the accumulator layout is the A operand's), K MN-major;"));
    w.comment(cat(kDqColumns, " columns at a time, added to the fp32 accumulator (red.global.add.v2)"));
    w.line("unsigned dsFrag[kMTiles][kBlockN / 16][4];");
    w.openUnrolledFor("k", "kBlockN / 16");
    w.line(cat("dsFrag[0][k][0] = ", pack, "(", regs, "[0][2 * k][0], ", regs, "[0][2 * k][1]);"));
    w.line(cat("dsFrag[0][k][1] = ", pack, "(", regs, "[0][2 * k][2], ", regs, "[0][2 * k][3]);"));
    w.line(cat("dsFrag[0][k][2] = ", pack, "(", regs, "[0][2 * k + 1][0], ", regs, "[0][2 * k + 1][1]);"));
    w.line(cat("dsFrag[0][k][3] = ", pack, "(", regs, "[0][2 * k + 1][2], ", regs, "[0][2 * k + 1][3]);"));
    w.close();
  } else {
    dqA = staged;
    w.comment(cat("tile.accumulate dq_accum[qt]: dQ += A·K over all kBlockN keys, A = ", regs, " read back from ",
                  staged, " [keys][query rows]"));
    w.comment(cat("(wgmma SS, A MN-major: every warpgroup's keys), K MN-major; ", kDqColumns,
                  " columns at a time, ", keySplit ? "this warpgroup's column blocks" : "this warpgroup's query rows",
                  ", added to the fp32 accumulator (red.global.add.v2)"));
  }
  if (shape.gemmOverlap)
    issueDqProducts(w, kTile());
}

void BackwardSm90::dqReductions(CudaWriter &w, const SharedTile &k, const std::string &part,
                                const std::vector<DqBlock> &round) {
  forEachBlock(w, round, [&](const DqBlock &block) {
    fragments.forEachRow(w, [&] {
      w.line(cat("const int q = ", FragmentTiles::threadRow(), ";"));
      w.line("if (q >= p.seqlenQ)");
      w.line("  continue;");
      w.openUnrolledFor("nt", cat(block.width / 8));
      w.line(cat("float *const dst = gDqAccum + (long long)q * ", k.width, " + ", block.col, " + 8 * nt + fragCol;"));
      w.line(reduceAdd2("dst", cat(part, "[0][nt][2 * r]"), cat(part, "[0][nt][2 * r + 1]")));
      w.close();
    });
  });
}

void BackwardSm90::dqToShared(CudaWriter &w, const std::string &part, const std::vector<DqBlock> &round) {
  forEachBlock(w, round, [&](const DqBlock &block) {
    fragments.forEachRow(w, [&] {
      w.line(cat("const int row = ", keySplit ? "warpM" : "warp", " * kWarpRows + 16 * mt + fragRow + 8 * r;"));
      w.openUnrolledFor("nt", cat(block.width / 8));
      w.line(cat("*reinterpret_cast<float2 *>(sDq + row * kDqPitch + ", block.col,
                 " + 8 * nt + fragCol) = make_float2(", part, "[0][nt][2 * r], ", part, "[0][nt][2 * r + 1]);"));
      w.close();
    });
  });
}

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
  if (!shape.dqWriter) {
    w.comment("the load warp's barriers: K and V landed; the ring's buffers s = 0, 1 full and empty");
    w.line(cat("sm90::Mbarrier *const kvBar = reinterpret_cast<sm90::Mbarrier *>(", at,
               "), *const fullBars = kvBar + 1, *const emptyBars = fullBars + 2;"));
    return;
  }
  w.comment("the dQ writer's buffer (fp32 [kBlockM][kDqPitch]: a Q tile's rows of dq_accum, each padded so that the");
  w.comment("fragment stores do not conflict) and its barriers: dqBars[0] full (kThreads arrivals), dqBars[1] empty (the");
  w.comment("writer's one)");
  w.line(cat("constexpr int kDqPitch = kHeadDim + ", dqPad(), ";"));
  w.line(cat("float *const sDq = reinterpret_cast<float *>(", at, ");"));
  w.line("sm90::Mbarrier *const dqBars = reinterpret_cast<sm90::Mbarrier *>(sDq + kBlockM * kDqPitch);");
  if (shape.loadWarp) {
    w.comment("the load warp's barriers: K and V landed; the ring's buffers s = 0, 1 full and empty");
    w.line(cat("sm90::Mbarrier *const kvBar = dqBars + ", kDqBarriers, ", *const fullBars = kvBar + 1, *const emptyBars = "
               "fullBars + 2;"));
  }
  w.line(cat("int *const sDqTile = reinterpret_cast<int *>(dqBars + ", kDqBarriers + (shape.loadWarp ? kLoadBarriers : 0),
             ");  // the Q tile in sDq; -1: the walk is over"));
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
    w.line("sm90::mbarrier::init(&dqBars[1], 1);");
  }
  if (shape.loadWarp) {
    w.line("sm90::mbarrier::init(kvBar, 2);  // K's and V's TMA");
    w.open("for (int s = 0; s < 2; ++s)");
    w.line("sm90::mbarrier::init(&fullBars[s], 32);  // the load warp's lanes (and the TMA's bytes)");
    w.line("sm90::mbarrier::init(&emptyBars[s], kThreads);  // each computing thread");
    w.close();
  }
  w.line("sm90::mbarrier::initFence();");
  w.close();
  w.line("__syncthreads();  // every role sees the initialized barriers");
  w.open("if (warp >= kWarps)");
  w.line(cat("sm90::warpgroup::decreaseRegisters<", producerRegs, ">();"));
  if (!shape.dqWriter)
    return;
  w.open("if (warp == kWarps)");
  w.comment("dQ writer: Q tile after Q tile, as the computing warps hand them over, until the walk is over");
  w.open("for (int use = 0;; ++use)");
  w.line("sm90::mbarrier::wait(&dqBars[0], use & 1);");
  w.comment("lane 0 reads the tile's index (it is also the one that frees the buffer: its arrival orders the read)");
  w.line("const int tile = __shfl_sync(0xffffffffu, lane == 0 ? *static_cast<volatile int *>(sDqTile) : 0, 0);");
  w.line("if (tile < 0)");
  w.line("  break;");
  w.comment("deterministic mode: this block's turn on the tile's rows; its adds complete before the turn passes on");
  w.line(cat("int *const turnCounter = p.deterministic ? ", dqCounter, " : nullptr;"));
  w.line("if (lane == 0 && turnCounter)");
  w.line(cat("  ", ns, "waitTurn(turnCounter, ", dqTurn, ");"));
  w.line("__syncwarp();");
  w.line("const int rows = min(kBlockM, p.seqlenQ - tile * kBlockM);");
  if (dqPad()) {
    w.comment("the tile's rows below seqlen_q, a bulk reduce-add each (lane l the rows l, l + 32, ...): a row of sDq,");
    w.comment("padded, is a row of dq_accum");
    w.line("#pragma unroll 1");
    w.line("for (int row = lane; row < rows; row += 32)");
    w.line("  sm90::bulkReduceAddF32(gDqAccum + ((long long)tile * kBlockM + row) * kHeadDim, sDq + row * kDqPitch, "
           "kHeadDim * 4u);");
  } else {
    w.comment("the tile's rows below seqlen_q, contiguous in sDq and in dq_accum: one bulk reduce-add");
    w.line("if (lane == 0)");
    w.line("  sm90::bulkReduceAddF32(gDqAccum + (long long)tile * kBlockM * kHeadDim, sDq, unsigned(rows) * kHeadDim * "
           "4u);");
  }
  w.line("sm90::tma::storeCommit();");
  w.open("if (turnCounter)");
  w.line("sm90::tma::storeWait<0>();");
  w.line("__threadfence();");
  w.close();
  w.open("else");
  w.line("sm90::tma::storeWaitRead<0>();  // sDq read: the next tile may go there");
  w.close();
  w.line("__syncwarp();");
  w.open("if (lane == 0)");
  w.line("if (turnCounter)");
  w.line(cat("  ", ns, "passTurn(turnCounter);"));
  w.line("sm90::mbarrier::arrive(&dqBars[1]);");
  w.close();
  w.close();
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
  if (shape.loadWarp)
    w.line("int tileUses = 0;  // Q tiles taken from the load warp's ring");
}

void BackwardSm90::beginLoadRole(CudaWriter &w) {
  w.open("if (warp == kWarps + 1)");
  w.comment("load warp: K and V once, then the walk's Q tiles in order, each into the ring's next buffer once the");
  w.comment("computing warps freed it; TMA coordinates {0, row, 0, head, batch} (varlen: the packed rows, batch 0)");
  w.line("const int qRow0 = params.cuSeqlensQ ? min(max(params.cuSeqlensQ[b], 0), params.seqlenQ) : 0;");
  w.line("const int kRow0 = params.cuSeqlensK ? p.keyOffset : 0;");
  w.line("const int tmaBatch = params.cuSeqlensQ ? 0 : b;");
  w.line("constexpr unsigned kQTileBytes = kBlockM * (kHeadDim + kHeadDimV) * 2;  // Q's and dO's boxes");
  w.open("if (lane == 0)");
  for (const char *map : {"q", "k", "v", "dO"})
    w.line(cat("sm90::tma::prefetchDescriptor(&maps.", map, ");"));
  w.close();
  w.line("int loads = 0;  // Q tiles loaded");
}

void BackwardSm90::loadOwnTile(CudaWriter &w, const SharedTile &tile, bool k) {
  w.comment(cat("tile.load ", k ? "k" : "v", ": the block's tile into ", tile.name));
  w.open("if (lane == 0)");
  w.line(cat("sm90::mbarrier::arriveExpectTx(kvBar, ", tile.rows, " * ", k ? "kHeadDim" : "kHeadDimV", " * 2);"));
  w.line(cat("sm90::tma::load5d(", tile.name, ", &maps.", k ? "k" : "v",
             ", kvBar, 0, kRow0 + blockKvTile * kBlockN, 0, hKv, tmaBatch);"));
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
  w.line(cat("sm90::tma::load5d(stage ? sDO1 : sDO0, &maps.dO, &fullBars[stage], 0, qRow0 + ", qt,
             " * kBlockM, 0, h, tmaBatch);"));
  w.close();
  w.comment("the LSE and D rows (fp32), -inf and 0 past seqlen_q");
  w.line("float *const rows = sRows + stage * 2 * kBlockM;");
  w.open("for (int row = lane; row < kBlockM; row += 32)");
  w.line(cat("const int q = ", qt, " * kBlockM + row;"));
  w.line(cat("rows[row] = q < p.seqlenQ ? gLse[q] : ", ns, "kNegInf;"));
  w.line("rows[kBlockM + row] = q < p.seqlenQ ? gDelta[q] : 0.f;");
  w.close();
  w.line("sm90::mbarrier::arrive(&fullBars[stage]);");
  w.line("++loads;");
}

void BackwardSm90::acquireQTile(CudaWriter &w) {
  w.comment("this Q tile's Q, dO, LSE and D from the load warp's ring (buffer tileUses % 2)");
  w.line("const int stage = tileUses & 1;");
  w.line("sm90::mbarrier::wait(&fullBars[stage], (tileUses >> 1) & 1);");
  w.line("unsigned char *const sQ = stage ? sQ1 : sQ0, *const sDO = stage ? sDO1 : sDO0;");
  w.line("const float *const sLse = sRows + stage * 2 * kBlockM, *const sDelta = sLse + kBlockM;");
}

void BackwardSm90::releaseQTile(CudaWriter &w) {
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

void BackwardSm90::dqGemm(CudaWriter &w, const SharedTile &k, const std::vector<DqBlock> &round,
                          const std::string &part) {
  w.line("sm90::warpgroup::arrive();");
  forEachBlock(w, round, [&](const DqBlock &block) {
    w.open("");
    // Column c of a column-block tile starts c · rows · 2 bytes in, at any span (c a multiple of the span's columns).
    w.line(cat("const unsigned bAddr = ", address(k.name, cat(" + (", block.col, ") * ", k.rows, " * 2")),
               ";  // columns [", block.col, ", +", block.width, ") of K"));
    if (!dqReadsRegisters())
      w.line(cat("const unsigned aAddr = ",
                 address(dqA, keySplit ? std::string() : cat(" + warp / ", kWarpgroupWarps, " * kBlockN * ", kSwizzleBytes)),
                 ";  // dS, ", keySplit ? "the Q tile's rows" : "this warpgroup's query rows (a column block)"));
    w.line(cat("const unsigned long long bDesc = sm90::desc::mnMajor", sw(), "(bAddr, ", k.rows, " * ", swizzle, ");"));
    if (!dqReadsRegisters())
      w.line(cat("const unsigned long long aDesc = sm90::desc::mnMajor(aAddr, kBlockN * ", kSwizzleBytes, ");"));
    w.openUnrolledFor("ks", "kBlockN / 16");
    if (dqReadsRegisters())
      w.line(cat("sm90::warpgroup::Wgmma<", block.width, ">::", mmaType, "RS<sm90::warpgroup::kMNMajor>(",
                 flat(part, cat(block.width / 2)), ", dsFrag[0][ks], sm90::desc::offsetLow(bDesc, "
                 "sm90::desc::mnMajorStepBytes", sw(), "(ks)), ks > 0);"));
    else
      w.line(cat("sm90::warpgroup::WgmmaMnA<", block.width, ">::", mmaType, "SS<sm90::warpgroup::kMNMajor>(",
                 flat(part, cat(block.width / 2)), ", sm90::desc::offsetLow(aDesc, sm90::desc::mnMajorStepBytes(ks)), ",
                 "sm90::desc::offsetLow(bDesc, sm90::desc::mnMajorStepBytes", sw(), "(ks)), ks > 0);"));
    w.close();
    w.close();
  });
}

void BackwardSm90::issueDqRound(CudaWriter &w, const SharedTile &k, const std::vector<DqBlock> &round) {
  dqGemm(w, k, round, "dqPart");
  commit(w, "dqPart", flat("dqPart", cat(dqWidth(k) / 2)));
}

void BackwardSm90::issueDqProducts(CudaWriter &w, const SharedTile &k) {
  w.comment("overlap: dQ's first product issued first, then dV's and dK's, a group each (before deterministic");
  w.comment("mode's turn: the products do not depend on it); dqProduct waits for it");
  w.line(cat("float dqPart[1][", dqWidth(k) / 8, "][4];"));
  issueDqRound(w, k, dqRounds(k).front());
  for (const DeferredDot &dot : deferred)
    issueDot(w, dot);
  deferred.clear();
}

void BackwardSm90::fenceDsFragments(CudaWriter &w) const {
  if (dqReadsRegisters())
    w.line("sm90::warpgroup::fenceOperands(reinterpret_cast<unsigned (&)[kBlockN / 16 * 4]>(dsFrag[0]));");
}

void BackwardSm90::dqProductOverlapped(CudaWriter &w, const SharedTile &k) {
  const std::vector<std::vector<DqBlock>> rounds = dqRounds(k);
  w.comment("overlap: each product's reductions once it landed, the first under dV's and dK's GEMMs");
  for (size_t i = 0; i < rounds.size(); ++i) {
    if (i > 0)
      issueDqRound(w, k, rounds[i]);
    waitFor(w, "dqPart");
    if (i == rounds.size() - 1)
      fenceDsFragments(w);
    if (shape.dqWriter) {
      if (i == 0)
        dqHandOver(w, true);
      dqToShared(w, "dqPart", rounds[i]);
    } else {
      dqReductions(w, k, "dqPart", rounds[i]);
    }
  }
  if (shape.dqWriter)
    dqHandOver(w, false);
}

void BackwardSm90::dqProduct(CudaWriter &w, const SharedTile &k) {
  if (shape.gemmOverlap) {
    dqProductOverlapped(w, k);
    return;
  }
  if (shape.dqWriter)
    dqHandOver(w, true);
  const int64_t width = dqWidth(k);
  for (const std::vector<DqBlock> &round : dqRounds(k)) {
    w.open("");
    w.line(cat("float part[1][", width / 8, "][4];"));
    w.open("");
    dqGemm(w, k, round, "part");
    retire(w, flat("part", cat(width / 2)));
    fenceDsFragments(w);
    w.close();
    if (shape.dqWriter)
      dqToShared(w, "part", round);
    else
      dqReductions(w, k, "part", round);
    w.close();
  }
  if (shape.dqWriter)
    dqHandOver(w, false);
}

} // namespace

std::optional<std::string> checkBackwardShape(const KernelShape &shape) {
  const int warpgroups = shape.warps / kWarpgroupWarps;
  if (shape.warps % kWarpgroupWarps != 0 || warpgroups < 1 || warpgroups > kMaxWarpgroups)
    return cat("sm90 backward: a block is 1 to ", kMaxWarpgroups, " computing warpgroups (4 warps each); got ",
               shape.warps, " warps");
  if (shape.warpRows != kWgmmaM / kWarpgroupWarps)
    return cat("sm90 backward: a warp holds ", kWgmmaM / kWarpgroupWarps, " query rows (a quarter of an m", kWgmmaM,
               "); got ", shape.warpRows);
  if (shape.keyWarps == 1) {
    if (shape.blockM != kWgmmaM * warpgroups || shape.blockN != kWgmmaM * warpgroups)
      return cat("sm90 backward: with the query rows split over ", warpgroups, " warpgroup(s), block-m and block-n must "
                 "be ", kWgmmaM * warpgroups, " (a warpgroup's m64 query rows of S and m64 keys of dK and dV); got "
                 "block-m ", shape.blockM, ", block-n ", shape.blockN);
  } else {
    const bool keys = shape.blockN == kWgmmaM * warpgroups, columns = splitsColumns(shape);
    if (shape.keyWarps != warpgroups || shape.blockM != kWgmmaM || !(keys || columns))
      return cat("sm90 backward: with the keys split over ", warpgroups, " warpgroups, key-warps must be ", warpgroups,
                 ", block-m ", kWgmmaM, " and block-n ", kWgmmaM * warpgroups,
                 " (a warpgroup's m64 keys) or, splitting dK's and dV's columns, ", kWgmmaM,
                 " (every warpgroup the tile's m64 keys); got key-warps ", shape.keyWarps, ", block-m ", shape.blockM,
                 ", block-n ", shape.blockN);
  }
  if (shape.swapScores && (shape.keyWarps == 1 || splitsColumns(shape) || shape.blockM != kWgmmaM))
    return cat("sm90 backward: swapped score GEMMs (tile.swap_scores) need the keys split over the warpgroups, each its "
               "m64 keys over the whole head dim, and block-m ", kWgmmaM, " (a warp's 16 keys of S and 16 query rows of "
               "dQ); got key-warps ", shape.keyWarps, ", block-m ", shape.blockM, ", block-n ", shape.blockN);
  // A thread holds its warpgroup's part of dK and dV in fp32: 64 keys x (head_dim + head_dim_v) / 128 floats, or a
  // W-th of that under the column split; at most 128 of its 240 registers.
  const bool columns = splitsColumns(shape);
  const int64_t parts = columns ? shape.keyWarps : 1;
  for (auto [name, value] : {std::pair{"head_dim", shape.headDim}, {"head_dim_v", shape.headDimV}})
    if (value < 64 || value > 256 || value % (32 * parts) != 0)
      return cat("sm90 backward: ", name, " (", value, ") must be a multiple of ", 32 * parts, " in [64, 256] (whole ",
                 "32-column blocks", columns ? " a warpgroup" : "", "); the fa2 backward serves the others");
  if (const int64_t floats = kWgmmaM * (shape.headDim + shape.headDimV) / parts / (kWarpgroupWarps * 32); floats > 128)
    return cat("sm90 backward: dK and dV would take ", floats, " fp32 registers a thread (head dims ", shape.headDim,
               ", ", shape.headDimV, columns ? "" : ", a warpgroup's 64 keys over all their columns",
               "); at most 128: split their columns over the warpgroups (block-n ", kWgmmaM, ")");
  return std::nullopt;
}

std::unique_ptr<BackwardTarget> createBackwardTarget(const KernelShape &shape) {
  return std::make_unique<BackwardSm90>(shape);
}

} // namespace flashtile::codegen::sm90
