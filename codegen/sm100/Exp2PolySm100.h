//===- Exp2PolySm100.h - FA4's partial software exp2: coefficients, host twin ===//
//
// FA4 computes a share of its exponentials on the FMA pipe instead of MUFU (ex2.approx), which the softmax of two
// 128-row tiles otherwise saturates. 2^x = 2^j · 2^f with j = floor(x) and f = x - j in [0, 1): 2^j is added to the
// exponent bits, 2^f is a cubic in f evaluated with three FMAs (Horner). The device function (sm100::math::exp2Poly3
// and its packed form, printed by PreludeSm100.h from the constants below) and the host twin here compute the same
// fp32 operations; the unit test measures the twin's error against std::exp2 (README.md states the figure). The
// device forms have only been compiled for sm_100a (no SM100 GPU here).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM100_EXP2POLYSM100_H
#define FLASHTILE_CODEGEN_SM100_EXP2POLYSM100_H

#include <bit>
#include <cmath>
#include <cstdint>

namespace flashtile::codegen::sm100 {

/// p(f) = c0 + c1 f + c2 f² + c3 f³ ≈ 2^f on [0, 1]: c1..c3 minimize the maximum relative error |p(f) / 2^f - 1|
/// (Remez exchange on four alternation points: 0.0998, 0.4458, 0.8286, 1) with c0 fixed at 1, so that exp2(0) = 1
/// exactly (a row's maximum keeps P = 1) and exp2(-inf) = +0 exactly (see kExp2PolyMinInput). Rounded to fp32.
inline constexpr float kExp2PolyC0 = 1.0f;
inline constexpr float kExp2PolyC1 = 0x1.63e658p-1f; // 0.69511676
inline constexpr float kExp2PolyC2 = 0x1.d2378ap-3f; // 0.22764499
inline constexpr float kExp2PolyC3 = 0x1.3baaa6p-4f; // 0.07706704
/// The fit's maximum relative error in exact arithmetic (before fp32 rounding of coefficients and operations).
inline constexpr double kExp2PolyFitRelError = 8.56e-5;

/// Inputs are clamped to -127 first. Then j >= -127: at j = -127 the exponent field becomes 0 and the bits read as
/// the subnormal (p(f) - 1) · 2^-126, less than 2^-126 away from 2^x; at x = -inf, f = 0 and p = c0 = 1, so the result
/// is exactly +0. ex2.approx.ftz flushes all of [-127, -126) to +0 instead: both are below fp32's normal range, and
/// far below anything bf16/f16 P or an fp32 row sum can see. Results are normal for x in [-126, 128).
inline constexpr float kExp2PolyMinInput = -127.0f;
inline constexpr float kExp2PolyMinNormalInput = -126.0f;
/// The device form finds floor(x) without a conversion instruction: adding 1.5 · 2^23 rounded toward -inf leaves
/// floor(x) in the sum's low mantissa bits (the sum's ulp is 1 while |x| < 2^22), and shifting those bits by 23 puts
/// j in the exponent field with the sum's other bits shifted out.
inline constexpr float kExp2PolyRoundingShift = 0x1.8p23f;
inline constexpr int kFloatMantissaBits = 23;

/// The host twin of sm100::math::exp2Poly3: the same fp32 operations (floor(x) is exactly what the device's rounded
/// addition yields for |x| < 2^22; std::fma rounds once, as FFMA does).
inline float exp2Poly3(float x) {
  x = std::fmax(x, kExp2PolyMinInput);
  const float j = std::floor(x);
  const float f = x - j;
  const float p = std::fma(std::fma(std::fma(kExp2PolyC3, f, kExp2PolyC2), f, kExp2PolyC1), f, kExp2PolyC0);
  const uint32_t exponent = static_cast<uint32_t>(static_cast<int32_t>(j)) << kFloatMantissaBits;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p) + exponent);
}

} // namespace flashtile::codegen::sm100

#endif // FLASHTILE_CODEGEN_SM100_EXP2POLYSM100_H
