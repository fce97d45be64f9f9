//===- Variants.h - attention variants written with the public DSL --------===//
//
// Each variant is a few lines in its own file: the same hooks a user writes. None touches a kernel or schedule.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_EXAMPLES_VARIANTS_H
#define FLASHTILE_EXAMPLES_VARIANTS_H

#include "flashtile/dsl/Variant.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashtile::variants {

/// Plain softmax(Q·Kᵀ·scale)·V: every query attends every key.
Variant full();
/// Causal, aligned to the bottom-right corner as flash-attn >= 2.1: query i sees keys j <= i + Sk - Sq.
Variant causal();
/// Causal, aligned to the top-left corner: query i sees keys j <= i ("causal_top_left").
Variant causalTopLeft();

/// flash-attn's window_size = (left, right): query i sees keys [i' - left, i' + right], i' = i + Sk - Sq, with -1
/// for an unbounded side ("sliding_window", params "left", "right"). Tiles outside every row's window are
/// skipped; tiles inside every row's window are not masked. Sizes must be whole numbers >= -1: other values
/// make the program (and Jit::add, and the JIT's per-call check of variantParams) fail, naming the size.
Variant slidingWindow(int left, int right);
/// Causal and a window of `left` keys before the diagonal, as flash-attn's causal=True with window_size=(left,
/// right) ("sliding_window_causal", params "left", "right"; right has no effect).
Variant slidingWindowCausal(int left);

/// flash-attn's softcap: score = cap·tanh(score / cap) on the scaled score, before masking ("softcap", param
/// "cap", which must be positive and finite).
Variant softcap(float cap);

/// The shape of ALiBi slopes: one per query head, or one per (batch, query head).
enum class SlopeShape { Heads, BatchHeads };
/// flash-attn's alibi_slopes: score += -slope · |i + Sk - Sq - j|. Input "slopes": fp32, shape (H) ("alibi") or
/// (B, H) row-major ("alibi_per_batch"); pass alibiSlopeCount(...) values.
Variant alibi(SlopeShape shape = SlopeShape::Heads);
/// The number of fp32 slopes alibi(shape) reads for a call: headsQ, or batch·headsQ.
int64_t alibiSlopeCount(SlopeShape shape, int batch, int headsQ);

/// Attention sinks (gpt-oss): input "sinks", fp32, shape (H), one logit per query head in the units of the
/// scaled scores, joins every row's softmax denominator and LSE with no value ("sinks"). A row that sees no key
/// gets O = 0 and LSE = sinks[h].
Variant sinks();

/// Causal attention inside packed documents: input "doc_start", int32, shape (B, Sk) row-major, the first token of
/// each token's document (non-decreasing, doc_start[b][t] <= t); query i (token i' = i + Sk - Sq) sees key j iff
/// doc_start[b][i'] <= j <= i' ("document_mask"). Other documents' tiles are skipped, tiles inside a document
/// are not masked. Varlen: shape (total_k), one entry per key row, positions within each sequence.
Variant documentMask();

/// For callers of the C++ and C APIs, which pass device pointers the kernel cannot measure: "" when `count`
/// elements are what input `input` of built-in variant `variant` reads in a call with these sizes, else a message
/// naming the input, the shape it needs and its element type. Varlen calls pass batch = 1 and seqlenK = total_k
/// (per-key inputs span the packed keys).
std::string checkInputLength(const std::string &variant, const std::string &input, int64_t count, int batch, int headsQ,
                             int seqlenK);

/// The built-in variants by name ("none", "causal", ...: names() lists them), for the CLI and the runtime.
/// Combinations registered too: "softcap_causal", "alibi_causal", "sinks_causal" (flashtile::both(x, causal())).
std::optional<Variant> byName(const std::string &name);
std::vector<std::string> names();

} // namespace flashtile::variants

#endif // FLASHTILE_EXAMPLES_VARIANTS_H
