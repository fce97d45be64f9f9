"""flashtile.reference_attention: a variant's attention in fp64 on the CPU, differentiable, for checking gradients.

The forward and the gradients come from the library's fp64 oracle (the one the backward kernels are tested
against): straight from the definitions, with the hooks' derivatives taken from the compiler's derivative IR, the
same IR the backward kernels print. So `torch.autograd.gradcheck(reference_attention, ...)` checks, against finite
differences, what the compiler derives from a variant's hooks — a user's Python variant included — on any machine,
without a GPU. Small problems only (the work is bounded: FLASHTILE_REFERENCE_MAX_WORK in CApiJit.h).

A call may be one block of a larger problem, as when a sequence is split across processes (flashtile.parallel):
with q_offset / k_offset / head_offset and the larger problem's sizes, the variant's hooks see the larger
problem's positions, and reference_attention_backward takes that problem's out and lse as flash-attn's backward
does.
"""

import ctypes
from typing import List, Optional, Tuple

import torch

from . import _lib
from .interface import VariantLike, _check_inputs, resolve_variant

_F64_INPUTS = {"f32": torch.float64, "i32": torch.int32}


def _pointer(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


class _Geometry:
    """The layout of one call (dense or varlen) and where it sits in a larger problem, checked, as the C call
    takes them. Tensors are kept alive here while a call uses their pointers."""

    __slots__ = ("cu_q", "cu_k", "q_offset", "k_offset", "seqlen_q_global", "seqlen_k_global", "head_offset",
                 "heads_q_global", "heads_kv_global", "q_offsets", "k_offsets", "cu_q_global", "cu_k_global")

    def __init__(self):
        self.cu_q = self.cu_k = self.q_offsets = self.k_offsets = self.cu_q_global = self.cu_k_global = None
        self.q_offset = self.k_offset = self.seqlen_q_global = self.seqlen_k_global = 0
        self.head_offset = self.heads_q_global = self.heads_kv_global = 0

    @property
    def varlen(self) -> bool:
        return self.cu_q is not None

    def fill(self, call) -> None:
        call.cu_seqlens_q, call.cu_seqlens_k = _pointer(self.cu_q), _pointer(self.cu_k)
        call.q_offset, call.k_offset = self.q_offset, self.k_offset
        call.seqlen_q_global, call.seqlen_k_global = self.seqlen_q_global, self.seqlen_k_global
        call.head_offset, call.heads_q_global, call.heads_kv_global = (self.head_offset, self.heads_q_global,
                                                                       self.heads_kv_global)
        call.q_offsets, call.k_offsets = _pointer(self.q_offsets), _pointer(self.k_offsets)
        call.cu_seqlens_q_global, call.cu_seqlens_k_global = _pointer(self.cu_q_global), _pointer(self.cu_k_global)


def _int32_vector(name: str, value, length: int) -> torch.Tensor:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value] * length  # one offset for every sequence
    t = value if isinstance(value, torch.Tensor) else torch.tensor(list(value), dtype=torch.int32)
    if t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] != length or t.device.type != "cpu":
        raise ValueError(f"{name} must be an int32 CPU tensor (or a sequence of ints) of {length} values, got "
                         f"{tuple(t.shape)} {t.dtype} on {t.device}")
    return t.contiguous()


def _natural(name: str, value) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < 0:
        raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    return int(value)


