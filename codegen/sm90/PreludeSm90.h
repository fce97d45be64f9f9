//===- PreludeSm90.h - device primitives of the SM90 instruction family ---===//
//
// The CUDA text printed ahead of every kernel lowered to the sm90 family (wgmma, TMA, mbarrier, setmaxnreg), which
// only sm_90a runs. Like the fragment prelude (codegen/ptx/FragmentPrelude.h) it holds instruction-level primitives
// only — one inline-PTX wrapper, a descriptor encoder or a fragment conversion each; a kernel's roles, rings, barrier
// protocol and loops are generated from its IR. It compiles under NVRTC with no headers, and after the fragment
// prelude in one translation unit (the register-tile math, codegen/common/FragmentTiles.h, calls its exp2 and quad
// reductions).
//
// Two parts: kPreludeCore (fixed text) and the wgmma wrappers, one `sm90::Wgmma<N>` per accumulator width N that a
// kernel uses. Inline PTX names operands by number only (NVCC rejects symbolic names), so a wrapper's operand list
// depends on N; wgmmaText() prints it for one N instead of the header carrying all 32 widths (~140 KB).
// The layouts these primitives assume (128-byte swizzle, descriptor fields, the accumulator fragment) are in
// codegen/sm90/README.md.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM90_PRELUDESM90_H
#define FLASHTILE_CODEGEN_SM90_PRELUDESM90_H

#include "codegen/ptx/AsyncPrelude.h"

#include "codegen/sm90/InstructionsSm90.h"

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace flashtile::codegen::sm90 {

/// The fixed text, in five parts around the wrappers sm90 shares with sm100 (codegen/ptx/AsyncPrelude.h): kPreludeCoreText() joins them.
inline constexpr std::string_view kPreludeCore0 = R"cuda(
// ==== sm90 device primitives: wgmma, TMA, mbarrier, named barriers, setmaxnreg (instruction wrappers only) ====
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the sm90 prelude (wgmma, TMA, setmaxnreg) needs --gpu-architecture=sm_90a; other targets use the sm80 family"
#endif
namespace sm90 {

// A CUtensorMap as the kernel sees it: 128 opaque bytes, 64-byte aligned. Kernels take it as a
// `const __grid_constant__ sm90::TensorMap` parameter so that TMA reads it from the parameter space, never a copy.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
// The TMA descriptors of an attention kernel's Q, K and V tiles, its second parameter (`const __grid_constant__
// sm90::TensorMaps maps`), built per call by the runtime (runtime/TensorMap.h, attentionTensorMaps).
struct TensorMaps {
  TensorMap q, k, v;
};
// An mbarrier: one 64-bit word in shared memory (8-byte aligned).
using Mbarrier = unsigned long long;

// A 32-bit shared-memory address, as every shared::cta operand below takes it.
__device__ __forceinline__ unsigned smemAddress(const void *ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(ptr));
}
// The warpgroup (4 warps, 128 threads) this thread belongs to, made warp-uniform with a shuffle so the compiler
// can branch on it without divergence.
__device__ __forceinline__ int warpgroupIndex() { return __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0); }

