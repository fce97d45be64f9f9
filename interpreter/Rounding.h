//===- Rounding.h - fp32 values rounded to the program's 16-bit dtype -----===//
//
// The interpreter computes in fp32 and rounds where the GPU stores 16-bit values: inputs, P before P·V, O.
// No MLIR dependency: reference implementations in tests use the same helpers.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_ROUNDING_H
#define FLASHTILE_INTERPRETER_ROUNDING_H

namespace flashtile::interp {

/// The nearest bfloat16 value (ties to even), as a float. NaN stays NaN, overflow gives ±inf.
float roundToBf16(float x);
/// The nearest IEEE binary16 value (ties to even, subnormals kept), as a float. Overflow gives ±inf.
float roundToF16(float x);

using RoundFn = float (*)(float);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_ROUNDING_H
