//===- Exp2PolySm100.h - FA4's partial software exp2 in the sm100 family ---===//
//
// The coefficients, constants and host twin are the common ones (codegen/common/Exp2Poly.h, shared with fa3's option
// on sm90); the sm100 prelude (PreludeSm100.h) prints the device forms from them, the pair form with sm_100's packed
// fp32 instructions. The device forms have only been compiled for sm_100a (no SM100 GPU here).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM100_EXP2POLYSM100_H
#define FLASHTILE_CODEGEN_SM100_EXP2POLYSM100_H

#include "codegen/common/Exp2Poly.h"

namespace flashtile::codegen::sm100 {
using codegen::exp2Poly3;
using codegen::kExp2PolyC0;
using codegen::kExp2PolyC1;
using codegen::kExp2PolyC2;
using codegen::kExp2PolyC3;
using codegen::kExp2PolyFitRelError;
using codegen::kExp2PolyMinInput;
using codegen::kExp2PolyMinNormalInput;
using codegen::kExp2PolyRoundingShift;
using codegen::kFloatMantissaBits;
} // namespace flashtile::codegen::sm100

#endif // FLASHTILE_CODEGEN_SM100_EXP2POLYSM100_H