// ---- swizzled tiles (TMA CU_TENSOR_MAP_SWIZZLE_{128,64,32}B = wgmma layout types 1, 2, 3) ----
// A tile is stored as column blocks of kSwizzleBytes-byte rows (64, 32 or 16 16-bit elements): block b holds
// columns [b * columns, (b + 1) * columns) of every row, blocks rows x kSwizzleBytes bytes apart. Inside a block,
// row r's 16-byte chunk c is stored at chunk c ^ ((r * kSwizzleBytes / 128) % (kSwizzleBytes / 16)) — for 128 bytes,
// c ^ (r % 8). The pattern repeats every 8 rows, so a tile must start aligned to 8 x kSwizzleBytes bytes (1024 for
// 128-byte swizzle), and every block of a multiple-of-8-row tile is then aligned too.
template <int kSwizzleBytes>
struct Swizzle {
  static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64 || kSwizzleBytes == 32, "swizzle spans: 128, 64, 32");
  static constexpr int kColumns = kSwizzleBytes / 2;    // 16-bit elements per row of a column block
  static constexpr int kAtomBytes = 8 * kSwizzleBytes; // the pattern's period: a tile's alignment
  static constexpr int kStepsPerBlock = kSwizzleBytes / 32; // k16 steps (32 bytes each) across one block row
};
inline constexpr int kSwizzleBytes = 128;                           // the default span (head dims 64, 128, 192, 256)
inline constexpr int kSwizzleAtomBytes = Swizzle<128>::kAtomBytes; // the largest alignment any span needs
// Byte offset of element (row, col) of a tile of `rows` rows of 16-bit elements in that layout.
template <int kSwizzleBytes>
__device__ __forceinline__ unsigned swizzleOffset(int row, int col, int rows) {
  constexpr unsigned kColumns = Swizzle<kSwizzleBytes>::kColumns;
  const unsigned block = unsigned(col) / kColumns, byteInRow = (unsigned(col) % kColumns) * 2u;
  const unsigned phase = (unsigned(row) * kSwizzleBytes / 128u) % (kSwizzleBytes / 16u);
  const unsigned chunk = (byteInRow / 16u) ^ phase;
  return (block * unsigned(rows) + unsigned(row)) * kSwizzleBytes + chunk * 16u + byteInRow % 16u;
}
__device__ __forceinline__ unsigned swizzle128Offset(int row, int col, int rows) {
  return swizzleOffset<128>(row, col, rows);
}

)cuda";
inline constexpr std::string_view kPreludeCore1 = R"cuda(
)cuda";
inline constexpr std::string_view kPreludeCore2 = R"cuda(
// ---- named barriers (bar.sync / bar.arrive): synchronize a subset of the block's warps ----
// Id 0 is __syncthreads'; ids 1-15 are free for the schedule. `threads` is a multiple of 32: every thread of a warp
// that takes part counts. arrive() signals without waiting (a producer side of a ping-pong handshake).
namespace namedBarrier {
__device__ __forceinline__ void sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
} // namespace namedBarrier

