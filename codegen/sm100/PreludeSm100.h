//===- PreludeSm100.h - device primitives of the SM100 instruction family -===//
//
// The CUDA text printed ahead of a kernel lowered to the sm100 family (tcgen05.mma, tensor memory, TMA, mbarrier),
// which only sm_100a runs. Instruction-level primitives only — one inline-PTX wrapper, a descriptor or address helper,
// or FA4's software exp2 each; a kernel's roles, rings, barrier protocol and loops are generated from its IR. It
// compiles under NVRTC with no headers and includes nothing of the other families; its TMA, mbarrier and setmaxnreg
// wrappers are the text it shares with sm90 (codegen/ptx/AsyncPrelude.h), printed inside its own namespace.
//
// No SM100 GPU exists here and nothing can run tcgen05 code: every primitive below is verified by NVRTC and ptxas
// compiling it for sm_100a and by reading the SASS (tests/unit/sm100, scripts/sm100-sass.sh), never by running it.
//
// Three parts: the core (fixed text, preludeCoreHead() ... kPreludeCoreTail), exp2PolyText() (the software exp2, its
// coefficients printed from codegen/common/Exp2Poly.h so that the device function and the host twin cannot drift
// apart) and the tensor-memory
// access wrappers, one `sm100::tmem::Access32x32b<N>` per width a kernel uses (inline PTX numbers its operands, so each width
// is printed by tmemAccessText(N)). Layouts and ordering rules: codegen/sm100/README.md.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM100_PRELUDESM100_H
#define FLASHTILE_CODEGEN_SM100_PRELUDESM100_H

#include "codegen/ptx/AsyncPrelude.h"
#include "codegen/sm100/Exp2PolySm100.h"
#include "codegen/sm100/InstructionsSm100.h"

#include <algorithm>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile::codegen::sm100 {

