"""flash-attn 2.x's private entry points on flashtile's kernels, for engines written against them.

ring-flash-attn (and others) call flash_attn.flash_attn_interface's _flash_attn_forward / _flash_attn_backward
(and the _varlen_ pair) by keyword, reading their parameters with inspect: this module has them with flash-attn
2.6+'s names, defaults and results, running flashtile's kernels. install() makes `import flash_attn` find this
module where flash-attn itself is not installed, so those engines run unchanged:

    from flashtile import flash_attn_compat
    flash_attn_compat.install()
    from ring_flash_attn import zigzag_ring_flash_attn_func   # now on flashtile's kernels

Semantics are flash-attn's: causal and windows align to the bottom-right corner, lse is (batch, nheads, seqlen_q)
fp32 (varlen: (nheads, total_q)), the backward writes dq, dk, dv into the given tensors and returns D =
rowsum(dout * out). No dropout (dropout_p must be 0), no paged or left-padded K/V in the varlen calls. On CPU
tensors the same calls run flashtile's fp64 reference instead of the kernels (for tests; any float dtype).
"""

from __future__ import annotations

import importlib.util
import sys
import types

import torch

from . import interface
from .interface import flash_attn_func, flash_attn_varlen_func  # noqa: F401  (flash_attn_interface has them too)

# schedule, strict, deterministic of a forward, and no positions (a plain call: flashtile._positions.PLAIN).
_PLAIN = (None, False, False, None, None, None, None, None)


def _no_dropout(dropout_p) -> None:
    if dropout_p:
        raise NotImplementedError(f"dropout_p={dropout_p}: flashtile has no dropout yet; pass dropout_p=0.0")


def _variant(causal, window_size_left, window_size_right, softcap, alibi_slopes, seqlen_k):
    window = (-1 if window_size_left is None else int(window_size_left),
              -1 if window_size_right is None else int(window_size_right))
    if window[0] < -1 or window[1] < -1:
        raise ValueError(f"window_size_left/right: sizes must be >= -1 (-1: unbounded), got {window}")
    resolved, values = interface._flash_attn_variant(bool(causal), window, float(softcap or 0.0), alibi_slopes,
                                                     seqlen_k)
    params = [float(values[n]) for n in resolved.param_names]
    return resolved, params, [] if alibi_slopes is None else [alibi_slopes.contiguous()]


def _named(resolved):
    """A built-in's name (its ahead-of-time kernels), else the composed variant itself."""
    return resolved.id if resolved.id == resolved.decl.name else resolved.decl


def _reference(q, k, v, cu_q, cu_k, scale, resolved, params, inputs, dout=None, out=None, lse=None):
    """The CPU path: the fp64 reference, results in q's dtype (lse in fp32 or wider)."""
    from .reference import reference_attention, reference_attention_backward

    f64 = lambda t: t.to(torch.float64)  # noqa: E731
    varlen = dict(cu_seqlens_q=None if cu_q is None else cu_q.cpu(), cu_seqlens_k=None if cu_k is None else cu_k.cpu())
    arrays = [f64(t) for t in inputs]
    variant = _named(resolved)
    if dout is None:
        o, l = reference_attention(f64(q), f64(k), f64(v), variant, params=params, inputs=arrays, softmax_scale=scale,
                                   return_lse=True, **varlen)
        return o.to(q.dtype), l.to(torch.promote_types(torch.float32, q.dtype))
    dq, dk, dv, _ = reference_attention_backward(f64(dout), f64(q), f64(k), f64(v), f64(out), f64(lse), variant,
                                                 params=params, inputs=arrays, softmax_scale=scale, **varlen)
    return dq, dk, dv


def _rng_state(device) -> torch.Tensor:
    return torch.zeros((2,), dtype=torch.int64, device=device)


def _forward(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale, causal, window_size_left,
             window_size_right, softcap, alibi_slopes):
    _no_dropout(dropout_p)
    scale = float(softmax_scale) if softmax_scale is not None else q.shape[-1] ** -0.5
    seqlen_k = max_k if cu_q is not None else k.shape[1]
    resolved, params, inputs = _variant(causal, window_size_left, window_size_right, softcap, alibi_slopes, seqlen_k)
    if q.device.type == "cpu":
        out, lse = _reference(q, k, v, cu_q, cu_k, scale, resolved, params, inputs)
    else:
        qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved, params, inputs, dv = interface._attention_call(
            q, k, v, _named(resolved), params, inputs, scale, cu_q, cu_k, max_q, max_k)
        # The custom op under torch.compile, a dispatch mode or tensor subclasses (which see it); else its launch
        # without its dispatch (the caller's autograd.Function records the graph).
        if not interface._launches_directly(qp, kp, vp, inputs):
            out, lse = torch.ops.flashtile.fwd(qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved.id, params,
                                               inputs, *_PLAIN)
        else:
            out, lse = interface._launch(qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved.id_bytes, params,
                                         inputs)
        out = out[..., :dv]
    return out, lse, torch.empty((0,), dtype=q.dtype, device=q.device), _rng_state(q.device)


