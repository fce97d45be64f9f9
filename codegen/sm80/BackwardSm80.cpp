//===- BackwardSm80.cpp - the backward's GEMMs as mma.sync ----------------===//
//
// S = Q·Kᵀ and dP = dO·Vᵀ: each warp its query rows (ldmatrix.x4 of the Q-tile-row tile) against the K/V tile's keys
// in n16 pairs (ldmatrix.x4), mma.sync m16n8k16. P and dS go to shared memory row-major ([kBlockM][kBlockN],
// swizzled chunks), this warp's rows; dV += Pᵀ·dO and dK += dSᵀ·Q read them back transposed (ldmatrix.x4.trans),
// each warp its m16 tiles of keys (and with kKvColSplit > 1 its part of the columns), the B operand by
// ldmatrix.x4.trans as V in the forward's P·V; dQ += dS·K reads dS with ldmatrix.x4 and K with ldmatrix.x4.trans, 16
// columns at a time, added into the fp32 accumulator with red.global.add.v2 (two scalar adds before sm_90).
// With tile.key_warps (KernelShape::keyWarps > 1, FlashAttention 2's layout) a warp computes S and dP for its row
// group's query rows against its own kBlockN / kKeyWarps keys, stages that part of P and dS, and computes dQ for its
// rows and its kHeadDim / kKeyWarps columns over every key of the tile, before the deterministic mode's turn.
//===----------------------------------------------------------------------===//
#include "codegen/sm80/BackwardSm80.h"
#include "codegen/ptx/BackwardPrelude.h"
#include "codegen/common/Concat.h"
#include "codegen/ptx/FragmentPrelude.h"
#include "codegen/common/FragmentTiles.h"
#include "codegen/sm80/TileOpsSm80.h"

namespace flashtile::codegen::sm80 {
namespace {

constexpr const char *kNamespace = "sm80";

/// The family's part of the backward primitives (BackwardPrelude.h): fp32 reductions into global memory and the
/// 4-byte copy of an LSE or D row.
constexpr std::string_view kBackwardFamilyText = R"cuda(// *dst += x, fp32, without reading the result back (red.global.add: the order of concurrent adds is the hardware's).
__device__ __forceinline__ void redAdd(float *dst, float x) {
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(dst), "f"(x) : "memory");
}
// dst[0] += x, dst[1] += y (dst 8-byte aligned): one vector reduction from sm_90 on (PTX 8.1), two before.
__device__ __forceinline__ void redAdd2(float *dst, float x, float y) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
#else
  redAdd(dst, x);
  redAdd(dst + 1, y);
#endif
}

// A 4-byte global-to-shared copy (cp.async.ca); when `valid` is false no byte is read and the 4 bytes are zeroed.
__device__ __forceinline__ void cpAsync4(unsigned dst, const void *src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

)cuda";

class BackwardSm80 final : public BackwardTarget {
public:
  BackwardSm80(const KernelShape &shape, std::string familyPrelude)
      : familyPrelude(std::move(familyPrelude)), fragments({kNamespace, shape.dtype, false}),
        keySplit(shape.keyWarps > 1), headDim(shape.headDim) {
    mma = shape.dtype == "bf16" ? "sm80::mmaBf16" : "sm80::mmaF16";
    pack = shape.dtype == "bf16" ? "sm80::packBf16x2" : "sm80::packF16x2";
  }

  std::string prelude() const override { return familyPrelude + backwardPrelude(kNamespace, kBackwardFamilyText); }
  std::string_view primitivesNamespace() const override { return kNamespace; }
  std::vector<std::string> reservedNames() const override { return {"sm80", "dqPart", "kDqCols", "dqCol0"}; }
  bool splitsKeys() const override { return true; }

