//===- Rounding.cpp - fp32 values rounded to bf16, f16 and e4m3 -----------===//
#include "interpreter/Rounding.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace flashtile::interp {

float roundToBf16(float x) {
  if (std::isnan(x))
    return x;
  // bf16 is the top half of an fp32: add half of the dropped part (minus one unless the kept part is odd, so
  // ties go to even) and truncate. A carry into the exponent is the correct rounding, up to infinity.
  uint32_t bits = std::bit_cast<uint32_t>(x);
  uint32_t keptLsb = (bits >> 16) & 1u;
  bits += 0x7fffu + keptLsb;
  return std::bit_cast<float>(bits & 0xffff0000u);
}

float roundToF16(float x) {
  constexpr int kMantissaBits = 10;
  constexpr int kMinNormalExp = -14;
  constexpr float kMaxFinite = 65504.0f;
  if (!std::isfinite(x))
    return x;
  int exp;
  std::frexp(x, &exp); // |x| = m·2^exp with m in [0.5, 1): the leading bit is worth 2^(exp-1)
  // Subnormals share the spacing of the smallest normal binade.
  int leadExp = std::max(exp - 1, kMinNormalExp);
  // Scaling by powers of two is exact here, so nearbyint (ties to even) is the only rounding.
  float r = std::ldexp(std::nearbyint(std::ldexp(x, kMantissaBits - leadExp)), leadExp - kMantissaBits);
  if (std::fabs(r) > kMaxFinite)
    return std::copysign(std::numeric_limits<float>::infinity(), x);
  return r;
}

float roundToE4m3(float x) {
  constexpr int kMantissaBits = 3;
  constexpr int kMinNormalExp = -6;
  if (std::isnan(x))
    return x;
  if (std::isinf(x))
    return std::copysign(kE4m3MaxFinite, x);
  int exp;
  std::frexp(x, &exp);
  int leadExp = std::max(exp - 1, kMinNormalExp);
  float r = std::ldexp(std::nearbyint(std::ldexp(x, kMantissaBits - leadExp)), leadExp - kMantissaBits);
  // Past 448 the next step (480) is e4m3fn's NaN encoding: satfinite clamps there instead.
  if (std::fabs(r) > kE4m3MaxFinite)
    return std::copysign(kE4m3MaxFinite, x);
  return r;
}

} // namespace flashtile::interp