def _backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_q, cu_k, max_q, max_k, dropout_p, softmax_scale,
              causal, window_size_left, window_size_right, softcap, alibi_slopes, deterministic):
    _no_dropout(dropout_p)
    scale = float(softmax_scale) if softmax_scale is not None else q.shape[-1] ** -0.5
    seqlen_k = max_k if cu_q is not None else k.shape[1]
    resolved, params, inputs = _variant(causal, window_size_left, window_size_right, softcap, alibi_slopes, seqlen_k)
    if q.device.type == "cpu":
        gq, gk, gv = _reference(q, k, v, cu_q, cu_k, scale, resolved, params, inputs, dout, out, softmax_lse)
    else:
        qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved, params, inputs, d_v = interface._attention_call(
            q, k, v, _named(resolved), params, inputs, scale, cu_q, cu_k, max_q, max_k)
        pdv = vp.shape[-1]
        direct = interface._launches_directly(qp, kp, vp, inputs)
        backward = interface._backward_launch if direct else torch.ops.flashtile.bwd
        gq, gk, gv, _ = backward(
            interface._pad_last(dout, pdv), qp, kp, vp, interface._pad_last(out, pdv).contiguous(),
            softmax_lse.contiguous(), cu_q, cu_k, max_q, max_k, scale, resolved.id, params, inputs,
            [False] * len(inputs), None, False, bool(deterministic))
        gq, gk, gv = gq[..., :q.shape[-1]], gk[..., :k.shape[-1]], gv[..., :v.shape[-1]]
    results = []
    for given, grad in ((dq, gq), (dk, gk), (dv, gv)):
        if given is None:
            results.append(grad.to(dout.dtype))
        else:
            given.copy_(grad)
            results.append(given)
    # D = rowsum(dout * out), (batch, nheads, seqlen_q) or (nheads, total_q), as flash-attn's softmax_d.
    wide = torch.promote_types(torch.float32, dout.dtype)
    d = (dout.to(wide) * out.to(wide)).sum(-1)
    return d.transpose(-1, -2).contiguous() if cu_q is None else d.t().contiguous()


def _flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, window_size_left=-1, window_size_right=-1,
                        softcap=0.0, alibi_slopes=None, return_softmax=False):
    """flash-attn 2.6+: (out, softmax_lse, S_dmask, rng_state); q (batch, seqlen_q, nheads, headdim), k and v
    (batch, seqlen_k, nheads_k, headdim); S_dmask is empty (no dropout), rng_state zeros."""
    return _forward(q, k, v, None, None, 0, 0, dropout_p, softmax_scale, causal, window_size_left, window_size_right,
                    softcap, alibi_slopes)


def _flash_attn_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, dropout_p, softmax_scale, causal,
                         window_size_left=-1, window_size_right=-1, softcap=0.0, alibi_slopes=None,
                         deterministic=False, rng_state=None):
    """flash-attn 2.6+: writes dq, dk, dv (or returns new ones where they are None) from dout and the forward's out
    and softmax_lse; returns softmax_d."""
    return _backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, None, None, 0, 0, dropout_p, softmax_scale, causal,
                     window_size_left, window_size_right, softcap, alibi_slopes, deterministic)


def _unsupported(**given) -> None:
    for name, value in given.items():
        if value is not None and value is not False:
            raise NotImplementedError(f"{name} is not supported by flashtile's flash-attn entry points; pass None")


def _flash_attn_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                               softmax_scale, causal, window_size_left=-1, window_size_right=-1, softcap=0.0,
                               alibi_slopes=None, return_softmax=False, block_table=None, leftpad_k=None,
                               seqused_k=None, zero_tensors=False):
    """flash-attn 2.6+'s varlen forward: q (total_q, nheads, headdim), lse (nheads, total_q)."""
    _unsupported(block_table=block_table, leftpad_k=leftpad_k, seqused_k=seqused_k)
    return _forward(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), dropout_p,
                    softmax_scale, causal, window_size_left, window_size_right, softcap, alibi_slopes)


def _flash_attn_varlen_backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                                max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_size_left=-1,
                                window_size_right=-1, softcap=0.0, alibi_slopes=None, deterministic=False,
                                rng_state=None, zero_tensors=False):
    """flash-attn 2.6+'s varlen backward."""
    return _backward(dout, q, k, v, out, softmax_lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                     int(max_seqlen_k), dropout_p, softmax_scale, causal, window_size_left, window_size_right, softcap,
                     alibi_slopes, deterministic)


def install(force: bool = False) -> bool:
    """Makes `import flash_attn` / `flash_attn.flash_attn_interface` resolve to this module, unless flash-attn is
    installed or imported (force=True: even then). Returns whether this module now serves those imports."""
    present = sys.modules.get("flash_attn")
    if present is not None and getattr(present, "__flashtile__", False):
        return True
    if not force and (present is not None or importlib.util.find_spec("flash_attn") is not None):
        return False
    package = types.ModuleType("flash_attn", "flashtile's flash-attn 2.x entry points (flashtile.flash_attn_compat)")
    package.__path__ = []
    package.__flashtile__ = True
    package.__version__ = "2.6.3"  # the signatures this module has
    package.flash_attn_interface = sys.modules[__name__]
    package.flash_attn_func, package.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    sys.modules["flash_attn"] = package
    sys.modules["flash_attn.flash_attn_interface"] = sys.modules[__name__]
    return True


__all__ = ["_flash_attn_backward", "_flash_attn_forward", "_flash_attn_varlen_backward", "_flash_attn_varlen_forward",
           "flash_attn_func", "flash_attn_varlen_func", "install"]