  int64_t tileBytes(int64_t rows, int64_t width) const override { return rows * rowBytes(width); }
  std::string tileBytesExpr(const std::string &rows, const std::string &width) const override {
    return cat(rows, " * sm80::rowPitch<", width, " / 8>() * 16");
  }
  std::string tileLayoutWords() const override { return "sm80::rowPitch"; }
  void declareSharedMemory(CudaWriter &w) const override {
    w.line("extern __shared__ __align__(128) unsigned char smem[];");
  }

  std::string copyWords() const override { return "cp.async"; }
  std::string copyChunk(const SharedTile &tile, const std::string &row, const std::string &col, const std::string &src,
                        const std::string &valid) const override {
    return cat("sm80::cpAsync16(sm80::smemAddress(", tile.name, ") + sm80::swizzle<", tile.width / 8, ">(", row, ", ",
               col, "), ", src, ", ", valid, ");");
  }
  void copyFloat(CudaWriter &w, const std::string &dst, const std::string &src, const std::string &valid) override {
    w.line(cat("sm80::cpAsync4(sm80::smemAddress(", dst, "), ", src, ", ", valid, ");"));
  }
  void commitCopies(CudaWriter &w) override { w.line("sm80::cpAsyncCommit();"); }
  void waitCopies(CudaWriter &w) override { w.line("sm80::cpAsyncWait<0>();"); }

  void scoreGemm(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) override;
  void stage(CudaWriter &w, const std::string &buffer, const std::string &from) override;
  void stagedBarrier(CudaWriter &w) override { w.line("__syncthreads();  // every warp's rows staged"); }
  void dotTn(CudaWriter &w, const std::string &acc, const std::string &staged, const SharedTile &b,
             int64_t warpCols) override;
  void dqOperand(CudaWriter &w, const std::string &staged, const std::string &regs) override;
  void dqProduct(CudaWriter &w, const SharedTile &k) override;
  std::string reduceAdd2(const std::string &dst, const std::string &x, const std::string &y) const override {
    return cat("sm80::redAdd2(", dst, ", ", x, ", ", y, ");");
  }

private:
  /// For each of the `mTiles` m16 tiles: acc[mt][2·np] and acc[mt][2·np + 1] += aFrag[mt] · bFrag's two n8 halves.
  void mmaPair(CudaWriter &w, const char *mTiles, const std::string &acc) const {
    w.openUnrolledFor("mt", mTiles);
    w.line(cat(mma, "(", acc, "[mt][2 * np], aFrag[mt], bFrag[0], bFrag[1]);"));
    w.line(cat(mma, "(", acc, "[mt][2 * np + 1], aFrag[mt], bFrag[2], bFrag[3]);"));
    w.close();
  }

  /// The fp32 adds of this thread's rows (below p.seqlenQ) of `part` ([kMTiles][nTiles][4], columns from col0 of the
  /// dQ accumulator's `width`) into gDqAccum, two columns at a time.
  void addDqRows(CudaWriter &w, int64_t width, const char *nTiles, const char *col0, const char *part) const {
    fragments.forEachRow(w, [&] {
      w.line(cat("const int q = ", FragmentTiles::threadRow(), ";"));
      w.line("if (q >= p.seqlenQ)");
      w.line("  continue;");
      w.openUnrolledFor("nt", nTiles);
      w.line(cat("float *const dst = gDqAccum + (long long)q * ", width, " + ", col0, " + 8 * nt + fragCol;"));
      w.line(reduceAdd2("dst", cat(part, "[mt][nt][2 * r]"), cat(part, "[mt][nt][2 * r + 1]")));
      w.close();
    });
  }
  /// The first query row of this warp in the Q tile, and the first key column chunk (8 keys) of its scores.
  std::string warpRows() const { return keySplit ? "warpM * kWarpRows" : "warp * kWarpRows"; }
  std::string keyChunk0() const { return keySplit ? "warpCol0 / 8 + " : ""; }

  std::string familyPrelude, mma, pack;
  FragmentTiles fragments;
  bool keySplit; ///< tile.key_warps > 1
  int headDim;
};