/// The core prelude in five pieces: its text up to the tensor-memory allocation, the allocation wrappers (shared
/// with the cluster pair's, kPairPrelude, as cta_group::2), the text up to the MMA wrappers, the MMA wrappers (shared
/// likewise) and the rest. prelude() prints them in order; every piece after the first starts with a newline that is
/// not printed (piece()).
/// The core's first part, in pieces around the wrappers sm100 shares with sm90 (codegen/ptx/AsyncPrelude.h):
/// preludeCoreHead() joins them.
inline constexpr std::string_view kPreludeHead0 = R"cuda(
// ==== sm100 device primitives: tcgen05 (MMA, tensor memory), TMA, mbarrier (instruction wrappers only) ====
// Compiled for sm_100a by NVRTC and ptxas only: no SM100 GPU was available to run any of it.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM100_ALL)
#error "the sm100 prelude (tcgen05, tensor memory) needs --gpu-architecture=sm_100a"
#endif
namespace sm100 {

// A CUtensorMap as a kernel parameter (`const __grid_constant__ sm100::TensorMap`): 128 opaque bytes, 64-byte aligned,
// read by TMA from the parameter space.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
// The TMA descriptors of an attention kernel's Q, K and V tiles, its second parameter (`const __grid_constant__
// sm100::TensorMaps maps`), built per call by the runtime.
struct TensorMaps {
  TensorMap q, k, v;
};
// An mbarrier: one 64-bit word of shared memory.
using Mbarrier = unsigned long long;

// The 32-bit shared::cta address every shared-memory operand below takes.
__device__ __forceinline__ unsigned smemAddress(const void *ptr) {
  return static_cast<unsigned>(__cvta_generic_to_shared(ptr));
}

// ---- register budgets and named barriers of warp-specialized roles ----
namespace warpgroup {
)cuda";
inline constexpr std::string_view kPreludeHead1 = R"cuda(} // namespace warpgroup
// A subset of the block's warps (one warpgroup, the computing warpgroups) meets.
namespace namedBarrier {
// bar.sync on hardware barrier `id` (1-15; 0 is __syncthreads') until `threads` threads (a multiple of 32) arrived.
__device__ __forceinline__ void sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
} // namespace namedBarrier

namespace warp {
// True in exactly one lane of a converged warp: the lane that issues the warp's tcgen05.mma, commit or TMA copy.
__device__ __forceinline__ bool elect() {
  unsigned one;
  asm volatile("{\n"
               ".reg .pred elected;\n"
               "elect.sync _|elected, 0xffffffff;\n"
               "selp.u32 %0, 1, 0, elected;\n"
               "}\n"
               : "=r"(one));
  return one == 1u;
}
// Which quarter of tensor memory's 128 lanes this warp may access: warp w reaches lanes [32 (w % 4), +32). Shuffled
// from lane 0 so the compiler sees a warp-uniform value.
__device__ __forceinline__ unsigned laneQuarter() { return __shfl_sync(0xffffffffu, (threadIdx.x / 32u) % 4u, 0); }
} // namespace warp

)cuda";
inline constexpr std::string_view kPreludeHead2 = R"cuda(namespace fence {
// tcgen05 operations are asynchronous and not ordered by barriers on their own: a thread's tcgen05 work before a
// thread synchronization (bar.sync, an mbarrier arrive) is ordered before other threads' tcgen05 work after it only
// with beforeThreadSync() ahead of the synchronization and afterThreadSync() behind it (e.g. around the __syncthreads
// that publishes a tensor-memory allocation, or between the MMA warp's commit and the softmax warps' tcgen05.ld).
__device__ __forceinline__ void beforeThreadSync() {
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
}
__device__ __forceinline__ void afterThreadSync() { asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory"); }
} // namespace fence

)cuda";
inline constexpr std::string_view kPreludeHead3 = R"cuda(
)cuda";
inline constexpr std::string_view kPreludeHead4 = R"cuda(
// ---- shared-memory matrix descriptors (tcgen05 layout, PTX ISA Table 40) ----
// Every field but the start address is known when the kernel is generated: the host encodes it
// (codegen/sm100/DescriptorsSm100.h: version 0b001, LBO, SBO, base offset, swizzling mode) and prints the value;
// make() adds the tile's address as matrix-descriptor-encode(addr) = (addr & 0x3FFFF) >> 4 in bits 0-13.
namespace desc {
inline constexpr unsigned kAddressMask = 0x3FFFFu, kGranuleShift = 4u;
__device__ __forceinline__ unsigned long long make(unsigned long long fixedFields, unsigned smemAddr) {
  return fixedFields | static_cast<unsigned long long>((smemAddr & kAddressMask) >> kGranuleShift);
}
// The same descriptor `bytes` further (a k16 step inside a swizzled row: 32 bytes; the next column block): the start
// address field is the low bits, and tiles sit below 256 KB, so the addition never carries out of it.
__device__ __forceinline__ unsigned long long advance(unsigned long long d, unsigned bytes) {
  return d + static_cast<unsigned long long>(bytes >> kGranuleShift);
}
} // namespace desc

// ---- tensor memory (TMEM): 128 lanes x 512 columns of 32 bits per CTA ----
// An address is (lane << 16) | column. alloc/dealloc/relinquishAllocPermit and the loads and stores are
// warp-collective (.sync.aligned: every lane, converged, the same address); a warp reaches only the 32 lanes of its
// quarter (warp::laneQuarter()).
namespace tmem {
inline constexpr unsigned kLanes = 128u, kColumns = 512u, kMinAllocColumns = 32u, kLaneShift = 16u;
inline constexpr unsigned kLanesPerWarp = 32u;
template <unsigned kAllocColumns>
struct CheckAllocColumns {
  static_assert(kAllocColumns >= kMinAllocColumns && kAllocColumns <= kColumns &&
                    (kAllocColumns & (kAllocColumns - 1u)) == 0u,
                "tcgen05.alloc: a power of two of columns in [32, 512]");
  static constexpr unsigned value = kAllocColumns;
};
// Allocates columns for all 128 lanes and writes the base address to shared memory at `dst` (blocking until that
// many columns are free). One warp; publish the address with fence::beforeThreadSync(), a barrier, then
// fence::afterThreadSync() in the readers.
)cuda";

