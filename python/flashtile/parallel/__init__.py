"""flashtile.parallel: attention over a sequence split across processes (context parallelism), on
torch.distributed (NCCL on GPUs, gloo on CPUs) and nothing of its own.

    import torch.distributed as dist
    from flashtile import parallel

    dist.init_process_group("nccl")                        # under torchrun
    layout = parallel.default_layout("causal")             # "zigzag": causal work balanced over the ranks
    q, k, v = (parallel.shard(t, layout=layout) for t in (q_all, k_all, v_all))   # this rank's rows
    out = parallel.ring_attention(q, k, v, "causal", layout=layout)             # this rank's rows of the output

- ring_attention: K/V (and in the backward dK/dV) pass around the ring over P2P; partial outputs merge by their
  LSE. Blocks the variant's KV-range rules exclude are skipped, so causal-like variants use the zigzag layout.
- ulysses_attention: all-to-all over heads (heads_q and heads_kv divisible by the world size).
Both take any variant (a built-in name or a flashtile.Variant), its numbers and input arrays (the whole problem's:
e.g. document_mask's doc_start for every key), GQA, varlen (cu_seqlens of the whole packed batch), and are
differentiable. The local attention is pluggable: flashtile's GPU kernels for CUDA tensors, the fp64 reference
(flashtile.reference_attention) for CPU ones. docs/parallel.md says what each mode costs and what is exact where.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from .. import interface
from . import _hooks
from ._comm import Comm
from ._layout import LAYOUTS, Split, check_layout, gathered_order, whole_rows
from ._local import Block, Kernel, Reference, Settings, local_op
from ._ring import RingFunction, RingPlan
from ._ulysses import UlyssesFunction, UlyssesPlan

__all__ = ["LAYOUTS", "Block", "Kernel", "Reference", "Settings", "default_layout", "ring_attention", "shard",
           "ulysses_attention", "unshard"]


def _resolve(variant):
    return interface.resolve_variant(variant).decl


def default_layout(variant="none") -> str:
    """"zigzag" for variants with a KV-range rule (causal, windows, document masks: blocks far from the diagonal
    are skipped, and zigzag gives every rank the same work), "contiguous" otherwise."""
    return "zigzag" if _hooks.Hooks(_resolve(variant)).has("kv_range") else "contiguous"


def _cu_list(cu_seqlens) -> Optional[list]:
    if cu_seqlens is None:
        return None
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dtype != torch.int32 or cu_seqlens.dim() != 1 \
            or cu_seqlens.shape[0] < 2:
        raise ValueError("cu_seqlens must be an int32 tensor of shape (batch + 1,): the whole packed batch's offsets")
    values = cu_seqlens.tolist()
    if values[0] != 0 or any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"cu_seqlens must be non-decreasing offsets from 0, got {values}")
    return values


def _group_of(group) -> Comm:
    return Comm(group)


def shard(x: torch.Tensor, *, layout: str = "contiguous", group=None, cu_seqlens=None, dim: Optional[int] = None):
    """This rank's rows of `x`, a tensor of the whole sequence: (batch, seqlen, ...) along dim 1, or packed
    (total, ...) along dim 0 with cu_seqlens (or along `dim`)."""
    comm = _group_of(group)
    check_layout(layout)
    cu = _cu_list(cu_seqlens)
    dim = (0 if cu is not None else 1) if dim is None else dim
    rows = x.shape[dim]
    if cu is None and rows % (comm.world * (2 if layout == "zigzag" else 1)):
        raise ValueError(f"shard: {rows} rows do not split into {comm.world} ranks' equal {layout} shares")
    split = Split(layout, comm.world, comm.rank, rows // comm.world, "x", cu)
    return x.index_select(dim, whole_rows(split, comm.rank).to(x.device))


def unshard(x: torch.Tensor, *, layout: str = "contiguous", group=None, cu_seqlens=None,
            dim: Optional[int] = None) -> torch.Tensor:
    """The whole sequence from every rank's rows (an all-gather): the inverse of shard."""
    comm = _group_of(group)
    check_layout(layout)
    cu = _cu_list(cu_seqlens)
    dim = (0 if cu is not None else 1) if dim is None else dim
    split = Split(layout, comm.world, comm.rank, x.shape[dim], "x", cu)
    parts = [torch.empty_like(x) for _ in range(comm.world)]
    if comm.host_staged and x.device.type != "cpu":
        host = [torch.empty_like(x, device="cpu") for _ in range(comm.world)]
        dist.all_gather(host, x.cpu().contiguous(), group=group)
        parts = [h.to(x.device) for h in host]
    else:
        dist.all_gather(parts, x.contiguous(), group=group)
    gathered = torch.cat(parts, dim)
    return gathered.index_select(dim, torch.argsort(gathered_order(split)).to(x.device))


