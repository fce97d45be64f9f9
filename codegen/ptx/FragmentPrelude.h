//===- FragmentPrelude.h - the warp primitives of every kernel ------------===//
//
// The CUDA text printed ahead of every kernel, in a namespace its family names: warp-level primitives of the
// m16n8k16 MMA generation (mma.sync, ldmatrix, cp.async, which sm_80, sm_90a and sm_100a all run) and the helpers of
// its C-fragment layout that FragmentTiles.h prints the register-tile math with (row reductions over a lane quad,
// exp2, packing two fp32 values into 16-bit pairs). A wgmma accumulator has that layout per warp, so the sm90 family's
// kernels carry this text too, ahead of their own prelude. It holds instruction-level primitives only, one
// inline-PTX wrapper or fragment helper each: the loops, pipeline stages, barriers and masking of a kernel are
// generated from its IR. It compiles under NVRTC with no headers at all (fragments are 32-bit registers, 16-bit
// elements are moved as raw bits).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_PTX_FRAGMENTPRELUDE_H
#define FLASHTILE_CODEGEN_PTX_FRAGMENTPRELUDE_H

#include <string>
#include <string_view>

namespace flashtile::codegen {

/// The primitives' text, `$ns` standing for the namespace they are printed in.
inline constexpr std::string_view kFragmentPreludeText = R"cuda(
// ==== $ns device primitives: mma.sync, ldmatrix, cp.async (instruction wrappers only) ====
namespace $ns {

inline constexpr float kLog2e = 1.4426950408889634f; // log2(e): exp(x) = exp2(x * log2(e))
inline constexpr float kLn2 = 0.6931471805599453f;   // ln(2): ln(x) = log2(x) * ln(2)
inline constexpr float kNegInf = __builtin_bit_cast(float, 0xff800000u); // -infinity (no <cmath> under NVRTC)

// A 32-bit shared-memory address, as ldmatrix and cp.async take it.
__device__ __forceinline__ unsigned smemAddress(const void *ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(ptr));
}

// Shared-memory tiles are row-major in 16-byte chunks; an ldmatrix phase reads one logical chunk of eight
// consecutive rows, a cp.async phase eight chunks of one row, and both are conflict-free when those eight land in
// the eight different 16-byte bank groups of a 128-byte line. Two layouts get there:
//  - a multiple of 8 chunks a row (head dims 64, 128, 192, 256): rows stay unpadded and chunk c of row r is
//    stored at chunk c ^ (r & 7) (XOR swizzle);
//  - any other width is padded to an odd number of chunks (12, head dim 96, to 13; 4, head dim 32, to 5), so the
//    eight rows start in eight different bank groups with no XOR. (An XOR by the largest power of two dividing
//    12 would only spread four rows: two-way conflicts in every phase.)
// rowPitch is a row's chunks in shared memory, data and padding.
template <int kChunksPerRow>
__host__ __device__ constexpr int rowPitch() {
  return kChunksPerRow % 8 == 0 ? kChunksPerRow : (kChunksPerRow | 1);
}
// Byte offset of logical chunk `chunk` inside row `row`. The XOR only touches the low three bits of the chunk
// index, so for c = c0 + 2s with c0 in {0, 1} the result is swizzledChunk(r, c0) ^ (32 * s), and rows r + 8n keep
// the swizzle of row r.
template <int kChunksPerRow>
__device__ __forceinline__ unsigned swizzledChunk(int row, int chunk) {
  constexpr int kMask = kChunksPerRow % 8 == 0 ? 7 : 0;
  return static_cast<unsigned>(chunk ^ (row & kMask)) * 16u;
}
// Byte offset of chunk `chunk` of row `row`.
template <int kChunksPerRow>
__device__ __forceinline__ unsigned swizzle(int row, int chunk) {
  return static_cast<unsigned>(row * rowPitch<kChunksPerRow>()) * 16u + swizzledChunk<kChunksPerRow>(row, chunk);
}

// ldmatrix: four (or two) 8x8 matrices of 16-bit elements; lane l gives the row address of matrix l / 8 and
// receives, of every matrix, row l / 4 at columns 2 * (l % 4) and 2 * (l % 4) + 1 (.trans: the transpose).
__device__ __forceinline__ void ldmatrixX4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrixX4Trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrixX2Trans(unsigned (&r)[2], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// D = A·B + D, m16n8k16, fp32 accumulators. A: 4 registers (m16 x k16, row), B: 2 registers (k16 x n8, col),
// C/D: lane l holds rows l / 4 and l / 4 + 8 at columns 2 * (l % 4) and 2 * (l % 4) + 1.
__device__ __forceinline__ void mmaBf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mmaF16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two fp32 values rounded to nearest into one 32-bit register, `lo` in the low half (the lower column).
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

// A page size (log2) as a type: paged K/V copies are unrolled once per page size, which rows start a page then known
// at compile time.
template <int N> struct PageShift {
  static constexpr int value = N;
};

// cp.async.cg: a 16-byte global-to-shared copy that bypasses L1; when `valid` is false no byte is read and the
// 16 bytes are zero-filled (src-size 0).
__device__ __forceinline__ void cpAsync16(unsigned dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Returns once at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Max and sum over the four lanes of a quad (the lanes that hold one row of an mma C fragment).
__device__ __forceinline__ float quadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// tanh with tanh.approx.f32 (sm_75+): max relative error 2^-10.99, as FlashAttention's softcap uses; tanhf from the
// math library costs ~20 instructions per score and halved softcap's speed (bench/NOTES.md).
__device__ __forceinline__ float tanhApprox(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// 2^x with ex2.approx.ftz (exp2(-inf) = +0).
__device__ __forceinline__ float exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

// Programmatic dependent launch (sm_90+; no-ops before): a kernel launched after this one with programmatic stream
// serialization (the split-KV combine) may start once every block of this grid called launchDependents() or
// exited, and gridDependencyWait() in it returns when this grid has completed and its writes are visible. Launched
// without that attribute, the wait returns at once (the stream already ordered the two).
__device__ __forceinline__ void launchDependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void gridDependencyWait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

} // namespace $ns

// Scalar math the variant regions call (TileTarget.h).
__device__ __forceinline__ float tileTanh(float x) { return $ns::tanhApprox(x); }
)cuda";

/// A prelude's `text` with `$ns` replaced by `ns`.
inline std::string inNamespace(std::string_view prelude, std::string_view ns) {
  std::string text(prelude);
  for (size_t at = text.find("$ns"); at != std::string::npos; at = text.find("$ns", at + ns.size()))
    text.replace(at, 3, ns);
  return text;
}

/// The primitives in namespace `ns` (the family's), as the kernel's source carries them.
inline std::string fragmentPrelude(std::string_view ns) { return inNamespace(kFragmentPreludeText, ns); }

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_PTX_FRAGMENTPRELUDE_H
