//===- Exp2Poly.h - FA4's partial software exp2: coefficients, host twin, device text ===//
//
// FA4 computes a share of its exponentials on the FMA pipe instead of MUFU (ex2.approx), which the softmax otherwise
// saturates. 2^x = 2^j · 2^f with j = floor(x) and f = x - j in [0, 1): 2^j is added to the exponent bits, 2^f is a
// cubic in f evaluated with three FMAs (Horner). The device functions (printed by exp2PolyText from the constants
// below) and the host twin here compute the same fp32 operations; Exp2PolyTest measures the twin's error against
// std::exp2 (8.57e-5 relative at most over [-126, 8]). A family prints the text into kernels whose
// `tile.exp2_poly_share` (passes/IR/TileExp2Poly.h) is nonzero: sm90 (fa3's `exp2-poly-share` knob, measured on the
// H200) with the scalar form, sm100 (fa4's) with sm_100's packed fp32 instructions (compiled only: no SM100 GPU
// exists here).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_EXP2POLY_H
#define FLASHTILE_CODEGEN_COMMON_EXP2POLY_H

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace flashtile::codegen {

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

/// The host twin of the device's exp2Poly3: the same fp32 operations (floor(x) is exactly what the device's rounded
/// addition yields for |x| < 2^22; std::fma rounds once, as FFMA does).
inline float exp2Poly3(float x) {
  x = std::fmax(x, kExp2PolyMinInput);
  const float j = std::floor(x);
  const float f = x - j;
  const float p = std::fma(std::fma(std::fma(kExp2PolyC3, f, kExp2PolyC2), f, kExp2PolyC1), f, kExp2PolyC0);
  const uint32_t exponent = static_cast<uint32_t>(static_cast<int32_t>(j)) << kFloatMantissaBits;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p) + exponent);
}

/// A float as a CUDA hexadecimal literal ("0x1.63e658p-1f"): exact, so the device reads the host's value.
inline std::string hexFloatLiteral(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%af", static_cast<double>(value));
  return text;
}

/// `<ns>::math::exp2Poly3(x)` and `<ns>::math::exp2Poly3x2(a, b)` (both values' 2^x in place: the form
/// FragmentTiles::softmaxUpdate calls), with the constants above printed exactly. The pair form is two scalar calls:
/// a family with packed fp32 instructions (sm100) prints its own.
inline std::string exp2PolyScalarText(const std::string &ns) {
  std::string text = "namespace " + ns + "::math {\n";
  text += "// FA4's partial software exp2 (codegen/common/Exp2Poly.h has the derivation and the host twin): 2^x =\n"
          "// 2^floor(x) · p(x - floor(x)) with a cubic p on FMAs, for a share of the exponentials that would\n"
          "// otherwise queue on MUFU. Inputs are clamped to -127 (exp2(-inf) = +0); results are normal for x >= -126.\n";
  const auto constant = [&text](const char *name, float value) {
    text.append("inline constexpr float ").append(name).append(" = ").append(hexFloatLiteral(value)).append(";\n");
  };
  constant("kExp2C0", kExp2PolyC0);
  constant("kExp2C1", kExp2PolyC1);
  constant("kExp2C2", kExp2PolyC2);
  constant("kExp2C3", kExp2PolyC3);
  constant("kExp2MinInput", kExp2PolyMinInput);
  constant("kExp2RoundingShift", kExp2PolyRoundingShift);
  text += "inline constexpr unsigned kExp2MantissaBits = " + std::to_string(kFloatMantissaBits) + "u;\n";
  text += R"cuda(// floor(x) lands in the low mantissa bits of x + 1.5 * 2^23 rounded down; shifted by 23 they are
// 2^floor(x)'s exponent, added to p's bits (p is in [1, 2): its own exponent is 0).
__device__ __forceinline__ float exp2Poly3(float x) {
  x = fmaxf(x, kExp2MinInput);
  const float shifted = __fadd_rd(x, kExp2RoundingShift);
  const float fraction = x - (shifted - kExp2RoundingShift);
  const float p = __fmaf_rn(__fmaf_rn(__fmaf_rn(kExp2C3, fraction, kExp2C2), fraction, kExp2C1), fraction, kExp2C0);
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(shifted) << kExp2MantissaBits));
}
)cuda";
  return text;
}

/// exp2PolyScalarText with the pair form as two scalar calls, closing the namespace.
inline std::string exp2PolyText(const std::string &ns) {
  return exp2PolyScalarText(ns) + "__device__ __forceinline__ void exp2Poly3x2(float &a, float &b) {\n"
                                  "  a = exp2Poly3(a);\n"
                                  "  b = exp2Poly3(b);\n"
                                  "}\n"
                                  "} // namespace " +
         ns + "::math\n";
}

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_EXP2POLY_H