// ---- warp-level primitives ----
namespace warp {
// True in exactly one active lane of the (converged) warp: the lane that issues a warp's single TMA or arrive.
__device__ __forceinline__ bool elect() {
  unsigned elected;
  asm volatile("{\n"
               ".reg .pred p;\n"
               "elect.sync _|p, 0xffffffff;\n"
               "selp.u32 %0, 1, 0, p;\n"
               "}\n"
               : "=r"(elected));
  return elected != 0;
}
// Lane 0 of the warp (where the electing lane needs to be a known one, e.g. to broadcast from it afterwards).
__device__ __forceinline__ bool isLane0() { return (threadIdx.x & 31u) == 0u; }
// Lane 0's `x`, which every lane of the warp computed alike (a GEMM operand's shared-memory address): ptxas keeps what
// a warp broadcasts in uniform registers, so the wgmma descriptors made from it are built in the uniform datapath
// instead of in vector registers moved to uniform ones at every wgmma (R2UR). Every lane of the warp must be active.
__device__ __forceinline__ unsigned uniform(unsigned x) { return __shfl_sync(0xffffffffu, x, 0); }
// stmatrix: the inverse of ldmatrix, four 8x8 matrices of 16-bit elements; lane l gives the row address of matrix
// l / 8 and supplies, of every matrix, row l / 4 at columns 2 * (l % 4) and 2 * (l % 4) + 1 (an accumulator
// fragment's pair). The epilogue writes O's fragments to shared memory this way before a TMA store.
__device__ __forceinline__ void stmatrixX4(unsigned addr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
// The same with each 8x8 matrix transposed (lane l's pair lands in column l / 4, rows 2 * (l % 4) and + 1).
__device__ __forceinline__ void stmatrixX4Trans(unsigned addr, const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
} // namespace warp

)cuda";
inline constexpr std::string_view kPreludeCore3 = R"cuda(
// ---- wgmma shared-memory matrix descriptors ----
// 64 bits: start address >> 4 in bits 0-13, leading-dimension byte offset (LBO) >> 4 in 16-29, stride-dimension
// byte offset (SBO) >> 4 in 32-45, base offset in 49-51 (0: tiles are aligned to their swizzle atom), layout in 62-63
// (1, 2, 3 = 128-, 64-, 32-byte swizzle). Advancing the start address by b bytes is adding b >> 4 to the descriptor.
// The templates default to the 128-byte span.
namespace desc {
template <int kSwizzleBytes = 128>
__device__ __forceinline__ unsigned long long encode(unsigned smemAddr, unsigned lboBytes, unsigned sboBytes) {
  constexpr unsigned long long kLayout = kSwizzleBytes == 128 ? 1ull : kSwizzleBytes == 64 ? 2ull : 3ull;
  static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64 || kSwizzleBytes == 32, "swizzle spans: 128, 64, 32");
  return (kLayout << 62) | (static_cast<unsigned long long>((sboBytes >> 4) & 0x3fffu) << 32) |
         (static_cast<unsigned long long>((lboBytes >> 4) & 0x3fffu) << 16) |
         static_cast<unsigned long long>((smemAddr >> 4) & 0x3fffu);
}
// K-major operand (A = Q, or B = K for Q·Kᵀ: the reduction dimension is contiguous): rows at a kSwizzleBytes pitch,
// 8-row groups 8 x kSwizzleBytes apart (SBO); LBO is unused. `smemAddr` points at row 0 of the k16 slice.
template <int kSwizzleBytes = 128>
__device__ __forceinline__ unsigned long long kMajor(unsigned smemAddr) {
  return encode<kSwizzleBytes>(smemAddr, 16u, 8u * kSwizzleBytes);
}
// MN-major operand (B = V for P·V: the output dimension N is contiguous): kSwizzleBytes / 2 N-columns per row, k rows
// at a kSwizzleBytes pitch, 8-row groups 8 x kSwizzleBytes apart (SBO), consecutive column blocks `blockBytes` apart
// (LBO: rows x kSwizzleBytes in the column-block layout). `smemAddr` points at k row 16s of block 0.
template <int kSwizzleBytes = 128>
__device__ __forceinline__ unsigned long long mnMajor(unsigned smemAddr, unsigned blockBytes) {
  return encode<kSwizzleBytes>(smemAddr, blockBytes, 8u * kSwizzleBytes);
}
// The k16 slice `step` of a K-major tile of `rows` rows at `tileAddr`: column block step / kStepsPerBlock, then
// 32 bytes per step inside it.
template <int kSwizzleBytes = 128>
__device__ __forceinline__ unsigned long long kMajorStep(unsigned tileAddr, int step, int rows) {
  constexpr int kSteps = Swizzle<kSwizzleBytes>::kStepsPerBlock;
  return kMajor<kSwizzleBytes>(tileAddr + unsigned(step / kSteps) * unsigned(rows) * kSwizzleBytes +
                               unsigned(step % kSteps) * 32u);
}
// The k16 slice `step` (k rows [16 step, 16 step + 16)) of an MN-major tile of `kRows` k rows at `tileAddr`.
template <int kSwizzleBytes = 128>
__device__ __forceinline__ unsigned long long mnMajorStep(unsigned tileAddr, int step, int kRows) {
  return mnMajor<kSwizzleBytes>(tileAddr + unsigned(step) * 16u * kSwizzleBytes, unsigned(kRows) * kSwizzleBytes);
}
__device__ __forceinline__ unsigned long long advance(unsigned long long d, unsigned bytes) {
  return d + static_cast<unsigned long long>(bytes >> 4);
}
} // namespace desc

