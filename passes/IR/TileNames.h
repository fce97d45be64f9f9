//===- TileNames.h - the alphabets of names printed into generated code ---===//
//
// Variant, parameter and input names reach generated CUDA (comments, function names), manifests (`key=value`
// lines) and error messages. The verifier, the CUDA printer and the DSL accept the same alphabets, defined here.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILENAMES_H
#define FLASHTILE_PASSES_IR_TILENAMES_H

#include "llvm/ADT/StringRef.h"

#include <cstddef>

namespace flashtile::tile {

/// Longest variant, parameter or input name.
inline constexpr size_t kMaxNameLength = 128;
/// A variant parameter or input name: a C identifier ([A-Za-z_][A-Za-z0-9_]*) of at most kMaxNameLength characters.
bool isIdentifierName(llvm::StringRef name);
/// A variant name: [A-Za-z_] then [A-Za-z0-9_.-], at most kMaxNameLength characters. Neither alphabet can end a
/// comment, a string or a line of generated code, or break a manifest's `key=value` lines.
bool isVariantName(llvm::StringRef name);

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILENAMES_H
