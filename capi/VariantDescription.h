//===- VariantDescription.h - variants described as data, e.g. from Python -===//
//
// A variant's hooks written in another language (the Python package traces them, FlexAttention-style) arrive as
// a JSON description of their expression graphs. parseVariantDescription checks it completely (names, node
// references, types) and returns a Variant whose hooks replay the graphs through the C++ DSL, so the program,
// its IR hash and its kernels are those of the same hooks written in C++.
//
// The format ("flashtile.variant.v1"):
//   {"format": "flashtile.variant.v1", "name": "softcap",
//    "params": [{"name": "cap", "value": 30, "min": 0, "min_exclusive": true, "max": 1e6, "integer": false}],
//    "inputs": [{"name": "slopes", "type": "f32"}],                       // "f32" | "i32"
//    "hooks": {"score": {"nodes": [...], "results": [n]}, "mask": ..., "kv_range": ..., "full_range": ...,
//              "sink": ...}}
// Every hook is optional. A hook's nodes are evaluated in order; a node refers to earlier nodes by index:
//   ["arg", i]                 the hook's argument i: score (score, b, h, q, kv), mask (b, h, q, kv),
//                              kv_range / full_range (first, last, b, h), sink (b, h)
//   ["size", "seqlen_q" | "seqlen_k"]                                     the hook's Sizes fields
//   ["dim", "batch" | "heads_q" | "heads_kv" | "key_offset"]              Sizes::batch() etc.
//   ["param", name]            p[name];  ["load", name, index]            p.load(name, index)
//   ["const", "f32" | "i32" | "i1", value]     value: a number, or "inf" / "-inf" for f32
//   [op, a, b]  op: add sub mul div min max lt le gt ge eq ne and or
//   [op, a]     op: neg not abs tanh exp exp2 log sqrt to_float to_int
//   ["select", cond, if_true, if_false]
// results: score and sink one f32 node, mask one i1 node, the ranges two i32 nodes (lo, hi). Parameter bounds
// (min, max, min_exclusive, integer) become the variant's validate hook; values are always checked finite.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CAPI_VARIANTDESCRIPTION_H
#define FLASHTILE_CAPI_VARIANTDESCRIPTION_H

#include "flashtile/dsl/Variant.h"
#include "flashtile/runtime/Status.h"

#include <cstddef>
#include <string_view>

namespace flashtile {

inline constexpr std::string_view kVariantDescriptionFormat = "flashtile.variant.v1";

/// What a description may ask for. Each limit is far beyond a real variant (the built-in ones have at most a few
/// dozen nodes per hook) and bounds the work and memory one description costs: parsing (the JSON parser recurses
/// once per nesting level), building the IR, and compiling it (MLIR and NVRTC) on a user's first call.
inline constexpr size_t kMaxDescriptionBytes = size_t(1) << 20;
/// Nesting of JSON arrays and objects; a description needs 5 (root, hooks, a hook, nodes, a node).
inline constexpr int kMaxDescriptionDepth = 32;
/// Nodes of one hook, and of all hooks together: NVRTC's time grows faster than linearly with a hook's size (a
/// chain of 1024 logf took it 58 s, of 4096 expf 380 s; of 256, seconds).
inline constexpr size_t kMaxHookNodes = 256;
inline constexpr size_t kMaxDescriptionNodes = 1024;
/// Entries of "rules".
inline constexpr size_t kMaxDescriptionRules = 64;

/// The variant `text` describes, or an error naming the offending field (e.g. "hooks.mask.nodes[3]: ...") or the
/// limit it exceeds. At most FLASHTILE_MAX_VARIANT_PARAMS params and FLASHTILE_MAX_VARIANT_INPUTS inputs (what a
/// kernel takes, KernelAbi.h).
StatusOr<Variant> parseVariantDescription(std::string_view text);

} // namespace flashtile

#endif // FLASHTILE_CAPI_VARIANTDESCRIPTION_H