// ---- wgmma: warpgroup-wide asynchronous MMA ----
// D (64 x N, fp32) += A (64 x 16) · B (16 x N). Warp w of the warpgroup owns rows [16w, 16w + 16); lane l holds, for
// every n8 block j, d[4j + 2h + c] = D(16w + l / 4 + 8h, 8j + 2 * (l % 4) + c), h, c in {0, 1} (README.md). An RS
// A operand is the same layout for 64 x 16 in four 16-bit pairs: a[i] = (A(r, k), A(r, k + 1)) with r, k as for
// d[2i] — so an fp32 accumulator converts to the next MMA's A fragments in place (accumulatorToOperand).
namespace warpgroup {
enum Major : int { kKMajor = 0, kMNMajor = 1 }; // B's imm-trans-b: 1 reads an MN-major (transposed) tile
// Orders the warpgroup's register accesses before the following wgmma (accumulators and RS A fragments).
__device__ __forceinline__ void arrive() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes a group of issued wgmmas (the unit wait<N> counts).
__device__ __forceinline__ void commitGroup() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Returns once at most kPending committed groups are in flight; only then are their accumulators readable.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving register accesses across an asynchronous wgmma (which reads and writes them
// behind its back): applied to accumulators and A fragments before arrive() and after wait().
__device__ __forceinline__ void fenceOperand(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fenceOperand(unsigned &r) { asm volatile("" : "+r"(r)::"memory"); }
template <int kCount>
__device__ __forceinline__ void fenceOperands(float (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i)
    fenceOperand(r[i]);
}
template <int kCount>
__device__ __forceinline__ void fenceOperands(unsigned (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i)
    fenceOperand(r[i]);
}
)cuda";
inline constexpr std::string_view kPreludeCore4 = R"cuda(// Two fp32 values rounded to nearest into one register, `lo` in the low half (the lower column or k).
__device__ __forceinline__ unsigned packBf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned packF16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// An fp32 accumulator of 64 x kN (P after softmax) as the A operand of kN / 16 RS wgmmas: k16 step s reads
// a[4s .. 4s + 3]. Same thread, same rows and columns: no data moves between threads.
template <int kN>
__device__ __forceinline__ void accumulatorToOperandBf16(const float (&acc)[kN / 2], unsigned (&a)[kN / 4]) {
  static_assert(kN % 16 == 0, "an RS A operand covers k in steps of 16");
#pragma unroll
  for (int i = 0; i < kN / 4; ++i)
    a[i] = packBf16x2(acc[2 * i], acc[2 * i + 1]);
}
template <int kN>
__device__ __forceinline__ void accumulatorToOperandF16(const float (&acc)[kN / 2], unsigned (&a)[kN / 4]) {
  static_assert(kN % 16 == 0, "an RS A operand covers k in steps of 16");
#pragma unroll
  for (int i = 0; i < kN / 4; ++i)
    a[i] = packF16x2(acc[2 * i], acc[2 * i + 1]);
}

// wgmma.mma_async m64nNk16 with fp32 accumulators, one struct per N (printed by wgmmaText(N)):
//   Wgmma<N>::bf16SS<kMajorB>(d, descA, descB, accumulate)   A and B from shared memory (Q·Kᵀ)
//   Wgmma<N>::bf16RS<kMajorB>(d, a, descB, accumulate)       A from registers (P·V)
//   and f16SS / f16RS. `accumulate` = 0 overwrites D (the first k step), 1 adds to it.
template <int kN>
struct Wgmma {
  static_assert(kN != kN, "this wgmma width was not printed into the prelude: add it to the prelude's N list");
};
} // namespace warpgroup

} // namespace sm90
)cuda";

/// The fixed text of the prelude: its own parts and the shared wrappers where they stand.
inline std::string preludeCoreText() {
  std::string text(kPreludeCore0);
  for (std::string_view part : {ptx::kProxyFenceText, kPreludeCore1, ptx::kMbarrierText, kPreludeCore2, ptx::kTmaText,
                                kPreludeCore3, ptx::kSetmaxnregText, kPreludeCore4})
    text += part;
  return text;
}

/// The accumulator operands of a wgmma m64n<n>k16 wrapper: "%0, %1, ..." and the matching "+f"(d[i]) list.
struct WgmmaAccumulators {
  std::string list, operands;
  explicit WgmmaAccumulators(int regs) {
    for (int i = 0; i < regs; ++i) {
      list.append(i ? ", %" : "%").append(std::to_string(i));
      operands.append(i ? ", \"+f\"(d[" : "\"+f\"(d[").append(std::to_string(i)).append("])");
    }
  }
};

