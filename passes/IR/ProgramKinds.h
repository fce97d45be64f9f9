//===- ProgramKinds.h - what a tile program computes, as plug-ins --------===//
//
// A tile program declares its kind (`tile.func ... {kind = "forward"}`, forward when omitted): the forward
// attention, and the backward's preprocess, main and postprocess programs. A kind names the program's structure —
// which tensors it reads and writes (its named tensor arguments), which state it carries — and checks it: the
// verifier of `tile-verify-program` is the kind's. A kind belongs to a module kind: the kernels of one call, compiled
// into one module (forward; backward = preprocess + main + postprocess). Modules carry their kind into KernelInfo
// and the cache key (flashtile/runtime/KernelInfo.h: kProgramKinds lists the module kinds the runtime dispatches),
// so a module of one kind never serves a call of another. docs/architecture.md, "How to add a program kind", walks
// through adding one.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_PROGRAMKINDS_H
#define FLASHTILE_PASSES_IR_PROGRAMKINDS_H

#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace flashtile::tile {

class FuncOp;

/// One kind of tile program.
struct ProgramKind {
  std::string name;    // `kind` on tile.func
  std::string summary; // one line: what a program of this kind computes
  /// The whole-program checks of `tile-verify-program` (op verifiers check each op): diagnostics on failure.
  mlir::LogicalResult (*verify)(FuncOp func) = nullptr;
  /// The kind of the compiled module its programs are kernels of (KernelInfo::kind, one of the runtime's
  /// kProgramKinds): a module is one call's kernels, so the backward's three program kinds make one "backward"
  /// module and the forward is a module of its own.
  std::string module;
  /// Its named tensor arguments (TileEnums.td's Operand and Output names): the tensors it loads, of those the
  /// instance's own tile (loaded without a tile index, as the forward's Q), and the outputs it stores or
  /// accumulates into. The op verifiers of tile.load, tile.store and tile.accumulate check them.
  std::vector<std::string> reads, own, writes;

  bool readsTensor(llvm::StringRef tensor) const;
  bool ownsTensor(llvm::StringRef tensor) const;
  bool writesTensor(llvm::StringRef tensor) const;
};

/// Registers `kind` (a second kind of the same name replaces nothing and is reported by programKindNames' test).
void registerProgramKind(ProgramKind kind);
/// The kind named `name`, or null.
const ProgramKind *lookupProgramKind(llvm::StringRef name);
/// Registered kind names, sorted.
std::vector<std::string> programKindNames();

/// The module kinds of the registered program kinds, sorted and distinct (the runtime's kProgramKinds).
std::vector<std::string> moduleKindNames();
/// The registered program kinds whose module kind is `module`, in the order their kernels run (registration order).
std::vector<const ProgramKind *> programKindsOfModule(llvm::StringRef module);
/// `list` as "a, b, c" (for diagnostics naming a kind's tensors).
std::string joinNames(const std::vector<std::string> &list);

/// The forward attention: one Q tile's rows against every K/V tile through the online softmax, O and LSE stored.
inline constexpr llvm::StringLiteral kForwardProgram = "forward";

/// The backward's module and its three program kinds (docs/backward.md), in the order their kernels run:
/// D = rowsum(dO∘O) per Q tile; per K/V tile, the Q tiles that see it (dK, dV in the program's accumulators, dQ
/// added into an fp32 accumulator); dQ converted per Q tile.
inline constexpr llvm::StringLiteral kBackwardModule = "backward";
inline constexpr llvm::StringLiteral kBackwardPreprocess = "backward_preprocess";
inline constexpr llvm::StringLiteral kBackwardMain = "backward_main";
inline constexpr llvm::StringLiteral kBackwardPostprocess = "backward_postprocess";

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_PROGRAMKINDS_H
