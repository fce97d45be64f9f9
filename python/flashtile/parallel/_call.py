"""The checked arguments of a ring or Ulysses call and the plan each mode builds from them: shared by the eager
calls (flashtile.parallel.ring_attention, ulysses_attention) and the custom ops torch.compile keeps in its graph
(_ops), so that both run one plan from one set of checks."""

from __future__ import annotations

from typing import Optional

import torch

from .. import interface
from . import _hooks
from ._comm import Comm
from ._layout import Split, check_layout
from ._local import Settings, local_op
from ._ring import RingPlan
from ._ulysses import UlyssesPlan


def resolve(variant):
    return interface.resolve_variant(variant).decl


def default_layout(variant="none") -> str:
    """"zigzag" for variants with a KV-range rule (causal, windows, document masks: blocks far from the diagonal
    are skipped, and zigzag gives every rank the same work), "contiguous" otherwise."""
    return "zigzag" if _hooks.Hooks(resolve(variant)).has("kv_range") else "contiguous"


def cu_list(cu_seqlens) -> Optional[list]:
    if cu_seqlens is None:
        return None
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 \
            or cu_seqlens.shape[0] < 2:
        raise ValueError("cu_seqlens must be an int32 tensor of shape (batch + 1,): the whole packed batch's offsets")
    values = cu_seqlens.tolist()
    if values[0] != 0 or any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"cu_seqlens must be non-decreasing offsets from 0, got {values}")
    return values


class Call:
    """The checked arguments every mode shares."""

    def __init__(self, mode, q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group, local,
                 deterministic, schedule, strict):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
            raise ValueError(f"q, k, v must have one dtype and one device, got {q.dtype}/{q.device}, "
                             f"{k.dtype}/{k.device}, {v.dtype}/{v.device}")
        self.cu = cu_list(cu_seqlens)
        dims = 3 if self.cu is not None else 4
        layout_text = "(total, heads, headdim) with cu_seqlens" if dims == 3 else "(batch, seqlen, heads, headdim)"
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != dims:
                raise ValueError(f"{name} must be {layout_text}: this rank's rows; got shape {tuple(t.shape)}")
        if k.shape[-1] != q.shape[-1] or tuple(v.shape[:-1]) != tuple(k.shape[:-1]) or \
                (dims == 4 and k.shape[0] != q.shape[0]) or q.shape[-2] % k.shape[-2]:
            raise ValueError(f"shapes: k must match q's batch and head dim, v k's rows and heads, and q's heads must "
                             f"be a multiple of k's; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
        self.comm = Comm(group)
        self.op = local_op(local, q.device)
        decl = resolve(variant)
        self.hooks = _hooks.Hooks(decl)
        self.layout = check_layout(default_layout(decl) if layout is None else layout)
        world, rank = self.comm.world, self.comm.rank
        rows_q, rows_k = (q.shape[0], k.shape[0]) if dims == 3 else (q.shape[1], k.shape[1])
        self.split_q = Split(self.layout, world, rank, rows_q, "q", self.cu)
        self.split_k = Split(self.layout, world, rank, rows_k, "k", self.cu)
        self.batch = len(self.cu) - 1 if self.cu is not None else q.shape[0]
        self.heads_q, self.heads_kv = q.shape[-2], k.shape[-2]
        values = decl.check_params(params)
        dtypes = getattr(self.op, "input_dtypes", None) or \
            {"f32": torch.float64 if q.device.type == "cpu" else torch.float32, "i32": torch.int32}
        arrays = interface._check_inputs(decl, inputs, q.device, {}, dtypes)
        if isinstance(variant, str):  # the built-ins' arrays are read whole: their sizes are the whole problem's
            keys = self.cu[-1] if self.cu is not None else self.batch * self.split_k.lengths[0]
            counts = interface._builtin_input_counts(variant, self.batch, self.heads_q, keys)
            for (name, _), t in zip(decl.inputs.items(), arrays):
                if name in counts and t.numel() != counts[name]:
                    raise ValueError(f"inputs['{name}'] has {t.numel()} elements; variant '{variant}' reads "
                                     f"{counts[name]} (the whole problem's, not this rank's share)")
        scale = float(softmax_scale) if softmax_scale is not None else q.shape[-1] ** -0.5
        self.settings = Settings(values, arrays, scale, deterministic, schedule, strict)
        self.same_lengths = self.split_q.lengths == self.split_k.lengths
        # The op may hand the call to another (the kernels with position offsets, where this call needs them).
        self.op = self.op.check(mode, self.hooks, world, self.same_lengths) or self.op

    def rules(self) -> _hooks.BlockRules:
        decl = self.hooks.variant
        params = dict(zip(decl.param_names, self.settings.params))
        read = {n for hook in ("kv_range", "full_range") if self.hooks.has(hook)
                for n in (node[1] for node in self.hooks.graphs[hook]["nodes"] if node[0] == "load")}
        inputs = {n: t for (n, _), t in zip(decl.inputs.items(), self.settings.inputs) if n in read}
        return _hooks.BlockRules(self.hooks, params, inputs, self.batch, self.heads_q, self.heads_kv)


def ring_plan(call: Call, q: torch.Tensor) -> RingPlan:
    acc = torch.promote_types(torch.float32, q.dtype)
    return RingPlan(call.comm, call.op, call.hooks, call.rules(), call.settings, call.split_q, call.split_k, acc)


def ulysses_plan(call: Call, q: torch.Tensor, want_lse: bool) -> UlyssesPlan:
    world = call.comm.world
    if call.heads_q % world or call.heads_kv % world:
        raise ValueError(f"ulysses_attention: heads_q ({call.heads_q}) and heads_kv ({call.heads_kv}) must both be "
                         f"divisible by the world size ({world}); with GQA whose K/V heads do not divide, repeat "
                         "them to a multiple or use ring_attention")
    if not call.same_lengths:
        raise ValueError("ulysses_attention: q and k must be shares of sequences of one length (self-attention); "
                         f"got {call.split_q.lengths} and {call.split_k.lengths}")
    return UlyssesPlan(call.comm, call.op, call.hooks.variant, call.settings, call.split_q, call.heads_q,
                       call.heads_kv, q.device, want_lse)
