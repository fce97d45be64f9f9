//===- ProgramKinds.h - what a tile program computes, as plug-ins --------===//
//
// A tile program declares its kind (`tile.func ... {kind = "forward"}`, forward when omitted): the forward
// attention, and as they are added, the backward's preprocess, main and postprocess programs. A kind names the
// program's structure — which tensors it reads and writes, which state it carries — and checks it: the verifier
// of `tile-verify-program` is the kind's. Kernels carry their program's kind into KernelInfo and the cache key
// (flashtile/runtime/KernelInfo.h: kProgramKinds lists the kinds the runtime dispatches), so a module of one kind
// never serves a call of another. docs/architecture.md, "How to add a program kind", walks through adding one.
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
  std::string name;    // `kind` on tile.func, KernelInfo::kind
  std::string summary; // one line: what a program of this kind computes
  /// The whole-program checks of `tile-verify-program` (op verifiers check each op): diagnostics on failure.
  mlir::LogicalResult (*verify)(FuncOp func) = nullptr;
};

/// Registers `kind` (a second kind of the same name replaces nothing and is reported by programKindNames' test).
void registerProgramKind(ProgramKind kind);
/// The kind named `name`, or null.
const ProgramKind *lookupProgramKind(llvm::StringRef name);
/// Registered kind names, sorted.
std::vector<std::string> programKindNames();

/// The forward attention: one Q tile's rows against every K/V tile through the online softmax, O and LSE stored.
inline constexpr llvm::StringLiteral kForwardProgram = "forward";

} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_PROGRAMKINDS_H
