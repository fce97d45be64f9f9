//===- TileRotary.h - rotary position embedding of Q and the appended keys ===//
//
// `tile.rotary` (an attribute of the program's `tile.load q`, flash_attn_with_kvcache's rotary_cos/rotary_sin):
//   %q = tile.load q {tile.rotary = {interleaved = false, positions = "rows"}} : tensor<?x128xbf16>
// The loaded Q tile is rotated before any use (RoPE): the first rotary_dim columns of every row form rotary_dim / 2
// pairs — (2i, 2i + 1) when `interleaved` (GPT-J), (i, i + rotary_dim / 2) otherwise (GPT-NeoX) — and pair i of a
// row at position `pos` becomes (x0·cos − x1·sin, x0·sin + x1·cos) with cos = rotary_cos[pos][i], sin =
// rotary_sin[pos][i], computed in fp32 and rounded to the program's dtype; columns past rotary_dim are untouched.
// The tables (seqlen_ro x rotary_dim / 2, the program's dtype) and rotary_dim are kernel arguments (KernelAbi.h).
// Positions count from the keys the sequence held before this call's new ones, c = seqlen_k − seqlen_new (a KV
// cache's cache_seqlens[b]): query row i is at c + i with positions = "rows" (causal or windowed programs, whose
// rows are the last keys' queries) and every row at c with positions = "first". A position past the tables reads
// their last row (kernels never read outside them; the runtime checks what it can on the host).
// In a program that reads a KV cache (tile.kv_cache) the attribute also rotates the keys the append kernel writes
// into the cache: new key row i at c + i, the same pairs (values are not rotated), so that Q·Kᵀ sees positions.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEROTARY_H
#define FLASHTILE_PASSES_IR_TILEROTARY_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Operation.h"

#include <optional>

namespace flashtile::tile {

inline constexpr const char *kRotaryAttr = "tile.rotary";

/// What a `tile.rotary` attribute says.
struct Rotary {
  bool interleaved = false; ///< pairs (2i, 2i + 1); else (i, i + rotary_dim / 2)
  bool perRow = true;       ///< positions "rows": query row i at c + i; "first": every row at c
};

/// The attribute's value as the verifier accepts it, or a message saying what is wrong with it.
inline std::optional<Rotary> parseRotary(mlir::Attribute attr, std::string *error) {
  auto dict = mlir::dyn_cast_or_null<mlir::DictionaryAttr>(attr);
  auto interleaved = dict ? mlir::dyn_cast_or_null<mlir::BoolAttr>(dict.get("interleaved")) : mlir::BoolAttr();
  auto positions = dict ? mlir::dyn_cast_or_null<mlir::StringAttr>(dict.get("positions")) : mlir::StringAttr();
  if (!dict || dict.size() != 2 || !interleaved || !positions ||
      (positions.getValue() != "rows" && positions.getValue() != "first")) {
    *error = "must be {interleaved = true|false, positions = \"rows\"|\"first\"}";
    return std::nullopt;
  }
  return Rotary{interleaved.getValue(), positions.getValue() == "rows"};
}

/// The rotation of `op` (a tile.load), if it has one. Verified IR only (LoadOp::verify checks the attribute).
inline std::optional<Rotary> rotaryOf(mlir::Operation *op) {
  std::string error;
  mlir::Attribute attr = op->getAttr(kRotaryAttr);
  return attr ? parseRotary(attr, &error) : std::nullopt;
}

/// The dictionary attribute of `rotary`.
inline mlir::DictionaryAttr rotaryAttr(mlir::MLIRContext *context, const Rotary &rotary) {
  mlir::Builder b(context);
  return b.getDictionaryAttr({b.getNamedAttr("interleaved", b.getBoolAttr(rotary.interleaved)),
                              b.getNamedAttr("positions", b.getStringAttr(rotary.perRow ? "rows" : "first"))});
}

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEROTARY_H
