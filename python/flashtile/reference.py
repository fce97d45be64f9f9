"""flashtile.reference_attention: a variant's attention in fp64 on the CPU, differentiable, for checking gradients.

The forward and the gradients come from the library's fp64 oracle (the one the backward kernels are tested
against): straight from the definitions, with the hooks' derivatives taken from the compiler's derivative IR, the
same IR the backward kernels print. So `torch.autograd.gradcheck(reference_attention, ...)` checks, against finite
differences, what the compiler derives from a variant's hooks — a user's Python variant included — on any machine,
without a GPU. Small problems only (the work is bounded: FLASHTILE_REFERENCE_MAX_WORK in CApiJit.h).
"""

import ctypes
from typing import Optional

import torch

from . import _lib
from .interface import VariantLike, _check_inputs, resolve_variant

_F64_INPUTS = {"f32": torch.float64, "i32": torch.int32}


def _pointer(t: Optional[torch.Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def _run(variant_spec: bytes, params, scale: float, q, k, v, inputs, decl, d_o=None):
    """One call of the C oracle: (o, lse) or, with d_o, (o, lse, dq, dk, dv, input grads, param grads)."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
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
        grads = (dq, dk, dv, d_inputs, d_params[:len(params)])
    library = _lib.library()
    if library.lib.flashtile_reference_attention(ctypes.addressof(call)) != 0:
        raise library.error("reference_attention")
    return (o, lse) + grads


class _Reference(torch.autograd.Function):
    @staticmethod
    def forward(ctx, variant_spec, params, scale, decl, q, k, v, *inputs):
        o, lse = _run(variant_spec, params, scale, q, k, v, inputs, decl)
        ctx.save_for_backward(q, k, v, *inputs)
        ctx.call = (variant_spec, params, scale, decl)
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        q, k, v, *inputs = ctx.saved_tensors
        variant_spec, params, scale, decl = ctx.call
        _, _, dq, dk, dv, d_inputs, _ = _run(variant_spec, params, scale, q, k, v, inputs, decl,
                                             grad_o.to(torch.float64).contiguous())
        return (None, None, None, None, dq, dk, dv, *d_inputs)


def reference_attention(q, k, v, variant: VariantLike = "none", *, params=None, inputs=None, softmax_scale=None,
                        return_lse=False):
    """Attention of `variant` (a built-in name or a flashtile.Variant) in fp64 on the CPU, differentiable in q, k, v
    and the variant's f32 inputs, e.g. for torch.autograd.gradcheck.

    q: (batch, seqlen_q, heads_q, head_dim), k: (batch, seqlen_k, heads_kv, head_dim), v: (batch, seqlen_k,
    heads_kv, head_dim_v), all float64 CPU tensors (any head dims, heads_q a multiple of heads_kv). params: the
    variant's numbers (by name or in order, as attention()'s); inputs: its arrays (by name or in order), float64 CPU
    tensors for its f32 inputs and int32 ones for its i32 inputs. Returns out, or (out, lse) with return_lse=True
    (lse: (batch, heads_q, seqlen_q), natural log, not differentiable)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float64 or t.device.type != "cpu" or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-dimensional float64 CPU tensor (batch, seqlen, heads, headdim)")
    if (k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or tuple(v.shape[:3]) != tuple(k.shape[:3])
            or q.shape[2] % k.shape[2] != 0):
        raise ValueError(f"shapes: k must match q's batch and head dim, v k's rows and heads, and heads_q must be a "
                         f"multiple of heads_kv; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    resolved = resolve_variant(variant)
    decl = resolved.decl
    values = tuple(decl.check_params(params))
    arrays = _check_inputs(decl, inputs, torch.device("cpu"), {}, _F64_INPUTS)
    spec = (variant if isinstance(variant, str) else decl.description()).encode()
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    out, lse = _Reference.apply(spec, values, scale, decl, q.contiguous(), k.contiguous(), v.contiguous(), *arrays)
    return (out, lse) if return_lse else out
