// ReferenceKernels.cpp — the CUDA source of the reference kernels (see GpuReference.h for what they compute).
// referenceSource() is ~150 lines because it is one raw string of CUDA (the kernels' text), not C++ logic.
#include "ReferenceKernels.h"

#define FLASHTILE_REFERENCE_STR2(...) #__VA_ARGS__
#define FLASHTILE_REFERENCE_STR(...) FLASHTILE_REFERENCE_STR2(__VA_ARGS__)

namespace flashtile::reference::detail {

const std::string &referenceSource() {
  static const std::string source = std::string(FLASHTILE_REFERENCE_STR(FLASHTILE_REFERENCE_REF_PARAMS)) + "\n" +
                                    FLASHTILE_REFERENCE_STR(FLASHTILE_REFERENCE_FILL_PARAMS) + "\n" + R"CUDA(
typedef unsigned short u16;
#define NEG_INF __uint_as_float(0xff800000u)

// bf16 -> f32 is exact (the bf16 bits are the top half of the f32); f16 -> f32 is exact too.
__device__ __forceinline__ float lowToFloat(u16 bits, int isBf16) {
  if (isBf16)
    return __uint_as_float(((unsigned)bits) << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
  return f;
}
// f32 -> dtype, round to nearest even.
__device__ __forceinline__ u16 floatToLow(float x, int isBf16) {
  u16 r;
  if (isBf16)
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float roundToLow(float x, int isBf16) { return lowToFloat(floatToLow(x, isBf16), isBf16); }

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Fills the logical B x S x H x D elements of a strided tensor with N(0, 1) values (Box-Muller on a counter hash),
// rounded to the dtype. Padding between rows/heads is not written.
extern "C" __global__ void fill_normal(FillParams p) {
  const long long n = (long long)p.batch * p.seqlen * p.heads * p.headDim;
  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += (long long)gridDim.x * blockDim.x) {
    long long r = idx;
    const int d = (int)(r % p.headDim);
    r /= p.headDim;
    const int h = (int)(r % p.heads);
    r /= p.heads;
    const int s = (int)(r % p.seqlen);
    const int b = (int)(r / p.seqlen);
    const unsigned long long z = splitmix64(p.seed ^ splitmix64((unsigned long long)idx));
    const float u1 = ((float)(z >> 40) + 1.0f) * 5.9604644775390625e-8f; // (0, 1]
    const float u2 = (float)(z & 0xffffffULL) * 5.9604644775390625e-8f;  // [0, 1)
    const float x = sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
    p.dst[b * p.stride[0] + s * p.stride[1] + h * p.stride[2] + d] = floatToLow(x, p.isBf16);
  }
}

// Sum (isMax = 0) or max (isMax = 1) over the block; every thread gets the result. red: one float per warp.
__device__ float blockReduce(float x, float *red, int isMax) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, offset);
    x = isMax ? fmaxf(x, y) : x + y;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0)
    red[warp] = x;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < warps; ++w)
    r = isMax ? fmaxf(r, red[w]) : r + red[w];
  __syncthreads(); // red may be reused right after
  return r;
}

// One block per (query row i, head h, batch b): grid (Sq, Hq, B), blockDim a multiple of 32.
// Dynamic shared memory: headDim floats (q) + seqlenK floats (scores / probabilities) + 32 floats (reductions).
extern "C" __global__ void attention_reference(RefParams p) {
  extern __shared__ float smem[];
  float *qRow = smem;
  float *score = smem + p.headDim;
  float *red = score + p.seqlenK;

  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int hk = h / (p.headsQ / p.headsKv);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const int D = p.headDim, Dv = p.headDimV;

  // Keys this row may see: all of them, or j <= i + Sk - Sq (possibly none).
  long long keys = p.seqlenK;
  if (p.causal) {
    const long long last = (long long)i + p.seqlenK - p.seqlenQ;
    keys = last < 0 ? 0 : (last + 1 < keys ? last + 1 : keys);
  }
  const int n = (int)keys;

  float *oRow = p.o + (((long long)b * p.seqlenQ + i) * p.headsQ + h) * Dv;
  float *lse = p.lse + ((long long)b * p.headsQ + h) * p.seqlenQ + i;
  if (n == 0) { // fully masked row (uniform across the block)
    for (int d = tid; d < Dv; d += blockDim.x)
      oRow[d] = 0.0f;
    if (tid == 0)
      *lse = NEG_INF;
    return;
  }

  const u16 *q = p.q + b * p.qStride[0] + (long long)i * p.qStride[1] + h * p.qStride[2];
  for (int d = tid; d < D; d += blockDim.x)
    qRow[d] = lowToFloat(q[d], p.isBf16);
  __syncthreads();

  // S_j = scale * (q . k_j): one warp per key, lanes split the head dim.
  for (int j = warp; j < n; j += warps) {
    const u16 *k = p.k + b * p.kStride[0] + (long long)j * p.kStride[1] + hk * p.kStride[2];
    float acc = 0.0f;
    for (int d = lane; d < D; d += 32)
      acc += qRow[d] * lowToFloat(k[d], p.isBf16);
    for (int offset = 16; offset > 0; offset >>= 1)
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    float s = acc * p.scale;
    if (p.lowp)
      s = roundToLow(s, p.isBf16);
    if (lane == 0)
      score[j] = s;
  }
  __syncthreads();

  // Softmax in fp32: m = max S, P_j = exp(S_j - m), l = sum P_j, LSE = m + log l.
  float m = NEG_INF;
  for (int j = tid; j < n; j += blockDim.x)
    m = fmaxf(m, score[j]);
  m = blockReduce(m, red, 1);
  float l = 0.0f;
  for (int j = tid; j < n; j += blockDim.x) {
    const float e = expf(score[j] - m);
    score[j] = e; // each j is read and written by the same thread
    l += e;
  }
  l = blockReduce(l, red, 0); // also a barrier: every score[j] is written
  if (p.lowp) {
    for (int j = tid; j < n; j += blockDim.x)
      score[j] = roundToLow(score[j] / l, p.isBf16); // the framework's softmax output, in the dtype
    __syncthreads();
  }

  // O = P V (/ l in fp32 mode): each thread owns output dims.
  for (int d = tid; d < Dv; d += blockDim.x) {
    const u16 *v = p.v + b * p.vStride[0] + hk * p.vStride[2] + d;
    float acc = 0.0f;
    for (int j = 0; j < n; ++j)
      acc += score[j] * lowToFloat(v[(long long)j * p.vStride[1]], p.isBf16);
    oRow[d] = p.lowp ? roundToLow(acc, p.isBf16) : acc / l;
  }
  if (tid == 0)
    *lse = m + logf(l);
}
)CUDA";
  return source;
}

} // namespace flashtile::reference::detail
