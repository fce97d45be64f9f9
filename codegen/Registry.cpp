//===- Registry.cpp - the built-in instruction families -------------------===//
//
// One line per family: adding a target is a folder codegen/<family>/ plus its line here.
//===----------------------------------------------------------------------===//
#include "codegen/Registry.h"
#include "codegen/sm80/TileOpsSm80.h"
#include "codegen/sm90/TileOpsSm90.h"
#include "codegen/sm100/TileOpsSm100.h"

#include <mutex>

namespace flashtile::codegen {

void registerBuiltinTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerTarget(sm80::createFamily());
    registerTarget(sm90::createFamily());
    registerTarget(sm100::createFamily());
  });
}

} // namespace flashtile::codegen