def _geometry(q, k, v, cu_seqlens_q, cu_seqlens_k, q_offset, k_offset, head_offset, seqlen_q_global,
              seqlen_k_global, heads_q_global, heads_kv_global) -> _Geometry:
    g = _Geometry()
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    dims = 3 if varlen else 4
    layout = "(total, heads, headdim)" if varlen else "(batch, seqlen, heads, headdim)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float64 or t.device.type != "cpu" or t.dim() != dims:
            raise ValueError(f"{name} must be a {dims}-dimensional float64 CPU tensor {layout}")
    if (k.shape[-1] != q.shape[-1] or tuple(v.shape[:-1]) != tuple(k.shape[:-1]) or q.shape[-2] % k.shape[-2] != 0
            or (not varlen and k.shape[0] != q.shape[0])):
        raise ValueError(f"shapes: k must match q's batch and head dim, v k's rows and heads, and heads_q must be a "
                         f"multiple of heads_kv; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    g.head_offset = _natural("head_offset", head_offset)
    g.heads_q_global = _natural("heads_q_global", heads_q_global or 0)
    g.heads_kv_global = _natural("heads_kv_global", heads_kv_global or 0)
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None:
            raise ValueError("varlen: pass cu_seqlens_q and cu_seqlens_k together")
        if seqlen_q_global is not None or seqlen_k_global is not None:
            raise ValueError("varlen: pass the larger problem's sequences as cu_seqlens_q_global / "
                             "cu_seqlens_k_global, not seqlen_q_global / seqlen_k_global")
        batch = cu_seqlens_q.shape[0] - 1 if isinstance(cu_seqlens_q, torch.Tensor) else len(cu_seqlens_q) - 1
        if batch < 1:
            raise ValueError("cu_seqlens_q must have batch + 1 >= 2 entries")
        g.cu_q = _int32_vector("cu_seqlens_q", cu_seqlens_q, batch + 1)
        g.cu_k = _int32_vector("cu_seqlens_k", cu_seqlens_k, batch + 1)
        g.q_offsets = None if _zero(q_offset) else _int32_vector("q_offset", q_offset, batch)
        g.k_offsets = None if _zero(k_offset) else _int32_vector("k_offset", k_offset, batch)
    else:
        g.q_offset, g.k_offset = _natural("q_offset", q_offset), _natural("k_offset", k_offset)
        g.seqlen_q_global = _natural("seqlen_q_global", seqlen_q_global or 0)
        g.seqlen_k_global = _natural("seqlen_k_global", seqlen_k_global or 0)
    return g


def _zero(offset) -> bool:
    return isinstance(offset, int) and not isinstance(offset, bool) and offset == 0


def _set_global_sequences(g: _Geometry, cu_seqlens_q_global, cu_seqlens_k_global) -> None:
    if not g.varlen:
        if cu_seqlens_q_global is not None or cu_seqlens_k_global is not None:
            raise ValueError("cu_seqlens_q_global and cu_seqlens_k_global are for varlen calls (with cu_seqlens_q/k)")
        return
    batch = g.cu_q.shape[0] - 1
    g.cu_q_global = None if cu_seqlens_q_global is None else _int32_vector("cu_seqlens_q_global",
                                                                           cu_seqlens_q_global, batch + 1)
    g.cu_k_global = None if cu_seqlens_k_global is None else _int32_vector("cu_seqlens_k_global",
                                                                           cu_seqlens_k_global, batch + 1)


def _run(variant_spec: bytes, params, scale: float, geometry: _Geometry, q, k, v, inputs, decl, d_o=None,
         fwd=None):
    """One call of the C oracle: (o, lse) or, with d_o, (o, lse, dq, dk, dv, input grads, param grads); `fwd`:
    the larger problem's (out, lse) for a block's backward."""
    heads_q, head_dim = q.shape[-2], q.shape[-1]
    heads_kv, head_dim_v = k.shape[-2], v.shape[-1]
    if geometry.varlen:
        batch, seqlen_q, seqlen_k = geometry.cu_q.shape[0] - 1, q.shape[0], k.shape[0]
        o = torch.empty(seqlen_q, heads_q, head_dim_v, dtype=torch.float64)
        lse = torch.empty(heads_q, seqlen_q, dtype=torch.float64)
    else:
        batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
        o = torch.empty(batch, seqlen_q, heads_q, head_dim_v, dtype=torch.float64)
        lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float64)
    call = _lib.ReferenceCall()
    call.size = ctypes.sizeof(call)
    call.variant = variant_spec
    call.q, call.k, call.v, call.o, call.lse = (_pointer(t) for t in (q, k, v, o, lse))
    call.batch, call.seqlen_q, call.seqlen_k = batch, seqlen_q, seqlen_k
    call.heads_q, call.heads_kv, call.head_dim, call.head_dim_v = heads_q, heads_kv, head_dim, head_dim_v
    call.softmax_scale = scale
    call.num_params, call.num_inputs = len(params), len(inputs)
    geometry.fill(call)
    for i, value in enumerate(params):
        call.params[i] = value
    for i, t in enumerate(inputs):
        call.inputs[i], call.input_lengths[i] = t.data_ptr(), t.numel()
    grads = ()
    if d_o is not None:
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        d_inputs = [torch.zeros_like(t) if kind == "f32" else None for t, kind in zip(inputs, decl.inputs.values())]
        d_params = torch.zeros(max(len(params), 1), dtype=torch.float64)
        call.d_o, call.d_q, call.d_k, call.d_v = (_pointer(t) for t in (d_o, dq, dk, dv))
        for i, g in enumerate(d_inputs):
            call.input_grads[i] = _pointer(g)
        call.param_grads = d_params.data_ptr()
        if fwd is not None:
            call.fwd_o, call.fwd_lse = _pointer(fwd[0]), _pointer(fwd[1])
        grads = (dq, dk, dv, d_inputs, d_params[:len(params)])
    library = _lib.library()
    if library.lib.flashtile_reference_attention(ctypes.addressof(call)) != 0:
        raise library.error("reference_attention")
    return (o, lse) + grads


