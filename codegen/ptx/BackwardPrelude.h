//===- BackwardPrelude.h - the device primitives the backward adds --------===//
//
// Printed after the fragment prelude (FragmentPrelude.h) in backward modules: instruction-level helpers only — a
// 16-bit pair read back as two floats, a sum over a warp's lanes and over a block, the deterministic mode's turns.
// The family adds its fp32 reductions into global memory and its copies (BackwardTarget::prelude: codegen/sm80,
// codegen/sm90). The kernels' loops, copies, barriers and masking are generated from their IR (BackwardEmitter.cpp).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_PTX_BACKWARDPRELUDE_H
#define FLASHTILE_CODEGEN_PTX_BACKWARDPRELUDE_H

#include "codegen/ptx/FragmentPrelude.h"

namespace flashtile::codegen {

inline constexpr std::string_view kBackwardPreludeText = R"cuda(
// ==== $ns backward primitives: 16-bit pairs to fp32, warp and block sums, fp32 reductions into global memory,
// the deterministic mode's turns ====
namespace $ns {

inline constexpr float kPosInf = __builtin_bit_cast(float, 0x7f800000u); // +infinity

// The two 16-bit values of a 32-bit word (`lo` the lower column) as floats.
__device__ __forceinline__ void unpackBf16x2(unsigned w, float &lo, float &hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpackF16x2(unsigned w, float &lo, float &hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}\n"
      : "=f"(lo), "=f"(hi)
      : "r"(w));
}

// The sum of `x` over the 32 lanes of a warp, in every lane.
__device__ __forceinline__ float warpSum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The sum of `x` over kWarps warps (the first of the block), in thread 0, in one fixed order (each warp's butterfly,
// then the warps ascending); `scratch` holds a float a warp. Every thread of those warps calls it; `barrier`
// synchronizes them (the block's __syncthreads where they are the whole block).
template <int kWarps, typename Barrier>
__device__ __forceinline__ float blockSum(float x, float *scratch, Barrier barrier) {
  x = warpSum(x);
  barrier(); // the scratch's last readers are done
  if (threadIdx.x % 32 == 0)
    scratch[threadIdx.x / 32] = x;
  barrier();
  float sum = 0.f;
  if (threadIdx.x == 0)
    for (int w = 0; w < kWarps; ++w)
      sum += scratch[w];
  return sum;
}
template <int kWarps> __device__ __forceinline__ float blockSum(float x, float *scratch) {
  return blockSum<kWarps>(x, scratch, [] { __syncthreads(); });
}

// Deterministic mode's turns: one thread waits until the counter says `turn` (ld.acquire: what the blocks before
// wrote is visible after it), and after the block's adds, publishes the next turn (red.release). A waiter only waits
// for blocks scheduled before it (the emitter's comments say why), so the waits end.
__device__ __forceinline__ void waitTurn(const int *counter, int turn) {
  int now;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(now) : "l"(counter) : "memory");
  } while (now != turn);
}
__device__ __forceinline__ void passTurn(int *counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter) : "memory");
}

// Deterministic mode's rotated walk, for programs whose every K/V tile's block walks every Q tile (tile.full_walk):
// block n of N (K/V tiles) starts at Q tile floor(n·Q / N) of Q and wraps, so the blocks of a (batch, head) reach a
// Q tile one after another instead of all at once. A tile's turns go in the order the blocks reach it: first the
// last block whose walk starts at or before it, i_t = min(N - 1, ceil((t + 1)·N / Q) - 1), then i_t - 1, ..., 0,
// N - 1, ..., i_t + 1 (the blocks that reach it after wrapping). A block then waits for blocks of the same (batch,
// head) above and below its own index, so all N must be resident at once: rotatedWalkFits keeps N to half the SMs
// (%nsmid), leaving the other half to whatever else runs on the GPU; past it the walk stays ascending and the turns
// descending.
__device__ __forceinline__ bool rotatedWalkFits(int kvTiles) {
  unsigned sms;
  asm("mov.u32 %0, %%nsmid;\n" : "=r"(sms));
  return 2 * kvTiles <= static_cast<int>(sms);
}
__device__ __forceinline__ int rotatedWalkStart(int kvTile, int kvTiles, int qTiles) {
  return static_cast<int>(static_cast<long long>(kvTile) * qTiles / kvTiles);
}
// Step `step` (in [lo, hi)) of a walk over Q tiles [lo, hi) started `start` tiles in.
__device__ __forceinline__ int rotatedWalkTile(int step, int start, int lo, int hi) {
  const int tile = step + start;
  return tile < hi ? tile : lo + (tile - lo) % (hi - lo);
}
__device__ __forceinline__ int rotatedTurn(int qTile, int kvTile, int kvTiles, int qTiles) {
  const int first = min(kvTiles - 1, static_cast<int>(((long long)(qTile + 1) * kvTiles + qTiles - 1) / qTiles) - 1);
  return (first - kvTile + kvTiles) % kvTiles;
}

)cuda";

/// The backward primitives in namespace `ns` (the family's fragment primitives'), then the family's own
/// (`familyText`: its fp32 reductions into global memory and its copies, BackwardTarget.h), in the same namespace.
inline std::string backwardPrelude(std::string_view ns, std::string_view familyText) {
  std::string text(kBackwardPreludeText);
  text.append(familyText).append("} // namespace $ns\n");
  return inNamespace(text, ns);
}

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_PTX_BACKWARDPRELUDE_H