/// An n that is not a multiple of 8 in [8, 256] prints an #error naming it, so a bad request fails the NVRTC compile
/// with that message instead of producing a kernel.
inline std::optional<std::string> wgmmaWidthError(int n) {
  if (n >= kWgmmaNStep && n <= kWgmmaMaxN && n % kWgmmaNStep == 0)
    return std::nullopt;
  return "#error \"wgmma m64nNk16: N = " + std::to_string(n) + " is not a multiple of 8 in [8, 256]\"\n";
}

/// The `<type>SS` member of a wgmma m64n<n>k16 wrapper (fp32 accumulators, A and B from shared-memory descriptors):
/// operands after D are descA, descB, accumulate, and trans-b (kMajorB); trans-a is `transA` (0: A K-major).
inline std::string wgmmaSsMember(int n, const std::string &type, int transA) {
  const int regs = n / 2; // fp32 accumulators per thread: operands %0 .. %(regs - 1), the others follow
  const WgmmaAccumulators d(regs);
  auto op = [regs](int index) { return std::string("%").append(std::to_string(regs + index)); };
  const std::string instruction =
      "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k16.f32." + type + "." + type;
  std::string text = "  template <int kMajorB>\n  static __device__ __forceinline__ void " + type + "SS(";
  text.append("float (&d)[").append(std::to_string(regs));
  text.append("], unsigned long long descA, unsigned long long descB, int accumulate) {\n");
  text.append("    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, ").append(op(2)).append(", 0;\\n\"\n");
  text.append("                 \"").append(instruction).append(" {").append(d.list).append("}, ").append(op(0));
  text.append(", ").append(op(1)).append(", p, 1, 1, ").append(std::to_string(transA)).append(", ").append(op(3));
  text.append(";\\n}\\n\"\n");
  text.append("                 : ").append(d.operands).append("\n");
  text.append("                 : \"l\"(descA), \"l\"(descB), \"r\"(accumulate), \"n\"(kMajorB));\n  }\n");
  return text;
}

/// The `sm90::warpgroup::Wgmma<n>` specialization: bf16/f16 × SS/RS wrappers of wgmma.mma_async.m64n<n>k16 with
/// fp32 accumulators.
inline std::string wgmmaText(int n) {
  if (std::optional<std::string> error = wgmmaWidthError(n))
    return *error;
  std::string text;
  const int regs = n / 2;
  const WgmmaAccumulators d(regs);
  auto op = [regs](int index) { return std::string("%").append(std::to_string(regs + index)); };
  const std::string dParam = "float (&d)[" + std::to_string(regs) + "]";
  text.append("namespace sm90::warpgroup {\ntemplate <>\nstruct Wgmma<").append(std::to_string(n)).append("> {\n");
  for (std::string type : {"bf16", "f16"}) {
    const std::string instruction =
        "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k16.f32." + type + "." + type;
    text += wgmmaSsMember(n, type, /*transA=*/0);
    // RS operands after D: a[0..3], descB, accumulate, trans-b.
    text.append("  template <int kMajorB>\n  static __device__ __forceinline__ void ").append(type).append("RS(");
    text.append(dParam).append(", const unsigned (&a)[4], unsigned long long descB, int accumulate) {\n");
    text.append("    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, ").append(op(5)).append(", 0;\\n\"\n");
    text.append("                 \"").append(instruction).append(" {").append(d.list).append("}, {").append(op(0));
    text.append(", ").append(op(1)).append(", ").append(op(2)).append(", ").append(op(3)).append("}, ").append(op(4));
    text.append(", p, 1, 1, ").append(op(6)).append(";\\n}\\n\"\n");
    text.append("                 : ").append(d.operands).append("\n");
    text.append("                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(descB), ");
    text.append("\"r\"(accumulate), \"n\"(kMajorB));\n  }\n");
  }
  return text.append("};\n} // namespace sm90::warpgroup\n");
}

