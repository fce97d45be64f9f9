// HostRotary.h — rotary embedding (RoPE) of 16-bit rows on the host, for the checks of KV-cache calls with
// rotary_cos/rotary_sin (`flashtile run --rotary-dim`, the KV-cache GPU tests): the tables, and the rotation computed
// as the kernels compute it (fp32 products and sum, each rounded, then to the nearest 16-bit value, ties to even), so
// that a rotated row can be compared bit for bit.
#ifndef FLASHTILE_TOOLS_REFERENCE_HOSTROTARY_H
#define FLASHTILE_TOOLS_REFERENCE_HOSTROTARY_H

#include "GpuReference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace flashtile::reference {

/// The nearest bf16 or f16 value of `x` (ties to even; NaN stays NaN, overflow gives infinity), as bits.
inline uint16_t floatToLow(float x, DType dtype) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if (dtype == DType::BF16) {
    if ((u & 0x7fffffffu) > 0x7f800000u)
      return uint16_t((u >> 16) | 0x40u);
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u)
    return uint16_t(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) // 65520 and up round to infinity
    return uint16_t(sign | 0x7c00u);
  if (a >= 0x38800000u) { // a normal f16: rebias the exponent, round 13 bits away
    const uint32_t r = a - 0x38000000u;
    return uint16_t(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  const int exponent = int(a >> 23);
  if (exponent < 102)
    return uint16_t(sign);
  const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
  const int shift = 126 - exponent;
  const uint32_t q = mantissa >> shift, rest = mantissa & ((1u << shift) - 1u), tie = 1u << (shift - 1);
  return uint16_t(sign | (q + ((rest > tie || (rest == tie && (q & 1u))) ? 1u : 0u)));
}

/// RoPE tables of `seqlenRo` positions (base 10000), seqlenRo x rotaryDim / 2 values of `dtype` each.
inline void ropeTables(int seqlenRo, int rotaryDim, DType dtype, std::vector<uint16_t> &cos,
                       std::vector<uint16_t> &sin) {
  const int half = rotaryDim / 2;
  cos.resize(size_t(seqlenRo) * half);
  sin.resize(cos.size());
  for (int pos = 0; pos < seqlenRo; ++pos)
    for (int i = 0; i < half; ++i) {
      const double angle = pos * std::pow(10000.0, -2.0 * i / rotaryDim);
      cos[size_t(pos) * half + i] = floatToLow(float(std::cos(angle)), dtype);
      sin[size_t(pos) * half + i] = floatToLow(float(std::sin(angle)), dtype);
    }
}

/// Rotates one row (`headDim` 16-bit values of `dtype`) in place at table row `pos`: pair i of the first rotaryDim
/// columns, (2i, 2i + 1) when `interleaved`, else (i, i + rotaryDim / 2), turns by (cos, sin)[pos][i].
inline void rotateRow(uint16_t *row, int pos, const std::vector<uint16_t> &cos, const std::vector<uint16_t> &sin,
                      int rotaryDim, bool interleaved, DType dtype) {
  const int half = rotaryDim / 2;
  for (int i = 0; i < half; ++i) {
    const int c0 = interleaved ? 2 * i : i, c1 = interleaved ? 2 * i + 1 : i + half;
    const float a = lowToFloat(row[c0], dtype), b = lowToFloat(row[c1], dtype);
    const float c = lowToFloat(cos[size_t(pos) * half + i], dtype), s = lowToFloat(sin[size_t(pos) * half + i], dtype);
    // volatile: each product rounded to fp32 on its own, never contracted into an FMA (as the kernels compute)
    volatile float ac = a * c, bs = b * s, as = a * s, bc = b * c;
    row[c0] = floatToLow(ac - bs, dtype);
    row[c1] = floatToLow(as + bc, dtype);
  }
}

} // namespace flashtile::reference

#endif // FLASHTILE_TOOLS_REFERENCE_HOSTROTARY_H