/// The core's first part: sm100's own text and the shared setmaxnreg, async-proxy fence, mbarrier and TMA
/// wrappers where they stand (after kPreludeHead0's "namespace warpgroup {", before the tcgen05 fences, ...).
inline std::string preludeCoreHead() {
  std::string text(kPreludeHead0);
  for (std::string_view part : {ptx::kSetmaxnregText, kPreludeHead1, ptx::kProxyFenceText, std::string_view("\n"),
                                kPreludeHead2, ptx::kMbarrierText, kPreludeHead3, ptx::kTmaText, kPreludeHead4})
    text += part;
  return text;
}
/// Allocation, free and relinquish of tensor memory for one CTA (cta_group::1), in namespace sm100::tmem.
inline constexpr std::string_view kTmemAllocText = R"cuda(
template <unsigned kAllocColumns>
__device__ __forceinline__ void alloc(unsigned *dst) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(smemAddress(dst)),
               "n"(CheckAllocColumns<kAllocColumns>::value)
               : "memory");
}
// Frees what alloc<kAllocColumns> returned at `base`; the same warp that allocated, after every tcgen05 use finished.
template <unsigned kAllocColumns>
__device__ __forceinline__ void dealloc(unsigned base) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(base),
               "n"(CheckAllocColumns<kAllocColumns>::value)
               : "memory");
}
// This CTA will allocate no more: other CTAs on the SM blocked in alloc may proceed.
__device__ __forceinline__ void relinquishAllocPermit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
}
)cuda";
inline constexpr std::string_view kPreludeCoreMiddle = R"cuda(
__device__ __forceinline__ unsigned address(unsigned base, unsigned lane, unsigned column) {
  return base + (lane << kLaneShift) + column;
}
// Column `column` of the first lane the calling warp reaches: the address its 32x32b loads and stores take.
__device__ __forceinline__ unsigned warpAddress(unsigned base, unsigned column) {
  return address(base, warp::laneQuarter() * kLanesPerWarp, column);
}
// Column `column` of lane 16 `half` of the calling warp's quarter: where a 16-lane access (Fragments) of the warp's
// rows [16 half, 16 half + 16) starts.
__device__ __forceinline__ unsigned warpHalfAddress(unsigned base, unsigned half, unsigned column) {
  return address(base, warp::laneQuarter() * kLanesPerWarp + 16u * half, column);
}
// tcgen05.ld results may be read, and tcgen05.st sources rewritten, only after these.
__device__ __forceinline__ void waitLoad() { asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void waitStore() { asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory"); }
// Keeps the compiler from moving uses of loaded registers above waitLoad(): it sees them redefined here.
template <int kCount>
__device__ __forceinline__ void fenceRegisters(unsigned (&r)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i)
    asm volatile("" : "+r"(r[i])::"memory");
}
// tcgen05.ld/st .32x32b.xN (printed per N by tmemAccessText): thread t of the warp moves lane (lane of taddr) + t,
// columns [column of taddr, + N), one 32-bit register each.
template <int kWidth>
struct Access32x32b {
  static_assert(kWidth != kWidth, "this tcgen05 32x32b width was not printed into the prelude");
};
// Register tiles in mma.sync's fragment layouts, one 16-row access (printed per count of n8 tiles by
// fragmentAccessText; layouts in codegen/sm100/InstructionsSm100.h): loadC (.16x256b) reads 16 rows x 8 kTiles columns
// of fp32 into C fragments c[nt][4], storeA (.16x128b) writes k16 steps of 16-bit pairs from A fragments a[k][4].
template <int kTiles>
struct Fragments {
  static_assert(kTiles != kTiles, "this tcgen05 16x256b/16x128b tile count was not printed into the prelude");
};
} // namespace tmem