/// `sm90::warpgroup::WgmmaMnA<n>`: bf16/f16 SS wrappers of wgmma m64n<n>k16 whose A operand is MN-major (imm-trans-a
/// 1: the M rows contiguous, as a tile staged transposed is read back untransposed), B K- or MN-major as kMajorB.
/// The backward's dQ = dS·K reads dS from the [keys][query rows] buffer its dK GEMM reads as Aᵀ.
inline std::string wgmmaMnMajorAText(int n) {
  if (std::optional<std::string> error = wgmmaWidthError(n))
    return *error;
  std::string text = "namespace sm90::warpgroup {\ntemplate <int kN>\nstruct WgmmaMnA;\ntemplate <>\nstruct WgmmaMnA<" +
                     std::to_string(n) + "> {\n";
  for (std::string type : {"bf16", "f16"})
    text += wgmmaSsMember(n, type, /*transA=*/1);
  return text.append("};\n} // namespace sm90::warpgroup\n");
}

/// What e4m3 (FP8) kernels add to the prelude (docs/fp8.md), after it: byte offsets in 8-bit swizzled tiles, P's
/// conversion to e4m3, the bulk copy of a pre-laid-out tile, and the WgmmaE4m3<N> wrappers (wgmmaE4m3Text). Kernels of
/// other dtypes print none of it.
inline constexpr std::string_view kPreludeE4m3 = R"cuda(
// ==== e4m3 (FP8) primitives: 8-bit swizzled tiles, P rounded to e4m3, wgmma m64nNk32 ====
namespace sm90 {
// Byte offset of element (row, col) of a tile of `rows` rows of 8-bit elements in the column-block layout: the
// 16-bit layout's bytes (swizzleOffset), with kSwizzleBytes 8-bit elements a block row. A k32 step of an 8-bit
// K-major operand is 32 bytes, as a k16 step of a 16-bit one: desc::kMajorStep serves both.
template <int kSwizzleBytes>
__device__ __forceinline__ unsigned swizzleOffset8(int row, int col, int rows) {
  static_assert(kSwizzleBytes == 128 || kSwizzleBytes == 64 || kSwizzleBytes == 32, "swizzle spans: 128, 64, 32");
  const unsigned block = unsigned(col) / kSwizzleBytes, byteInRow = unsigned(col) % kSwizzleBytes;
  const unsigned phase = (unsigned(row) * kSwizzleBytes / 128u) % (kSwizzleBytes / 16u);
  return (block * unsigned(rows) + unsigned(row)) * kSwizzleBytes + ((byteInRow / 16u) ^ phase) * 16u +
         byteInRow % 16u;
}
namespace bulk {
// cp.async.bulk: `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) from global memory into
// shared memory, completing them on `bar` (as a TMA copy does: the issuer's arriveExpectTx counts them).
__device__ __forceinline__ void load(void *dst, const void *src, unsigned bytes, Mbarrier *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smemAddress(dst)),
               "l"(src), "r"(bytes), "r"(smemAddress(bar))
               : "memory");
}
} // namespace bulk
namespace warpgroup {
// Four fp32 values rounded to e4m3 (nearest even, saturating at +-448: cvt.rn.satfinite) in one register, x0 in the
// low byte (the lowest k of an 8-bit A fragment).
__device__ __forceinline__ unsigned packE4m3x4(float x0, float x1, float x2, float x3) {
  unsigned short lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(x1), "f"(x0));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(x3), "f"(x2));
  return unsigned(lo) | (unsigned(hi) << 16);
}
// wgmma.mma_async m64nNk32 .e4m3.e4m3 with fp32 accumulators, one struct per N (printed by wgmmaE4m3Text(N)); both
// operands K-major (8-bit wgmma has no transposed operands):
//   WgmmaE4m3<N>::ss(d, descA, descB, accumulate)   A and B from shared memory (Q·Kᵀ)
//   WgmmaE4m3<N>::rs(d, a, descB, accumulate)       A from registers (P·V): lane l of warp w holds rows
//     16w + l / 4 (+ 8) and k = 4 (l % 4) .. + 3 (+ 16): a[0] = (r, k .. k + 3), a[1] = (r + 8, k ..), a[2] = (r, k + 16 ..),
//     a[3] = (r + 8, k + 16 ..), the lowest k in the low byte.
template <int kN>
struct WgmmaE4m3 {
  static_assert(kN != kN, "this wgmma width was not printed into the prelude: add it to the prelude's N list");
};
} // namespace warpgroup
} // namespace sm90
)cuda";

