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
differentiable, also under torch.compile(fullgraph=True) (one custom op forward and one backward: _ops). The
local attention is pluggable: flashtile's GPU kernels for CUDA tensors, the fp64 reference
(flashtile.reference_attention) for CPU ones. docs/parallel.md says what each mode costs and what is exact where.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from . import _ops
from ._call import Call, cu_list, default_layout, ring_plan, ulysses_plan
from ._comm import Comm
from ._layout import LAYOUTS, Split, check_layout, gathered_order, whole_rows
from ._local import Block, Kernel, Reference, Settings
from ._ring import RingFunction
from ._ulysses import UlyssesFunction

__all__ = ["LAYOUTS", "Block", "Kernel", "Reference", "Settings", "default_layout", "ring_attention", "shard",
           "ulysses_attention", "unshard"]


def shard(x: torch.Tensor, *, layout: str = "contiguous", group=None, cu_seqlens=None, dim: Optional[int] = None):
    """This rank's rows of `x`, a tensor of the whole sequence: (batch, seqlen, ...) along dim 1, or packed
    (total, ...) along dim 0 with cu_seqlens (or along `dim`)."""
    comm = Comm(group)
    check_layout(layout)
    cu = cu_list(cu_seqlens)
    dim = (0 if cu is not None else 1) if dim is None else dim
    rows = x.shape[dim]
    if cu is None and rows % (comm.world * (2 if layout == "zigzag" else 1)):
        raise ValueError(f"shard: {rows} rows do not split into {comm.world} ranks' equal {layout} shares")
    split = Split(layout, comm.world, comm.rank, rows // comm.world, "x", cu)
    return x.index_select(dim, whole_rows(split, comm.rank).to(x.device))


def unshard(x: torch.Tensor, *, layout: str = "contiguous", group=None, cu_seqlens=None,
            dim: Optional[int] = None) -> torch.Tensor:
    """The whole sequence from every rank's rows (an all-gather): the inverse of shard."""
    comm = Comm(group)
    check_layout(layout)
    cu = cu_list(cu_seqlens)
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
    if _ops.compiling():
        return _ops.attention("ring", q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group,
                              local, deterministic, return_lse, schedule, strict)
    call = Call("ring", q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group, local,
                deterministic, schedule, strict)
    out, lse = RingFunction.apply(ring_plan(call, q), q, k, v, *call.settings.inputs)
    return (out, lse) if return_lse else out


def ulysses_attention(q, k, v, variant="none", *, params=None, inputs=None, softmax_scale=None, layout=None,
                      cu_seqlens=None, group=None, local="auto", deterministic=False,
                      return_lse=False, schedule=None, strict=False):
    """Ulysses attention over the ranks of `group`: an all-to-all over heads, one local attention over whole
    sequences, an all-to-all back. Arguments and results as ring_attention's (the same default layout, so that
    shards made for one mode serve the other); heads_q and heads_kv must both be divisible by the world size."""
    if _ops.compiling():
        return _ops.attention("ulysses", q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group,
                              local, deterministic, return_lse, schedule, strict)
    call = Call("ulysses", q, k, v, variant, params, inputs, softmax_scale, layout, cu_seqlens, group, local,
                deterministic, schedule, strict)
    return UlyssesFunction.apply(ulysses_plan(call, q, return_lse), q, k, v, *call.settings.inputs)