class _Reference(torch.autograd.Function):
    @staticmethod
    def forward(ctx, variant_spec, params, scale, decl, geometry, q, k, v, *inputs):
        o, lse = _run(variant_spec, params, scale, geometry, q, k, v, inputs, decl)
        ctx.save_for_backward(q, k, v, *inputs)
        ctx.call = (variant_spec, params, scale, decl, geometry)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        q, k, v, *inputs = ctx.saved_tensors
        variant_spec, params, scale, decl, geometry = ctx.call
        _, _, dq, dk, dv, d_inputs, _ = _run(variant_spec, params, scale, geometry, q, k, v, inputs, decl,
                                             grad_o.to(torch.float64).contiguous())
        return (None, None, None, None, None, dq, dk, dv, *d_inputs)


def _prepare(q, k, v, variant, params, inputs, softmax_scale, cu_seqlens_q, cu_seqlens_k, q_offset, k_offset,
             head_offset, seqlen_q_global, seqlen_k_global, heads_q_global, heads_kv_global, cu_seqlens_q_global,
             cu_seqlens_k_global):
    geometry = _geometry(q, k, v, cu_seqlens_q, cu_seqlens_k, q_offset, k_offset, head_offset, seqlen_q_global,
                         seqlen_k_global, heads_q_global, heads_kv_global)
    _set_global_sequences(geometry, cu_seqlens_q_global, cu_seqlens_k_global)
    resolved = resolve_variant(variant)
    decl = resolved.decl
    values = tuple(decl.check_params(params))
    arrays = _check_inputs(decl, inputs, torch.device("cpu"), {}, _F64_INPUTS)
    spec = (variant if isinstance(variant, str) else decl.description()).encode()
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    return spec, values, scale, decl, geometry, arrays


