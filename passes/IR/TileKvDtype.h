//===- TileKvDtype.h - K and V of another element type than Q -------------===//
//
// `tile.kv_dtype = f8E4M3FN` (a type attribute of a forward tile.func whose dtype is bf16 or f16, set by the DSL's
// ProgramOptions::kvDtype): K and V are float8_e4m3fn while Q is 16-bit — an e4m3 KV cache read by a decode step
// (flash_attn_with_kvcache with FA3's k_descale and v_descale, docs/fp8.md). K and V tiles (loads, buffers) carry
// the attribute's type; Q·Kᵀ and P·V run in the program's 16-bit dtype on K and V widened exactly (every e4m3 value
// is a bf16 and an f16 value), so P stays of the program's dtype. The call's k_descale joins the softmax scale and
// its v_descale multiplies the finalized O, as in an e4m3 program (tile.scale, tile.finalize). Without the
// attribute K and V are of the program's dtype. Only the decode schedule's KV-cache kernels read such programs
// (Schedule::readsKvDtype).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEKVDTYPE_H
#define FLASHTILE_PASSES_IR_TILEKVDTYPE_H

#include "mlir/IR/Types.h"

namespace flashtile::tile {
class FuncOp;
inline constexpr const char *kKvDtypeAttr = "tile.kv_dtype";
/// `tile.kv_convert_registers` (a unit attribute of a tile.func with `tile.kv_dtype`, set by the decode schedule's
/// `kv-convert 1`): the kernel reads the 8-bit K and V tiles from shared memory straight into MMA operand registers
/// (ldmatrix of the 8-bit rows) and converts them there, instead of widening each tile into a 16-bit shared-memory
/// tile first. The program's semantics do not change (the conversion is exact either way); only the printed kernel.
inline constexpr const char *kKvConvertRegistersAttr = "tile.kv_convert_registers";
/// `tile.kv_f16_mma` (a unit attribute beside tile.kv_convert_registers in a bf16 program, set by the decode
/// schedule's `kv-f16-mma 1`): the MMAs run in f16, not bf16: the e4m3 fragments are converted to f16 (one conversion
/// a pair, exact), Q's fragments to f16 scaled by a power of two a warp (S unscaled after Q·Kᵀ, exactly) and P is
/// rounded to f16 (more precise than bf16 in P's range). The output stays bf16.
inline constexpr const char *kKvF16MmaAttr = "tile.kv_f16_mma";
/// The element type of the program's K and V tiles: `tile.kv_dtype` where set, else the program's dtype.
mlir::Type kvDtypeOf(FuncOp func);
/// Whether K and V are of another type than Q (the function has `tile.kv_dtype`).
bool hasKvDtype(FuncOp func);
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEKVDTYPE_H
