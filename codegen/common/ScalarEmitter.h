//===- ScalarEmitter.h - scalar IR as C expressions and statements --------===//
//
// The target-independent half of CUDA printing: names for SSA values, arith/math ops as C, tile.dim and
// tile.param as kernel-argument reads. Used for the kernel body (loop bounds, KV-range rules, copy predicates)
// and for the variant's regions, printed as __device__ functions.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_SCALAREMITTER_H
#define FLASHTILE_CODEGEN_COMMON_SCALAREMITTER_H

#include "codegen/common/CudaWriter.h"
#include "passes/IR/TileDialect.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

#include <optional>
#include <string>
#include <vector>

namespace flashtile::codegen {

/// C identifiers, unique among the scopes currently open (sibling scopes may reuse a name).
class NameScopes {
public:
  NameScopes() { push(); }
  void push() { scopes.emplace_back(); }
  void pop() { scopes.pop_back(); }
  /// Marks `name` as taken in the innermost scope.
  void reserve(llvm::StringRef name) { scopes.back().insert(name); }
  /// `hint` if no open scope uses it, else `hint1`, `hint2`, ...; reserved in the innermost scope.
  std::string unique(llvm::StringRef hint);

private:
  bool taken(llvm::StringRef name) const;
  std::vector<llvm::StringSet<>> scopes;
};

/// Helper functions the printed expressions call; each is printed once, ahead of the kernel, when used.
struct ScalarHelpers {
  bool ceilDiv = false, floorDiv = false;
  /// Their CUDA definitions (empty when none is used).
  std::string definitions() const;
};

/// A C expression; `atom` when it needs no parentheses as an operand (a name, a literal, a call).
struct CExpr {
  std::string text;
  bool atom = true;
  /// Ops folded into it along its longest chain (0 for a name or a literal).
  int depth = 0;
  /// The text, parenthesized unless atomic: safe as an operand of any C operator.
  std::string operand() const { return atom ? text : "(" + text + ")"; }
};

/// Prints scalar ops into a CudaWriter. An op whose one result has one use in the same block, and no name hint,
/// is folded into its user's expression unless that makes the expression more than kMaxFoldDepth ops deep; other
/// results become `const T name = ...;` lines. Constants, tile.dim and tile.param are always folded (`64`,
/// `p.seqlenK`, `p.variantParams[0]`); tile.input reads its array (`static_cast<const float *>(p.inputs[0])[h]`).
class ScalarEmitter {
public:
  /// `isolated`: when set, the region being printed as a function of its own; values it uses from outside are
  /// re-materialized inside it (constants, tile.dim, tile.param and pure scalar ops on them).
  ScalarEmitter(CudaWriter &w, NameScopes &names, ScalarHelpers &helpers, tile::FuncOp func,
                mlir::Region *isolated = nullptr)
      : w(w), names(names), helpers(helpers), func(func), isolated(isolated) {}

  /// Expressions nest at most this many folded ops: a chain of N single-use ops (a variant's hook of N additions)
  /// becomes a named value every kMaxFoldDepth ops, not one expression N parentheses deep for NVRTC to take apart.
  static constexpr int kMaxFoldDepth = 16;
  /// A variant's hook is called once per score element (128 calls in an fa2 kernel) and NVRTC optimizes every
  /// inlined copy: a function body is inlined only up to this cost (a hook of 256 chained tanh took NVRTC 49 s
  /// inlined, 1 s called). An op that expands to branchy library code (expf, logf, sqrtf, IEEE and integer
  /// division) costs kLibraryCallCost, any other 1: an fa2 kernel that took NVRTC 5 s took 10 s with 3 chained
  /// logf inlined, 28 s with 7.
  static constexpr int kMaxInlinedCost = 32;
  static constexpr int kLibraryCallCost = 16;

