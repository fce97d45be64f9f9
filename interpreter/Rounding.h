//===- Rounding.h - fp32 values rounded to the program's dtype ------------===//
//
// The interpreter computes in fp32 and rounds where the GPU stores narrow values: inputs, P before P·V, O.
// No MLIR dependency: reference implementations in tests use the same helpers.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_ROUNDING_H
#define FLASHTILE_INTERPRETER_ROUNDING_H

namespace flashtile::interp {

/// The nearest bfloat16 value (ties to even), as a float. NaN stays NaN, overflow gives ±inf.
float roundToBf16(float x);
/// The nearest IEEE binary16 value (ties to even, subnormals kept), as a float. Overflow gives ±inf.
float roundToF16(float x);
/// The nearest float8_e4m3fn value (ties to even, subnormals kept), as a float, saturating as
/// `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)` (PTX cvt.rn.satfinite.e4m3x2.f32) does: a magnitude past
/// the largest finite value (448), infinity included, gives ±448; NaN stays NaN. e4m3fn has no infinity.
float roundToE4m3(float x);
/// The largest finite float8_e4m3fn magnitude.
inline constexpr float kE4m3MaxFinite = 448.0f;

using RoundFn = float (*)(float);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_ROUNDING_H
