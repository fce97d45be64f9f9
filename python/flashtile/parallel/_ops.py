"""ring_attention and ulysses_attention under torch.compile, with no graph break inside a step: a call is one
custom op forward (flashtile_parallel::forward) and one backward (flashtile_parallel::backward), whose
communication and local attentions run inside the op, where the compiler does not trace.

A call's Python settings (the variant, its numbers, the inputs' names, scale, layout, process group, local op,
flags) are a recipe: registered once, while torch.compile traces the call (torch.compiler.assume_constant_result
runs the registration then and keeps its number as a constant of the graph), and named by that number in the ops'
arguments beside the tensors (q, k, v, the variant's arrays, cu_seqlens). Each op checks the call and builds its
plan from the recipe and the tensors when it runs, with the code the eager call runs (_call.Call, ring_plan,
ulysses_plan), so compiled and eager calls give the same results. The forward op returns what the backward needs
besides out and lse (Ulysses: the head-split q, k, v, out and lse), which autograd saves.
"""

from __future__ import annotations

import threading
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.distributed as dist

from ._call import Call, ring_plan, ulysses_plan

compiling = torch.compiler.is_compiling


class Recipe(NamedTuple):
    mode: str  # "ring" or "ulysses"
    variant: object  # a built-in name or a flashtile.Variant
    params: object  # as the call gave them: None, a dict or a sequence of numbers
    names: Optional[Tuple[str, ...]]  # the inputs dict's keys in the order of the op's arrays; None: a list
    softmax_scale: Optional[float]
    layout: Optional[str]
    group_name: Optional[str]  # None: the default group
    local: object
    deterministic: bool
    schedule: Optional[str]
    strict: bool
    return_lse: bool


_RECIPES: List[Recipe] = []
_NUMBERS: Dict[tuple, int] = {}
_LOCK = threading.Lock()


def _frozen(params):
    """params as a key: a dict's items or a sequence's numbers (a recipe keeps the call's own form too)."""
    if params is None:
        return None
    return ("dict", tuple(params.items())) if isinstance(params, dict) else ("list", tuple(params))


@torch.compiler.assume_constant_result
def _register(mode, variant, params, names, softmax_scale, layout, group_name, local, deterministic, schedule, strict,
              return_lse) -> int:
    """The recipe's number (the same settings: the same number). `params` is _frozen's form."""
    key = (mode, variant, params, names, softmax_scale, layout, group_name, local, deterministic, schedule, strict,
           return_lse)
    with _LOCK:
        number = _NUMBERS.get(key)
        if number is None:
            value = None if params is None else dict(params[1]) if params[0] == "dict" else list(params[1])
            _RECIPES.append(Recipe(mode, variant, value, names, softmax_scale, layout, group_name, local,
                                   deterministic, schedule, strict, return_lse))
            number = _NUMBERS[key] = len(_RECIPES) - 1
        return number


def attention(mode, q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group, local, deterministic,
              return_lse, schedule, strict):
    """ring_attention's or ulysses_attention's result through the ops (what torch.compile traces)."""
    if isinstance(inputs, dict):
        names, arrays = tuple(inputs.keys()), list(inputs.values())
    else:
        names, arrays = None, list(inputs) if inputs is not None else []
    number = _register(mode, variant, _frozen(params), names,
                       None if softmax_scale is None else float(softmax_scale), layout,
                       None if group is None else group.group_name, local, bool(deterministic), schedule,
                       bool(strict), bool(return_lse))
    out, lse, _ = torch.ops.flashtile_parallel.forward(q, k, v, arrays, cu_seqlens, number)
    return (out, lse) if return_lse else out


def _group(r: Recipe):
    """The recipe's process group (None: the default group)."""
    return None if r.group_name is None else dist.distributed_c10d._resolve_process_group(r.group_name)


def _call(number: int, q, k, v, arrays: List[torch.Tensor], cu_seqlens) -> Tuple[Recipe, Call]:
    r = _RECIPES[number]
    inputs = dict(zip(r.names, arrays)) if r.names is not None else (arrays or None)
    return r, Call(r.mode, q, k, v, r.variant, r.params, inputs, r.softmax_scale, r.layout, cu_seqlens, _group(r),
                   r.local, r.deterministic, r.schedule, r.strict)


def _lse_dtype(q: torch.Tensor) -> torch.dtype:
    return torch.promote_types(torch.float32, q.dtype)


