//===- Passes.h - tile dialect passes -------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_PASSES_H
#define FLASHTILE_PASSES_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "passes/IR/TileDialect.h"

namespace flashtile::tile {
#define GEN_PASS_DECL
#include "passes/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_TRANSFORMS_PASSES_H