/// The `sm90::warpgroup::WgmmaE4m3<n>` specialization: SS and RS wrappers of wgmma.mma_async.m64n<n>k32.f32.e4m3.e4m3.
inline std::string wgmmaE4m3Text(int n) {
  if (std::optional<std::string> error = wgmmaWidthError(n))
    return *error;
  const int regs = n / 2;
  const WgmmaAccumulators d(regs);
  auto op = [regs](int index) { return std::string("%").append(std::to_string(regs + index)); };
  const std::string instruction = "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k32.f32.e4m3.e4m3";
  const std::string dParam = "float (&d)[" + std::to_string(regs) + "]";
  std::string text = "namespace sm90::warpgroup {\ntemplate <>\nstruct WgmmaE4m3<" + std::to_string(n) + "> {\n";
  // SS operands after D: descA, descB, accumulate.
  text.append("  static __device__ __forceinline__ void ss(").append(dParam);
  text.append(", unsigned long long descA, unsigned long long descB, int accumulate) {\n");
  text.append("    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, ").append(op(2)).append(", 0;\\n\"\n");
  text.append("                 \"").append(instruction).append(" {").append(d.list).append("}, ").append(op(0));
  text.append(", ").append(op(1)).append(", p, 1, 1;\\n}\\n\"\n");
  text.append("                 : ").append(d.operands).append("\n");
  text.append("                 : \"l\"(descA), \"l\"(descB), \"r\"(accumulate));\n  }\n");
  // RS operands after D: a[0..3], descB, accumulate.
  text.append("  static __device__ __forceinline__ void rs(").append(dParam);
  text.append(", const unsigned (&a)[4], unsigned long long descB, int accumulate) {\n");
  text.append("    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, ").append(op(5)).append(", 0;\\n\"\n");
  text.append("                 \"").append(instruction).append(" {").append(d.list).append("}, {").append(op(0));
  text.append(", ").append(op(1)).append(", ").append(op(2)).append(", ").append(op(3)).append("}, ").append(op(4));
  text.append(", p, 1, 1;\\n}\\n\"\n");
  text.append("                 : ").append(d.operands).append("\n");
  text.append("                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(descB), \"r\"(accumulate));\n  }\n");
  return text.append("};\n} // namespace sm90::warpgroup\n");
}

/// `text` followed by `width(n)` for each width of `mmaN`, in order, each printed once.
template <typename WidthText>
std::string withEachWidthOnce(std::string text, std::span<const int> mmaN, WidthText width) {
  std::string seen = ",";
  for (int n : mmaN) {
    const std::string key = std::to_string(n) + ",";
    if (seen.find("," + key) != std::string::npos)
      continue;
    seen += key;
    text += width(n);
  }
  return text;
}

/// The e4m3 part of a kernel's prelude: kPreludeE4m3 and one WgmmaE4m3<N> per width in `mmaN` (each printed once).
inline std::string preludeE4m3(std::span<const int> mmaN) {
  return withEachWidthOnce(std::string(kPreludeE4m3), mmaN, [](int n) { return wgmmaE4m3Text(n); });
}

/// The prelude of a kernel whose wgmmas use the accumulator widths `mmaN` (each printed once).
inline std::string prelude(std::span<const int> mmaN) {
  return withEachWidthOnce(preludeCoreText(), mmaN, [](int n) { return wgmmaText(n); });
}

} // namespace flashtile::codegen::sm90

#endif // FLASHTILE_CODEGEN_SM90_PRELUDESM90_H