// ---- tcgen05.mma.cta_group::1.kind::f16: D (TMEM, fp32 or f16) += A · B, issued by one thread for the CTA ----
// `idesc` is the 32-bit instruction descriptor (Table 42: types, majors, N >> 3, M >> 4), encoded on the host;
// `accumulate` 0 overwrites D (the first k16 step). .kind::f16 covers f16 and bf16 inputs: the descriptor says which.
// Completion is asynchronous: commit() makes an mbarrier track every MMA this thread issued before it.
namespace mma {
// A and B from shared memory (Q·Kᵀ into S).
)cuda";
/// tcgen05.mma.cta_group::1.kind::f16, SS and TS forms, in namespace sm100::mma.
inline constexpr std::string_view kMmaIssueText = R"cuda(
__device__ __forceinline__ void f16SS(unsigned dTmem, unsigned long long aDesc, unsigned long long bDesc,
                                      unsigned idesc, unsigned accumulate) {
  asm volatile("{\n"
               ".reg .pred accumulate;\n"
               "setp.ne.u32 accumulate, %4, 0;\n"
               "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, accumulate;\n"
               "}\n" ::"r"(dTmem),
               "l"(aDesc), "l"(bDesc), "r"(idesc), "r"(accumulate)
               : "memory");
}
// A from tensor memory, B from shared memory (P·V: P written over S as 16-bit pairs, one k16 step = 8 columns).
__device__ __forceinline__ void f16TS(unsigned dTmem, unsigned aTmem, unsigned long long bDesc, unsigned idesc,
                                      unsigned accumulate) {
  asm volatile("{\n"
               ".reg .pred accumulate;\n"
               "setp.ne.u32 accumulate, %4, 0;\n"
               "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, accumulate;\n"
               "}\n" ::"r"(dTmem),
               "r"(aTmem), "l"(bDesc), "r"(idesc), "r"(accumulate)
               : "memory");
}
)cuda";
inline constexpr std::string_view kPreludeCoreTail = R"cuda(
// The mbarrier gets one arrival once every tcgen05.mma this thread issued so far has completed (its D written, its
// shared-memory operands read): S ready for the softmax, a K/V slot free for the producer.
__device__ __forceinline__ void commit(Mbarrier *bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(smemAddress(bar))
               : "memory");
}
} // namespace mma

// ---- register packing: two fp32 values rounded to nearest into one 32-bit register, `lo` in the low half ----
namespace pack {
__device__ __forceinline__ unsigned bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ unsigned f16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
} // namespace pack

} // namespace sm100
)cuda";

using codegen::hexFloatLiteral;

/// `sm100::math::exp2Poly3(x)` (the common text, codegen/common/Exp2Poly.h) and its packed form `exp2Poly3x2(a, b)`
/// (two values through FADD2/FFMA2), with the common coefficients and constants.
inline std::string exp2PolyText() {
  std::string text = exp2PolyScalarText("sm100");
  text += R"cuda(// The same on two values at once with sm_100's packed fp32 instructions (add/sub/fma .f32x2: FADD2, FFMA2), as FA4
// issues it; lane by lane the same operations as exp2Poly3. In place: a and b become 2^a and 2^b.
__device__ __forceinline__ unsigned long long splat(float value) {
  const unsigned long long bits = __float_as_uint(value);
  return (bits << 32) | bits;
}
__device__ __forceinline__ void exp2Poly3x2(float &a, float &b) {
  unsigned long long x, shifted, whole, fraction, p;
  asm("mov.b64 %0, {%1, %2};\n" : "=l"(x) : "f"(fmaxf(a, kExp2MinInput)), "f"(fmaxf(b, kExp2MinInput)));
  asm("add.rm.f32x2 %0, %1, %2;\n" : "=l"(shifted) : "l"(x), "l"(splat(kExp2RoundingShift)));
  asm("sub.rn.f32x2 %0, %1, %2;\n" : "=l"(whole) : "l"(shifted), "l"(splat(kExp2RoundingShift)));
  asm("sub.rn.f32x2 %0, %1, %2;\n" : "=l"(fraction) : "l"(x), "l"(whole));
  asm("fma.rn.f32x2 %0, %1, %2, %3;\n" : "=l"(p) : "l"(splat(kExp2C3)), "l"(fraction), "l"(splat(kExp2C2)));
  asm("fma.rn.f32x2 %0, %1, %2, %3;\n" : "=l"(p) : "l"(p), "l"(fraction), "l"(splat(kExp2C1)));
  asm("fma.rn.f32x2 %0, %1, %2, %3;\n" : "=l"(p) : "l"(p), "l"(fraction), "l"(splat(kExp2C0)));
  unsigned pLo, pHi, shiftedLo, shiftedHi;
  asm("mov.b64 {%0, %1}, %2;\n" : "=r"(pLo), "=r"(pHi) : "l"(p));
  asm("mov.b64 {%0, %1}, %2;\n" : "=r"(shiftedLo), "=r"(shiftedHi) : "l"(shifted));
  a = __uint_as_float(pLo + (shiftedLo << kExp2MantissaBits));
  b = __uint_as_float(pHi + (shiftedHi << kExp2MantissaBits));
}
} // namespace sm100::math
)cuda";
  return text;
}