void BackwardSm80::scoreGemm(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) {
  w.comment(cat(acc, " = ", a.name.substr(1), "·", b.name.substr(1),
                "ᵀ (tile.qk; mma.sync m16n8k16, fp32): this warp's query rows x the K/V tile's keys"));
  const std::string chunks = cat(a.width / 8);
  w.line(cat("float ", acc, "[kMTiles][kSTiles][4] = {};"));
  w.openUnrolledFor("ks", cat(a.width / 16));
  w.line("unsigned aFrag[kMTiles][4];");
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat("sm80::ldmatrixX4(aFrag[mt], sm80::smemAddress(", a.name, ") + sm80::swizzle<", chunks, ">(", warpRows(),
             " + 16 * mt + lane % 16, 2 * ks + lane / 16));"));
  w.close();
  w.openUnrolledFor("np", keySplit ? "kSTiles / 2" : "kBlockN / 16");
  w.line("unsigned bFrag[4];");
  w.line(cat("sm80::ldmatrixX4(bFrag, sm80::smemAddress(", b.name, ") + sm80::swizzle<", chunks, ">(",
             keySplit ? "warpCol0 + " : "", "16 * np + 8 * (lane / 16) + lane % 8, 2 * ks + (lane / 8) % 2));"));
  mmaPair(w, "kMTiles", acc);
  w.close();
  w.close();
}

void BackwardSm80::stage(CudaWriter &w, const std::string &buffer, const std::string &from) {
  w.comment(cat(from, " rounded to 16 bits into ", buffer, " [kBlockM][kBlockN] (swizzled), this warp's rows, for"));
  w.comment("the GEMMs whose rows are keys (ldmatrix.trans) and dQ's");
  fragments.forEachRow(w, [&] {
    w.line(cat("const int row = ", warpRows(), " + 16 * mt + fragRow + 8 * r;"));
    w.openUnrolledFor("nt", "kSTiles");
    w.line(cat("*reinterpret_cast<unsigned *>(", buffer, " + sm80::swizzle<kBlockN / 8>(row, ", keyChunk0(),
               "nt) + 2 * fragCol) = ",
               pack, "(", from, "[mt][nt][2 * r], ", from, "[mt][nt][2 * r + 1]);"));
    w.close();
  });
}

void BackwardSm80::dotTn(CudaWriter &w, const std::string &acc, const std::string &staged, const SharedTile &b,
                         int64_t warpCols) {
  const std::string chunks = cat(b.width / 8);
  w.comment(cat(acc, " += Aᵀ·", b.name.substr(1), " (tile.dot_tn; mma.sync, fp32), A staged in ", staged,
                ": this warp's key rows; Aᵀ by"));
  w.comment(cat("ldmatrix.x4.trans of ", staged, ", ", b.name.substr(1), " by ldmatrix.x4.trans as V in the forward's P·V"));
  w.openUnrolledFor("ks", "kBlockM / 16");
  w.line("unsigned aFrag[kKvMTiles][4];");
  w.openUnrolledFor("mt", "kKvMTiles");
  w.line(cat("sm80::ldmatrixX4Trans(aFrag[mt], sm80::smemAddress(", staged,
             ") + sm80::swizzle<kBlockN / 8>(16 * ks + lane % 8 + 8 * (lane / 16), (kvRowGroup * kKvWarpRows + 16 * "
             "mt) / 8 + (lane / 8) % 2));"));
  w.close();
  w.openUnrolledFor("np", cat(warpCols / 16));
  w.line("unsigned bFrag[4];");
  w.line(cat("sm80::ldmatrixX4Trans(bFrag, sm80::smemAddress(", b.name, ") + sm80::swizzle<", chunks,
             ">(16 * ks + 8 * ((lane / 8) % 2) + lane % 8, 2 * (kvColPart * ", warpCols / 16, " + np) + lane / 16));"));
  mmaPair(w, "kKvMTiles", acc);
  w.close();
  w.close();
}