@torch.library.custom_op("flashtile_parallel::forward", mutates_args=())
def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arrays: List[torch.Tensor],
             cu_seqlens: Optional[torch.Tensor], recipe: int) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    """(out, lse, saved) of recipe `recipe`'s call: ring's lse always, Ulysses' where the recipe asks for it (else an
    empty tensor); saved: what the backward needs besides q, k, v, out and lse (Ulysses' head-split tensors)."""
    r, call = _call(recipe, q, k, v, arrays, cu_seqlens)
    if r.mode == "ring":
        out, lse = ring_plan(call, q).forward(q, k, v)
        return out.contiguous(), lse.contiguous(), []
    out, lse, saved = ulysses_plan(call, q, r.return_lse).forward(q, k, v)
    # Contiguous, as the fake implementation says (the all-to-alls hand back strided views).
    return (out.contiguous(), q.new_empty((0,), dtype=_lse_dtype(q)) if lse is None else lse.contiguous(),
            [t.contiguous() for t in saved])


@_forward.register_fake
def _forward_fake(q, k, v, arrays, cu_seqlens, recipe):
    r = _RECIPES[recipe]
    varlen = cu_seqlens is not None
    acc = _lse_dtype(q)
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    heads = q.shape[-2]

    def lse_of(rows: int, heads: int) -> torch.Tensor:
        return q.new_empty((heads, rows) if varlen else (q.shape[0], heads, rows), dtype=acc)

    rows = q.shape[0] if varlen else q.shape[1]
    if r.mode == "ring":
        return out, lse_of(rows, heads), []
    world = dist.get_world_size(_group(r))
    if heads % world or k.shape[-2] % world:
        raise ValueError(f"ulysses_attention: heads_q ({heads}) and heads_kv ({k.shape[-2]}) must both be divisible "
                         f"by the world size ({world})")

    def by_heads(t: torch.Tensor) -> torch.Tensor:  # (..., S/W, H, D) -> (..., S, H/W, D)
        shape = list(t.shape)
        shape[0 if varlen else 1] *= world
        shape[-2] //= world
        return t.new_empty(shape)

    lse = lse_of(rows, heads) if r.return_lse else q.new_empty((0,), dtype=acc)
    return out, lse, [by_heads(q), by_heads(k), by_heads(v), by_heads(out), lse_of(rows * world, heads // world)]


@torch.library.custom_op("flashtile_parallel::backward", mutates_args=())
def _backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              lse: torch.Tensor, saved: List[torch.Tensor], arrays: List[torch.Tensor],
              cu_seqlens: Optional[torch.Tensor], recipe: int
              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    """(dq, dk, dv, the arrays' gradients) of the forward op's call: an array that has none (an integer one) gets an
    empty tensor."""
    r, call = _call(recipe, q, k, v, arrays, cu_seqlens)
    if r.mode == "ring":
        dq, dk, dv, grads = ring_plan(call, q).backward(dout.contiguous(), q, k, v, out, lse)
    else:
        dq, dk, dv, grads = ulysses_plan(call, q, r.return_lse).backward(dout.contiguous(), tuple(saved))
    # The plans give the variant's declared order; the op's arrays are in the call's order (its dict's keys).
    if r.names is not None:
        by_name = dict(zip(call.hooks.variant.inputs, grads))
        grads = [by_name[n] for n in r.names]
    # Contiguous, as the fake implementation says (Ulysses' all-to-all hands back strided views).
    return dq.contiguous(), dk.contiguous(), dv.contiguous(), \
        [t.new_empty((0,)) if g is None else g.contiguous() for t, g in zip(arrays, grads)]


@_backward.register_fake
def _backward_fake(dout, q, k, v, out, lse, saved, arrays, cu_seqlens, recipe):
    grads = [torch.empty_like(t) if t.is_floating_point() else t.new_empty((0,)) for t in arrays]
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), grads


def _setup_context(ctx, inputs, output):
    q, k, v, arrays, cu_seqlens, recipe = inputs
    out, lse, saved = output
    ctx.mark_non_differentiable(lse, *saved)
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens, *arrays, *saved)
    ctx.recipe, ctx.arrays = recipe, len(arrays)


def _autograd_backward(ctx, dout, *unused):  # lse and the saved tensors are not differentiable
    q, k, v, out, lse, cu_seqlens, *rest = ctx.saved_tensors
    arrays, saved = list(rest[:ctx.arrays]), list(rest[ctx.arrays:])
    dq, dk, dv, grads = torch.ops.flashtile_parallel.backward(dout, q, k, v, out, lse, saved, arrays, cu_seqlens,
                                                              ctx.recipe)
    return dq, dk, dv, [g if t.is_floating_point() else None for t, g in zip(arrays, grads)], None, None


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)