/// Whether `width` is an N of tcgen05.ld/st .32x32b.xN.
inline bool isTmemAccessWidth(int width) {
  return std::find(kTmemAccessWidths.begin(), kTmemAccessWidths.end(), width) != kTmemAccessWidths.end();
}

/// The `sm100::tmem::Access32x32b<width>` specialization: load (tcgen05.ld) and store (tcgen05.st) of `width`
/// registers. A width that tcgen05 does not have prints an #error naming it, so the NVRTC compile fails with it.
inline std::string tmemAccessText(int width) {
  const std::string n = std::to_string(width);
  if (!isTmemAccessWidth(width))
    return "#error \"tcgen05.ld/st .32x32b.xN: N = " + n + " is not a power of two in [1, 128]\"\n";
  // Operand k of the register list, and the register it binds.
  std::vector<std::string> slots, loadBindings, storeBindings;
  for (int i = 0; i < width; ++i) {
    slots.push_back("%" + std::to_string(i));
    loadBindings.push_back("\"=r\"(r[" + std::to_string(i) + "])");
    storeBindings.push_back("\"r\"(r[" + std::to_string(i) + "])");
  }
  const auto joined = [](const std::vector<std::string> &items) {
    std::string out;
    for (const std::string &item : items)
      out.append(out.empty() ? "" : ", ").append(item);
    return out;
  };
  const std::string addressSlot = "%" + n; // the address follows the registers in both forms
  const std::string shape = ".32x32b.x" + n + ".b32";
  std::string text = "namespace sm100::tmem {\ntemplate <>\nstruct Access32x32b<" + n + "> {\n";
  text += "  static __device__ __forceinline__ void load(unsigned taddr, unsigned (&r)[" + n + "]) {\n";
  text +=
      "    asm volatile(\"tcgen05.ld.sync.aligned" + shape + " {" + joined(slots) + "}, [" + addressSlot + "];\\n\"\n";
  text += "                 : " + joined(loadBindings) + "\n                 : \"r\"(taddr));\n  }\n";
  text += "  static __device__ __forceinline__ void store(unsigned taddr, const unsigned (&r)[" + n + "]) {\n";
  text +=
      "    asm volatile(\"tcgen05.st.sync.aligned" + shape + " [" + addressSlot + "], {" + joined(slots) + "};\\n\"\n";
  text += "                 :: " + joined(storeBindings) + ", \"r\"(taddr)\n                 : \"memory\");\n  }\n";
  return text + "};\n} // namespace sm100::tmem\n";
}

/// Whether `tiles` is an n8-tile count of sm100::tmem::Fragments (kFragmentAccessTiles).
inline bool isFragmentAccessTiles(int tiles) {
  return std::find(kFragmentAccessTiles.begin(), kFragmentAccessTiles.end(), tiles) != kFragmentAccessTiles.end();
}