void BackwardSm80::dqOperand(CudaWriter &w, const std::string &staged, const std::string &) {
  if (keySplit) {
    const std::string chunks = cat(headDim / 8);
    w.comment(cat("tile.accumulate dq_accum[qt]: dqPart = A·K, A staged in ", staged,
                  " (this warp's query rows, every key, ldmatrix.x4), K's"));
    w.comment("columns of this warp (kHeadDim / kKeyWarps from (warp % kKeyWarps) x that) by ldmatrix.x4.trans; added below");
    w.line("constexpr int kDqCols = kHeadDim / kKeyWarps;");
    w.line("const int dqCol0 = warp % kKeyWarps * kDqCols;");
    w.line("float dqPart[kMTiles][kDqCols / 8][4] = {};");
    w.openUnrolledFor("ks", "kBlockN / 16");
    w.line("unsigned aFrag[kMTiles][4];");
    w.openUnrolledFor("mt", "kMTiles");
    w.line(cat("sm80::ldmatrixX4(aFrag[mt], sm80::smemAddress(", staged,
               ") + sm80::swizzle<kBlockN / 8>(warpM * kWarpRows + 16 * mt + lane % 16, 2 * ks + lane / 16));"));
    w.close();
    w.openUnrolledFor("np", "kDqCols / 16");
    w.line("unsigned bFrag[4];");
    w.line(cat("sm80::ldmatrixX4Trans(bFrag, sm80::smemAddress(sK) + sm80::swizzle<", chunks,
               ">(16 * ks + 8 * ((lane / 8) % 2) + lane % 8, dqCol0 / 8 + 2 * np + lane / 16));"));
    mmaPair(w, "kMTiles", "dqPart");
    w.close();
    w.close();
    return;
  }
  w.comment(cat("tile.accumulate dq_accum[qt]: dQ += A·K, A staged in ", staged,
                " (this warp's query rows, ldmatrix.x4), K by"));
  w.comment("ldmatrix.x4.trans; 16 columns at a time, added to the fp32 accumulator (red.global.add)");
  w.line("unsigned aFrag[kMTiles][kBlockN / 16][4];");
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("ks", "kBlockN / 16");
  w.line(cat("sm80::ldmatrixX4(aFrag[mt][ks], sm80::smemAddress(", staged,
             ") + sm80::swizzle<kBlockN / 8>(warp * kWarpRows + 16 * mt + lane % 16, 2 * ks + lane / 16));"));
  w.close();
  w.close();
}

void BackwardSm80::dqProduct(CudaWriter &w, const SharedTile &k) {
  if (keySplit) {
    addDqRows(w, k.width, "kDqCols / 8", "dqCol0", "dqPart");
    return;
  }
  const std::string chunks = cat(k.width / 8);
  w.openUnrolledFor("np", cat(k.width / 16));
  w.line("float part[kMTiles][2][4] = {};");
  w.openUnrolledFor("ks", "kBlockN / 16");
  w.line("unsigned bFrag[4];");
  w.line(cat("sm80::ldmatrixX4Trans(bFrag, sm80::smemAddress(", k.name, ") + sm80::swizzle<", chunks,
             ">(16 * ks + 8 * ((lane / 8) % 2) + lane % 8, 2 * np + lane / 16));"));
  w.openUnrolledFor("mt", "kMTiles");
  w.line(cat(mma, "(part[mt][0], aFrag[mt][ks], bFrag[0], bFrag[1]);"));
  w.line(cat(mma, "(part[mt][1], aFrag[mt][ks], bFrag[2], bFrag[3]);"));
  w.close();
  w.close();
  addDqRows(w, k.width, "2", "16 * np", "part");
  w.close();
}

} // namespace

std::unique_ptr<BackwardTarget> createBackwardTarget(const KernelShape &shape) {
  return std::make_unique<BackwardSm80>(shape, fragmentPrelude(kNamespace));
}

} // namespace flashtile::codegen::sm80