def reference_attention(q, k, v, variant: VariantLike = "none", *, params=None, inputs=None, softmax_scale=None,
                        return_lse=False, cu_seqlens_q=None, cu_seqlens_k=None, q_offset=0, k_offset=0,
                        head_offset=0, seqlen_q_global=None, seqlen_k_global=None, heads_q_global=None,
                        heads_kv_global=None, cu_seqlens_q_global=None, cu_seqlens_k_global=None):
    """Attention of `variant` (a built-in name or a flashtile.Variant) in fp64 on the CPU, differentiable in q, k, v
    and the variant's f32 inputs, e.g. for torch.autograd.gradcheck.

    q: (batch, seqlen_q, heads_q, head_dim), k: (batch, seqlen_k, heads_kv, head_dim), v: (batch, seqlen_k,
    heads_kv, head_dim_v), all float64 CPU tensors (any head dims, heads_q a multiple of heads_kv); varlen: with
    cu_seqlens_q / cu_seqlens_k (int32, batch + 1), q (total_q, heads_q, head_dim) and k, v likewise. params: the
    variant's numbers (by name or in order, as attention()'s); inputs: its arrays (by name or in order), float64 CPU
    tensors for its f32 inputs and int32 ones for its i32 inputs. Returns out, or (out, lse) with return_lse=True
    (lse: (batch, heads_q, seqlen_q), varlen (heads_q, total_q), natural log, not differentiable).

    A block of a larger problem: query row i is the larger problem's q_offset + i, key j k_offset + j, query head h
    head_offset + h (varlen: q_offset and k_offset are per sequence, int32 (batch,), or one int for all), and the
    hooks' sizes are the larger problem's: seqlen_q_global / seqlen_k_global (varlen: cu_seqlens_q_global /
    cu_seqlens_k_global, whose cu_seqlens_k_global[b] is also the hooks' key_offset), heads_q_global /
    heads_kv_global; None or 0: the call's own. Inputs are the larger problem's arrays (e.g. document_mask's
    doc_start for every key)."""
    spec, values, scale, decl, geometry, arrays = _prepare(
        q, k, v, variant, params, inputs, softmax_scale, cu_seqlens_q, cu_seqlens_k, q_offset, k_offset, head_offset,
        seqlen_q_global, seqlen_k_global, heads_q_global, heads_kv_global, cu_seqlens_q_global, cu_seqlens_k_global)
    out, lse = _Reference.apply(spec, values, scale, decl, geometry, q.contiguous(), k.contiguous(), v.contiguous(),
                                *arrays)
    return (out, lse) if return_lse else out


def reference_attention_backward(dout, q, k, v, out, lse, variant: VariantLike = "none", *, params=None,
                                 inputs=None, softmax_scale=None, cu_seqlens_q=None, cu_seqlens_k=None, q_offset=0,
                                 k_offset=0, head_offset=0, seqlen_q_global=None, seqlen_k_global=None,
                                 heads_q_global=None, heads_kv_global=None, cu_seqlens_q_global=None,
                                 cu_seqlens_k_global=None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                    List[Optional[torch.Tensor]]]:
    """The backward of one block, as flash-attn's _flash_attn_backward: given dout and the forward's `out` and `lse`
    for q's rows — those of the whole problem this call is a block of (reference_attention's keywords place it) —
    returns (dq, dk, dv, input_grads): this block's share of the gradients, P = exp(score - lse) and
    D = rowsum(dout * out) taken from the given out and lse. input_grads holds a float64 tensor per f32 input and
    None per i32 input. With the call's own out and lse it is reference_attention's backward."""
    spec, values, scale, decl, geometry, arrays = _prepare(
        q, k, v, variant, params, inputs, softmax_scale, cu_seqlens_q, cu_seqlens_k, q_offset, k_offset, head_offset,
        seqlen_q_global, seqlen_k_global, heads_q_global, heads_kv_global, cu_seqlens_q_global, cu_seqlens_k_global)
    o_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    lse_shape = (q.shape[1], q.shape[0]) if geometry.varlen else (q.shape[0], q.shape[2], q.shape[1])
    for name, t, shape in (("dout", dout, o_shape), ("out", out, o_shape), ("lse", lse, lse_shape)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float64 or t.device.type != "cpu" \
                or tuple(t.shape) != shape:
            raise ValueError(f"{name} must be a float64 CPU tensor of shape {shape}, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    _, _, dq, dk, dv, d_inputs, _ = _run(spec, values, scale, geometry, q.contiguous(), k.contiguous(),
                                         v.contiguous(), arrays, decl, dout.contiguous(),
                                         (out.contiguous(), lse.contiguous()))
    return dq, dk, dv, d_inputs