/// The `sm100::tmem::Fragments<tiles>` specialization: loadC of `tiles` C fragments (tcgen05.ld.16x256b.x<tiles>, 4
/// registers a tile), fenceC (its registers redefined after waitLoad, as fenceRegisters), storeC of as many C fragments
/// back (tcgen05.st.16x256b.x<tiles>: O rescaled in place) and storeA of tiles / 2 A
/// fragments (tcgen05.st.16x128b.x<tiles>, 2 registers a tile). A count that is not one prints an #error naming it.
inline std::string fragmentAccessText(int tiles) {
  const std::string n = std::to_string(tiles);
  if (!isFragmentAccessTiles(tiles))
    return "#error \"tcgen05 16x256b/16x128b fragments: " + n + " n8 tiles is not one of 2, 4, 8, 16, 32\"\n";
  std::string loadSlots, loadBindings, fenceBindings, storeCBindings, storeSlots, storeBindings;
  for (int i = 0; i < 4 * tiles; ++i) {
    const std::string element = "c[" + std::to_string(i / 4) + "][" + std::to_string(i % 4) + "]";
    loadSlots += (i ? ", %" : "%") + std::to_string(i);
    loadBindings += (i ? ", \"=f\"(" : "\"=f\"(") + element + ")";
    fenceBindings += (i ? ", \"+f\"(" : "\"+f\"(") + element + ")";
    storeCBindings += "\"f\"(" + element + "), ";
  }
  for (int i = 0; i < 2 * tiles; ++i) {
    storeSlots += (i ? ", %" : "%") + std::to_string(i);
    storeBindings += "\"r\"(a[" + std::to_string(i / 4) + "][" + std::to_string(i % 4) + "]), ";
  }
  std::string text = "namespace sm100::tmem {\ntemplate <>\nstruct Fragments<" + n + "> {\n";
  text += "  static __device__ __forceinline__ void loadC(unsigned taddr, float (&c)[" + n + "][4]) {\n";
  text += "    asm volatile(\"tcgen05.ld.sync.aligned.16x256b.x" + n + ".b32 {" + loadSlots + "}, [%" +
          std::to_string(4 * tiles) + "];\\n\"\n";
  text += "                 : " + loadBindings + "\n                 : \"r\"(taddr));\n  }\n";
  text += "  static __device__ __forceinline__ void fenceC(float (&c)[" + n + "][4]) {\n";
  text += "    asm volatile(\"\" : " + fenceBindings + " :: \"memory\");\n  }\n";
  text += "  static __device__ __forceinline__ void storeC(unsigned taddr, const float (&c)[" + n + "][4]) {\n";
  text += "    asm volatile(\"tcgen05.st.sync.aligned.16x256b.x" + n + ".b32 [%" + std::to_string(4 * tiles) + "], {" +
          loadSlots + "};\\n\"\n";
  text += "                 :: " + storeCBindings + "\"r\"(taddr)\n                 : \"memory\");\n  }\n";
  text += "  static __device__ __forceinline__ void storeA(unsigned taddr, const unsigned (&a)[" +
          std::to_string(tiles / 2) + "][4]) {\n";
  text += "    asm volatile(\"tcgen05.st.sync.aligned.16x128b.x" + n + ".b32 [%" + std::to_string(2 * tiles) + "], {" +
          storeSlots + "};\\n\"\n";
  text += "                 :: " + storeBindings + "\"r\"(taddr)\n                 : \"memory\");\n  }\n";
  return text + "};\n} // namespace sm100::tmem\n";
}

/// The cluster-pair primitives (printed after the core for kernels of `tile.cta_pair` blocks only, so that every other
/// kernel's text stays as it was): a cluster of two CTAs along x, CTA 0 of the pair (the leader) issuing the pair's
/// tcgen05.mma.cta_group::2. A kernel uses either these tcgen05 forms or the core's cta_group::1 ones, never both
/// (ptxas does not accept both groups in one kernel).
inline constexpr std::string_view kPairPrelude = R"cuda(
// ==== sm100 cluster-pair primitives: tcgen05 .cta_group::2 (M = 256 across the two CTAs of a cluster), mbarriers and
// TMA across the pair. Compiled for sm_100a by NVRTC and ptxas only: no SM100 GPU was available to run any of it. ====
namespace sm100::pair {
inline constexpr unsigned kLeader = 0u;         // the CTA of the pair whose MMA warp issues the pair's MMAs
inline constexpr unsigned short kBothCtas = 3u; // a multicast mask: both CTAs of the cluster
// This CTA's rank in its cluster (0 or 1).
__device__ __forceinline__ unsigned ctaRank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// The shared::cluster address of `local`'s counterpart in the CTA of rank `rank` (mapa): the same offset in its
// shared memory.
__device__ __forceinline__ unsigned mapTo(const void *local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smemAddress(local)), "r"(rank));
  return remote;
}
// Every non-exited thread of both CTAs: its earlier accesses released, the other CTA's acquired. Before the first
// remote arrival (the barriers initialized in both CTAs) and before exit (no CTA leaves while the other may still
// arrive on its barriers or its MMAs read its shared memory).
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
// One arrival on the mbarrier at cluster address `bar` (its CTA's or the other's), release at cluster scope.
__device__ __forceinline__ void arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also expects `bytes` more of TMA traffic, on the mbarrier at cluster address `bar`. Relaxed: it
// hands over no data of this thread (the copies' bytes complete the phase), so it needs no release fence (a release
// at cluster scope is a MEMBAR.ALL.GPU in the SASS).
__device__ __forceinline__ void arriveExpectTx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Blocks until the phase of this parity completed, acquire at cluster scope (arrivals of the other CTA's threads).
__device__ __forceinline__ void wait(Mbarrier *bar, unsigned parity) {
  asm volatile("{\n"
               ".reg .pred done;\n"
               "retry:\n"
               "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra retry;\n"
               "}\n" ::"r"(smemAddress(bar)),
               "r"(parity)
               : "memory");
}
// A TMA tile into this CTA's shared memory whose bytes count on the mbarrier at cluster address `bar`, which may be
// the other CTA's (.cta_group::2): both CTAs' operand halves complete on the leader's barrier.
__device__ __forceinline__ void load5d(void *dst, const TensorMap *map, unsigned bar, int column, int row, int block,
                                       int head, int batch) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2"
               " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(smemAddress(dst)),
               "l"(map), "r"(column), "r"(row), "r"(block), "r"(head), "r"(batch), "r"(bar)
               : "memory");
}
// Tensor memory for the pair: one warp of each CTA, the same warp index, allocates the same columns in both CTAs'
// tensor memory (the base written to `dst` in each), and frees them; relinquishAllocPermit as the core's.
using tmem::CheckAllocColumns;
)cuda";
/// The cluster pair's text between its allocation wrappers and its MMA wrappers, and after them.
inline constexpr std::string_view kPairPreludeMiddle = R"cuda(
// tcgen05.mma.cta_group::2.kind::f16, M = 256: one thread of the leader issues it for both CTAs. The descriptors and
// tensor-memory addresses name the same offsets in both CTAs: each CTA holds 128 rows of A (Q in shared memory, or P
// in its tensor memory) and half of B's N (K's keys for Q·Kᵀ, V's columns for P·V); D is each CTA's 128 rows x N in
// its own tensor memory. The instruction descriptor's M and N are the pair's.
)cuda";
inline constexpr std::string_view kPairPreludeTail = R"cuda(
// One arrival on the mbarrier at `bar`'s offset in every CTA of `ctaMask` once every tcgen05.mma this thread issued
// completed (both CTAs' D written, both CTAs' shared-memory operands read).
__device__ __forceinline__ void commit(Mbarrier *bar, unsigned short ctaMask) {
  asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;\n" ::
                   "r"(smemAddress(bar)),
               "h"(ctaMask)
               : "memory");
}
} // namespace sm100::pair
)cuda";