class _Call:
    """The checked arguments every mode shares."""

    def __init__(self, mode, q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group, local,
                 deterministic, schedule, strict):
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
            raise ValueError(f"q, k, v must have one dtype and one device, got {q.dtype}/{q.device}, "
                             f"{k.dtype}/{k.device}, {v.dtype}/{v.device}")
        self.cu = _cu_list(cu_seqlens)
        dims = 3 if self.cu is not None else 4
        layout_text = "(total, heads, headdim) with cu_seqlens" if dims == 3 else "(batch, seqlen, heads, headdim)"
        for name, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != dims:
                raise ValueError(f"{name} must be {layout_text}: this rank's rows; got shape {tuple(t.shape)}")
        if k.shape[-1] != q.shape[-1] or tuple(v.shape[:-1]) != tuple(k.shape[:-1]) or \
                (dims == 4 and k.shape[0] != q.shape[0]) or q.shape[-2] % k.shape[-2]:
            raise ValueError(f"shapes: k must match q's batch and head dim, v k's rows and heads, and q's heads must "
                             f"be a multiple of k's; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
        self.comm = _group_of(group)
        self.op = local_op(local, q.device)
        decl = _resolve(variant)
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


def ring_attention(q, k, v, variant="none", *, params=None, inputs=None, softmax_scale=None, layout=None,
                   cu_seqlens=None, group=None, local="auto", deterministic=False, return_lse=False, schedule=None,
                   strict=False):
    """Ring attention over the ranks of `group` (None: the default group).

    q (batch, seqlen_q/W, heads_q, headdim), k, v (batch, seqlen_k/W, heads_kv, headdim[_v]): this rank's rows of
    the whole sequence in `layout` ("contiguous", "zigzag"; None: default_layout(variant)); varlen: (total/W, heads,
    headdim) with cu_seqlens, the whole packed batch's offsets (int32, batch + 1; queries and keys alike), each
    sequence split as shard() splits it. variant, params, inputs: as flashtile.attention's, inputs being the whole
    problem's arrays (float64 for f32 inputs with the reference local op). local: "auto" (flashtile's kernels for
    CUDA tensors, flashtile.reference_attention for CPU ones), "kernel", "reference", or an object with the methods
    of flashtile.parallel.Reference (check, forward, backward). Returns this rank's rows of out, or (out, lse) with
    return_lse (lse (batch, heads_q, rows) or (heads_q, total rows), fp32 (fp64 for fp64 inputs), not
    differentiable).
    Differentiable in q, k, v and the variant's f32 inputs (whose gradient is the whole problem's on every rank);
    deterministic=True keeps the backward bitwise reproducible. schedule, strict: the kernels' (flashtile.attention).
    """
    call = _Call("ring", q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group, local,
                 deterministic, schedule, strict)
    acc = torch.promote_types(torch.float32, q.dtype)
    plan = RingPlan(call.comm, call.op, call.hooks, call.rules(), call.settings, call.split_q, call.split_k, acc)
    out, lse = RingFunction.apply(plan, q, k, v, *call.settings.inputs)
    return (out, lse) if return_lse else out


def ulysses_attention(q, k, v, variant="none", *, params=None, inputs=None, softmax_scale=None, layout=None,
                      cu_seqlens=None, group=None, local="auto", deterministic=False,
                      return_lse=False, schedule=None, strict=False):
    """Ulysses attention over the ranks of `group`: an all-to-all over heads, one local attention over whole
    sequences, an all-to-all back. Arguments and results as ring_attention's (the same default layout, so that
    shards made for one mode serve the other); heads_q and heads_kv must both be divisible by the world size."""
    call = _Call("ulysses", q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group, local,
                 deterministic, schedule, strict)
    world = call.comm.world
    if call.heads_q % world or call.heads_kv % world:
        raise ValueError(f"ulysses_attention: heads_q ({call.heads_q}) and heads_kv ({call.heads_kv}) must both be "
                         f"divisible by the world size ({world}); with GQA whose K/V heads do not divide, repeat "
                         "them to a multiple or use ring_attention")
    if not call.same_lengths:
        raise ValueError("ulysses_attention: q and k must be shares of sequences of one length (self-attention); "
                         f"got {call.split_q.lengths} and {call.split_k.lengths}")
    plan = UlyssesPlan(call.comm, call.op, call.hooks.variant, call.settings, call.split_q, call.heads_q,
                       call.heads_kv, q.device, return_lse)
    return UlyssesFunction.apply(plan, q, k, v, *call.settings.inputs)
