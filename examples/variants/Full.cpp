//===- Full.cpp - no mask: every query attends every key ------------------===//
#include "Variants.h"

namespace flashtile::variants {

// No hooks at all: the program's defaults (all keys attended, no mask) are plain attention.
Variant full() { return Variant("none"); }

} // namespace flashtile::variants