/// The prelude of a kernel whose tensor-memory loads and stores use `tmemWidths` (.32x32b, each printed once) and
/// `fragmentTiles` (register tiles in fragment layouts, each count printed once).
/// `text` (the core's cta_group::1 wrappers) for CTA group `group`: every "cta_group::1" made "cta_group::<group>".
inline std::string forCtaGroup(std::string_view text, int group) {
  std::string out(text);
  const std::string one = "cta_group::1", other = "cta_group::" + std::to_string(group);
  for (size_t at = out.find(one); at != std::string::npos; at = out.find(one, at + other.size()))
    out.replace(at, one.size(), other);
  return out;
}

/// A prelude piece without the newline its raw string starts with.
constexpr std::string_view piece(std::string_view text) { return text.substr(1); }

inline std::string prelude(std::span<const int> tmemWidths, std::span<const int> fragmentTiles = {},
                           bool ctaPair = false) {
  std::string text = preludeCoreHead();
  text += piece(kTmemAllocText);
  text += piece(kPreludeCoreMiddle);
  text += piece(kMmaIssueText);
  text += piece(kPreludeCoreTail);
  if (ctaPair) {
    text += kPairPrelude;
    text += forCtaGroup(piece(kTmemAllocText), 2);
    text += piece(kPairPreludeMiddle);
    text += forCtaGroup(piece(kMmaIssueText), 2);
    text += piece(kPairPreludeTail);
  }
  text += exp2PolyText();
  std::vector<int> printed;
  for (int width : tmemWidths) {
    if (std::find(printed.begin(), printed.end(), width) != printed.end())
      continue;
    printed.push_back(width);
    text += tmemAccessText(width);
  }
  printed.clear();
  for (int tiles : fragmentTiles) {
    if (std::find(printed.begin(), printed.end(), tiles) != printed.end())
      continue;
    printed.push_back(tiles);
    text += fragmentAccessText(tiles);
  }
  return text;
}

} // namespace flashtile::codegen::sm100

#endif // FLASHTILE_CODEGEN_SM100_PRELUDESM100_H
