"""The built-in variants, written in Python with the same hooks as examples/variants/*.cpp.

Each builds the same program as its C++ twin: tests/python checks that both have the same id (name#hash of the
IR) and print the same tile IR and CUDA. They are also what flash_attn_func composes when a call needs a
combination no built-in name covers (softcap with a window, ALiBi with a window, ...).
"""

from __future__ import annotations

from typing import Callable, Dict, List

from . import dsl
from .variant import Variant, both

# Every integer up to here is exact in f32: window sizes are f32 kernel arguments.
MAX_WINDOW = float(1 << 24)


def full() -> Variant:
    """No hooks: every query attends every key ("none")."""
    return Variant("none")


def causal() -> Variant:
    """Causal, aligned to the bottom-right corner (flash-attn >= 2.1): query i sees keys j <= i + Sk - Sq."""
    return (
        Variant("causal")
        .mask(lambda c, p: c.kv <= c.q_aligned())
        .kv_range(lambda q, p: dsl.Range.up_to(q.last_aligned() + 1))
        .full_range(lambda q, p: dsl.Range.up_to(q.first_aligned() + 1))
    )


def causal_top_left() -> Variant:
    """Causal aligned to the top-left corner: query i sees keys 0..i ("causal_top_left")."""
    return (
        Variant("causal_top_left")
        .mask(lambda c, p: c.kv <= c.q)
        .kv_range(lambda q, p: dsl.Range.up_to(q.last + 1))
        .full_range(lambda q, p: dsl.Range.up_to(q.first + 1))
    )


def sliding_window(left: int = 256, right: int = 0) -> Variant:
    """flash-attn's window_size=(left, right): query i (i' = i + Sk - Sq) sees keys [i' - left, i' + right];
    -1 leaves a side unbounded ("sliding_window", params left, right)."""

    def mask(c, p):
        i, lo, hi = c.q_aligned(), dsl.to_int(p["left"]), dsl.to_int(p["right"])
        return ((lo < 0) | (c.kv >= i - lo)) & ((hi < 0) | (c.kv <= i + hi))

    def kv_range(q, p):
        lo, hi = dsl.to_int(p["left"]), dsl.to_int(p["right"])
        return dsl.Range(dsl.select(lo < 0, lo.literal(0), q.first_aligned() - lo),
                         dsl.select(hi < 0, q.sizes.seqlen_k, q.last_aligned() + hi + 1))

    def full_range(q, p):
        lo, hi = dsl.to_int(p["left"]), dsl.to_int(p["right"])
        return dsl.Range(dsl.select(lo < 0, lo.literal(0), q.last_aligned() - lo),
                         dsl.select(hi < 0, q.sizes.seqlen_k, q.first_aligned() + hi + 1))

    bounds = dict(min=-1, max=MAX_WINDOW, integer=True)
    accepted = f"a whole number from -1 (unbounded) to {int(MAX_WINDOW)}"

    def side(name):  # the C++ variant's rule, in the runtime's rule language
        return f"((isinteger({name}) && ({name} >= (-1))) && ({name} <= {int(MAX_WINDOW)}))"

    return (
        Variant("sliding_window")
        .param("left", left, **bounds)
        .param("right", right, **bounds)
        .rule(side("left"), accepted)
        .rule(side("right"), accepted)
        .mask(mask)
        .kv_range(kv_range)
        .full_range(full_range)
    )


def sliding_window_causal(left: int = 256) -> Variant:
    """Causal with a window of `left` keys before the diagonal ("sliding_window_causal", params left, right)."""
    return both(sliding_window(left, -1), causal(), "sliding_window_causal")


def softcap(cap: float = 30.0) -> Variant:
    """flash-attn's softcap: score = cap·tanh(score / cap) before masking ("softcap", param cap > 0)."""

    def score(s, c, p):
        cap_ = p["cap"]
        return cap_ * dsl.tanh(s * (1.0 / cap_))

    return (
        Variant("softcap")
        .param("cap", cap, min=0.0, min_exclusive=True)
        .rule("((cap > 0) && isfinite(cap))", "a positive, finite number")
        .score(score)
    )


def alibi(per_batch: bool = False) -> Variant:
    """flash-attn's alibi_slopes: score -= slope·|i + Sk - Sq - j|; input "slopes", fp32 (H) ("alibi") or (B, H)
    ("alibi_per_batch")."""

    def score(s, c, p):
        index = c.b * c.sizes.heads_q() + c.h if per_batch else c.h
        slope = p.load("slopes", index)
        return s - slope * dsl.to_float(dsl.abs(c.q_aligned() - c.kv))

    return Variant("alibi_per_batch" if per_batch else "alibi").input("slopes", "f32").score(score)


def sinks() -> Variant:
    """Attention sinks (gpt-oss): input "sinks", fp32 (H), one logit per query head ("sinks")."""
    return Variant("sinks").input("sinks", "f32").sink(lambda c, p: p.load("sinks", c.h))


def document_mask() -> Variant:
    """Causal attention inside packed documents: input "doc_start", int32 (B, Sk) (varlen: (total_k)), the first
    token of each token's document ("document_mask")."""

    def doc_start(p, aligned, sizes):
        sk = sizes.seqlen_k
        token = dsl.minimum(dsl.maximum(aligned, aligned.literal(0)), sk - 1)
        return p.load("doc_start", sizes.key_offset() + token)

    def mask(c, p):
        i = c.q_aligned()
        return (c.kv <= i) & (c.kv >= doc_start(p, i, c.sizes))

    return (
        Variant("document_mask")
        .input("doc_start", "i32")
        .mask(mask)
        .kv_range(lambda q, p: dsl.Range(doc_start(p, q.first_aligned(), q.sizes), q.last_aligned() + 1))
        .full_range(lambda q, p: dsl.Range(doc_start(p, q.last_aligned(), q.sizes), q.first_aligned() + 1))
    )


_REGISTRY: Dict[str, Callable[[], Variant]] = {
    "none": full,
    "causal": causal,
    "causal_top_left": causal_top_left,
    "sliding_window": lambda: sliding_window(256, 0),
    "sliding_window_causal": lambda: sliding_window_causal(256),
    "softcap": lambda: softcap(30.0),
    "softcap_causal": lambda: both(softcap(30.0), causal(), "softcap_causal"),
    "alibi": lambda: alibi(False),
    "alibi_per_batch": lambda: alibi(True),
    "alibi_causal": lambda: both(alibi(False), causal(), "alibi_causal"),
    "sinks": sinks,
    "sinks_causal": lambda: both(sinks(), causal(), "sinks_causal"),
    "document_mask": document_mask,
}


def names() -> List[str]:
    """The built-in variants' names, as the C++ registry has them."""
    return list(_REGISTRY)


def by_name(name: str) -> Variant:
    """The built-in variant `name` (its declared numbers are defaults: every call passes its own)."""
    if name not in _REGISTRY:
        raise ValueError(f"variant: unknown built-in {name!r}; built in: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]()
