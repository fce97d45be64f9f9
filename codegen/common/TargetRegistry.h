//===- TargetRegistry.h - instruction families as plug-ins ----------------===//
//
// A target is an instruction family (sm80: mma.sync, ldmatrix, cp.async; sm90: wgmma, TMA, mbarriers; sm100:
// tcgen05, TMEM) in its own folder, `codegen/<family>/`, registered here (codegen/Registry.cpp holds one line per
// family). What the passes need of it (its archs and limits, checkShape, smemBytes) is the target interface,
// passes/Target/TargetFamily.h; a family here adds the printer of its tile ops (TileTarget.h). tile-lower-to-target
// and the CUDA printer find it by name; no code outside codegen/<family>/ includes its headers. MLIR-free.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_TARGETREGISTRY_H
#define FLASHTILE_CODEGEN_COMMON_TARGETREGISTRY_H

#include "codegen/common/BackwardTarget.h"
#include "codegen/common/TileTarget.h"
#include "passes/Target/TargetFamily.h"

#include <memory>
#include <string_view>

namespace flashtile::codegen {

using target::ArchLimits;
using target::archLimits;
using target::MmaShape;
using target::targetNames;

/// An instruction family with the printer of its tile ops.
class TargetFamily : public target::TargetFamily {
public:
  /// The printer of `shape`'s tile ops; checkShape(shape) must have passed.
  virtual std::unique_ptr<TileTarget> createPrinter(const KernelShape &shape) const = 0;
  /// The instruction-level printer of the backward programs of `shape` (BackwardTarget.h; checkShape(shape)
  /// passed), or null when the family prints no backward.
  virtual std::unique_ptr<BackwardTarget> createBackwardPrinter(const KernelShape &) const { return nullptr; }
};

/// Registers `family` with the target registry (passes/Target/TargetFamily.h), its printer with it.
void registerTarget(std::unique_ptr<TargetFamily> family);
/// Removes the family named `name` from both registries (tests that register one of their own take it out again).
void unregisterTarget(std::string_view name);
/// The family named `name` with its printer, or null.
const TargetFamily *lookupTarget(std::string_view name);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_TARGETREGISTRY_H