  /// Whether `op` is a scalar op this emitter prints (arith, math, tile.dim, tile.param, tile.input).
  static bool isScalarOp(mlir::Operation *op);
  /// The C type of a scalar type (bool, int, long long, float), or failure.
  static mlir::FailureOr<std::string> cType(mlir::Type type);

  /// Gives `value` a fixed C expression (block arguments, names a caller declared).
  void bind(mlir::Value value, std::string expr) { exprs[value] = CExpr{std::move(expr), true}; }
  /// The key coordinate `kv` arrives as kvTile + kvStep (kvStep a small constant once the score loop is unrolled):
  /// int-to-float conversions of kv, A - kv, kv - A or their abs (A not computed from kv; floatOfKey) print as
  /// float arithmetic on static_cast<float>(A - kvTile) and kvStep, not as a conversion per score.
  void splitKey(mlir::Value kv, std::string tile, std::string step) {
    keyValue = kv;
    keyTile = std::move(tile);
    keyStep = std::move(step);
  }
  /// Whether `op` (arith.sitofp) converts kv, A - kv, kv - A or the abs of one of them, with A not computed from
  /// kv; sets `a` (null for kv alone), `keyFirst` (kv - A) and `abs`.
  /// Whether `v` is `target` or computed from it (through defining ops).
  static bool dependsOn(mlir::Value v, mlir::Value target);
  /// Whether `op` or an op it is computed from reads a variant input (tile.input).
  static bool readsInput(mlir::Operation *op);
  static bool floatOfKey(mlir::Operation *op, mlir::Value kv, mlir::Value &a, bool &keyFirst, bool &abs);
  /// Declares `value` as `name` (made unique) when it gets printed, instead of folding it.
  void hint(mlir::Value value, llvm::StringRef name) { hints.try_emplace(value, name.str()); }
  /// Whether emit(op) prints a declaration (rather than folding the op into its user's expression).
  bool declares(mlir::Operation *op) const;
  /// Prints one scalar op (isScalarOp): a declaration, or nothing when it is folded into its user.
  mlir::LogicalResult emit(mlir::Operation *op);
  /// Prints `const T name = value;` with `name` made unique; returns the name.
  mlir::FailureOr<std::string> declare(mlir::Type type, const CExpr &value, llvm::StringRef name);
  /// The expression of a value already printed (or re-materialized in an isolated region); emits an error
  /// at `user` when there is none.
  mlir::FailureOr<CExpr> expr(mlir::Value value, mlir::Operation *user);
  /// The qualifiers of a function whose body is what this emitter printed: "__device__ __forceinline__ ", or
  /// "__device__ __noinline__ " past kMaxInlinedCost.
  std::string functionQualifiers() const;

private:
  /// `op` as an expression over its operands' expressions, with its depth.
  mlir::FailureOr<CExpr> print(mlir::Operation *op);
  mlir::FailureOr<CExpr> printText(mlir::Operation *op);
  /// The float of a key distance, printed as a per-row part minus a per-key constant (printText's first case).
  std::optional<mlir::FailureOr<CExpr>> printKeyDistance(mlir::Operation *op);
  /// The depth `op`'s expression has when its operands' (printed already) are folded into it.
  int foldDepth(mlir::Operation *op) const;
  mlir::FailureOr<CExpr> materialize(mlir::Value value, mlir::Operation *user);

  CudaWriter &w;
  NameScopes &names;
  ScalarHelpers &helpers;
  tile::FuncOp func;
  mlir::Region *isolated;
  llvm::DenseMap<mlir::Value, CExpr> exprs;
  llvm::DenseMap<mlir::Value, std::string> hints;
  mlir::Value keyValue; ///< splitKey's kv, or null
  std::string keyTile, keyStep;
  int nextTemp = 0;    ///< suffix of the next unhinted name (t0, t1, ...)
  int printedCost = 0; ///< of the ops printed so far, folded or declared (kMaxInlinedCost)
};

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_SCALAREMITTER_H
