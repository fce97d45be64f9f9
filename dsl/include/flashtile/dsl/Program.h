//===- Program.h - building the attention-forward tile program ------------===//
#ifndef FLASHTILE_DSL_PROGRAM_H
#define FLASHTILE_DSL_PROGRAM_H

#include "flashtile/dsl/Variant.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashtile {

/// The element type of Q, K and V. E4M3 is float8_e4m3fn (docs/fp8.md): forward programs only; O is stored in bf16
/// and the call's descales join the softmax scale (q, k) and the finalized O (v).
enum class ElementType { F16, BF16, E4M3 };

/// "f16", "bf16" or "e4m3": the spelling of specs, manifests and the CLI.
const char *elementTypeName(ElementType dtype);

/// Rotary position embedding of Q and of the keys a KV-cache call appends (flash_attn_with_kvcache's rotary_cos
/// and rotary_sin, passes/IR/TileRotary.h): pairs (i, i + rotary_dim / 2) (Halves, GPT-NeoX) or (2i, 2i + 1)
/// (Interleaved, GPT-J).
enum class RotaryMode { None, Halves, Interleaved };

struct ProgramOptions {
  ElementType dtype = ElementType::BF16;
  int headDim = 128;
  int headDimV = 128;
  /// Not None: Q's load carries `tile.rotary`, rows at consecutive positions when the variant masks (causal,
  /// windows: flash-attn's causal or local), else all at the first.
  RotaryMode rotary = RotaryMode::None;
  /// K and V's element type where it differs from dtype (`tile.kv_dtype`, passes/IR/TileKvDtype.h): E4M3 with a
  /// BF16 or F16 dtype, an e4m3 KV cache (flash_attn_with_kvcache with k_descale and v_descale; docs/fp8.md).
  /// Forward programs only. Unset: K and V are of dtype.
  std::optional<ElementType> kvDtype;
};

/// Registers the dialects tile programs use.
void loadProgramDialects(mlir::MLIRContext &context);

/// Builds `tile.func @attention` for a variant: load Q; for every K/V tile: S = Q·Kᵀ, scale, the variant's
/// score modifier and mask, online softmax, rescale, P·V; finalize; store O and LSE. Unscheduled: tile sizes
/// are `?`. Fails (with a diagnostic) when a hook is ill-typed, e.g. a mask that returns a float.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildAttentionProgram(mlir::MLIRContext &context, const Variant &variant, const ProgramOptions &options);

/// Builds the programs of a module kind (passes/IR/ProgramKinds.h) for a variant, every kind from the same hooks:
/// "forward" is buildAttentionProgram's; "backward" is three tile.funcs, in the order their kernels run:
///   @attention_bwd_preprocess (backward_preprocess): D = rowsum(dO∘O) of a Q tile;
///   @attention_bwd (backward_main): for a K/V tile, every Q tile i: S = Q_i·Kᵀ·scale, the score hook, the mask,
///     P = e^(S − LSE_i), dV += Pᵀ·dO_i, dP = dO_i·Vᵀ, dS = P∘(dP − D_i)·(d score_mod / d score)·scale,
///     dK += dSᵀ·Q_i, dq_accum[i] += dS·K; then dK and dV stored;
///   @attention_bwd_postprocess (backward_postprocess): dQ of a Q tile from its fp32 accumulator.
/// The score hook's derivative is the compiler's (passes/Transforms/DifferentiateScore.h): a hook it cannot
/// differentiate is an error naming the op. An unknown kind is an error naming the accepted ones.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> buildProgram(mlir::MLIRContext &context, const Variant &variant,
                                                                const ProgramOptions &options,
                                                                llvm::StringRef moduleKind);
/// The module kinds buildProgram accepts, sorted.
std::vector<std::string> moduleKinds();

/// The variant's identity for cache keys: its name plus a hash of the IR its hooks produce, so two different
/// lambdas under one name never share a kernel ("causal#9f1c...").
mlir::FailureOr<std::string> variantId(const Variant &variant);

/// FNV-1a, 64 bit, as 16 hex digits.
std::string hashHex(llvm::StringRef text);

} // namespace flashtile

#endif // FLASHTILE_DSL_PROGRAM_H
