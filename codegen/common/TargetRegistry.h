//===- TargetRegistry.h - instruction families as plug-ins ----------------===//
//
// A target is an instruction family (sm80: mma.sync, ldmatrix, cp.async; sm90: wgmma, TMA, mbarriers; sm100:
// tcgen05, TMEM) in its own folder, `codegen/<family>/`, registered here (codegen/Registry.cpp holds one line per
// family). It names the architectures it runs on, checks whether a scheduled tile shape fits it, lays out shared
// memory and prints its tile ops (TileTarget.h). tile-lower-to-target and the CUDA printer find it by name; no
// code outside codegen/<family>/ includes its headers. MLIR-free.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_TARGETREGISTRY_H
#define FLASHTILE_CODEGEN_COMMON_TARGETREGISTRY_H

#include "codegen/common/TileTarget.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile::codegen {

/// An architecture a family runs on, with the per-block (opt-in) dynamic shared memory limit.
struct ArchLimits {
  std::string_view arch; ///< canonical name: what NVRTC compiles for and the runtime dispatches on
  int64_t maxSmemBytes = 0;
  /// Programmatic dependent launch (griddepcontrol; sm_90 and later): a launch may start while the one before it
  /// finishes, its kernel waiting for that grid where it reads its results.
  bool dependentLaunch = false;
};

/// The MMA instruction shape a family computes tiles with.
struct MmaShape {
  int m = 0, n = 0, k = 0;
};

class TargetFamily {
public:
  virtual ~TargetFamily() = default;
  /// "sm80": `#tile.target`'s isa.
  virtual std::string_view name() const = 0;
  /// One line: the instructions it uses.
  virtual std::string_view summary() const = 0;
  /// The canonical architectures it runs on.
  virtual const std::vector<ArchLimits> &archs() const = 0;
  virtual MmaShape mmaShape() const = 0;
  /// Why `shape` cannot be printed with this family, or nothing when it can (MMA granularity, dtype, stages).
  virtual std::optional<std::string> checkShape(const KernelShape &shape) const = 0;
  /// Dynamic shared memory of `shape`'s buffers in this family's layout (row padding, swizzle), in 64 bits.
  virtual int64_t smemBytes(const KernelShape &shape) const = 0;
  /// Whether its printer runs the asynchronous protocol: roles, barriers, copies into ring slots that arrive on
  /// barriers, and asynchronous MMAs (TileTarget's openRole ... mmaWait). Families that do not get programs with
  /// cp.async-style waits only.
  virtual bool asyncProtocol() const { return false; }
  /// The printer of `shape`'s tile ops; checkShape(shape) must have passed.
  virtual std::unique_ptr<TileTarget> createPrinter(const KernelShape &shape) const = 0;
};

/// The limits of `arch` in `family`, or null when the family does not run on it.
const ArchLimits *archLimits(const TargetFamily &family, std::string_view arch);

void registerTarget(std::unique_ptr<TargetFamily> family);
/// The family named `name`, or null.
const TargetFamily *lookupTarget(std::string_view name);
/// Registered family names, sorted.
std::vector<std::string> targetNames();

/// The canonical name of `arch` (runtime/ArchNames.h: sm_86 builds sm_80 kernels, sm_90 is sm_90a, ...), or nothing
/// when it is not an accepted name.
std::optional<std::string> canonicalArch(std::string_view arch);
/// "unknown arch 'x' (did you mean 'sm_90a'?); accepted: sm_80, sm_86, ..."
std::string unknownArchMessage(std::string_view arch);
/// The shared-memory limit of `family` on canonical `arch`, or nothing when the family does not run there.
std::optional<int64_t> maxSmemBytes(const TargetFamily &family, std::string_view arch);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_TARGETREGISTRY_H
