"""Ulysses attention (DeepSpeed's): an all-to-all turns each rank's share of the sequence for all heads into the
whole sequence for a share of the heads; each rank runs one local attention over whole sequences, and an
all-to-all turns the output back. The local call sees whole sequences, so positions are the whole problem's; its
heads are the whole problem's heads rank·H/W onwards (its placement's head offset).

Layouts as ring attention's: the all-to-all gathers the ranks' rows in rank order, reordered to the sequence's
order (an identity under the contiguous dense layout).
"""

from __future__ import annotations

from typing import Optional

import torch

from ._comm import Comm
from ._layout import Split, gathered_order
from ._local import Block, Settings


class UlyssesPlan:
    def __init__(self, comm: Comm, op, variant, settings: Settings, split: Split, heads_q: int, heads_kv: int,
                 device, want_lse: bool):
        self.comm, self.op, self.settings, self.split, self.want_lse = comm, op, settings, split, want_lse
        self.varlen = split.varlen
        world = comm.world
        order = gathered_order(split)
        identity = bool(torch.equal(order, torch.arange(order.numel())))
        self.order = None if identity else order.to(device)
        self.inverse = None if identity else torch.argsort(order).to(device)
        placement = dict(head_offset=comm.rank * heads_q // world, heads_q_global=heads_q, heads_kv_global=heads_kv)
        cu = split.global_cu
        self.block = Block(variant, placement, cu, cu, aligned=True)

    # Layout changes ------------------------------------------------------------------------------------------------
    @property
    def _rows(self) -> int:
        return 0 if self.varlen else 1

    def to_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(..., S/W rows, H, D) of every head -> (..., S rows, H/W, D), rows in the sequence's order."""
        w, rd = self.comm.world, self._rows
        parts = x.unflatten(-2, (w, x.shape[-2] // w)).movedim(-3, 0)
        gathered = self.comm.all_to_all(parts).movedim(0, rd).flatten(rd, rd + 1)
        return gathered if self.inverse is None else gathered.index_select(rd, self.inverse)

    def from_heads(self, y: torch.Tensor) -> torch.Tensor:
        """The inverse of to_heads."""
        w, rd = self.comm.world, self._rows
        if self.order is not None:
            y = y.index_select(rd, self.order)
        parts = y.unflatten(rd, (w, y.shape[rd] // w)).movedim(rd, 0)
        return self.comm.all_to_all(parts).movedim(0, -3).flatten(-3, -2)

    def lse_from_heads(self, lse: torch.Tensor) -> torch.Tensor:
        """lse (B, H/W, S) or (H/W, T) of whole sequences -> this rank's rows of every head: (B, H, S/W), (H, T/W)."""
        w, rd = self.comm.world, lse.dim() - 1
        if self.order is not None:
            lse = lse.index_select(rd, self.order)
        parts = lse.unflatten(rd, (w, lse.shape[rd] // w)).movedim(rd, 0)
        return self.comm.all_to_all(parts).movedim(0, rd - 1).flatten(rd - 1, rd)

    # Passes --------------------------------------------------------------------------------------------------------
    def forward(self, q, k, v):
        qh, kh, vh = (self.to_heads(t) for t in (q, k, v))
        out_h, lse_h = self.op.forward(qh, kh, vh, self.block, self.settings)
        # lse as ring attention gives it, fp32 (fp64 for fp64 inputs), whatever the local op returned
        out_h, lse_h = out_h.to(q.dtype), lse_h.to(torch.promote_types(torch.float32, q.dtype))
        out = self.from_heads(out_h)
        lse: Optional[torch.Tensor] = self.lse_from_heads(lse_h) if self.want_lse else None
        return out, lse, (qh, kh, vh, out_h, lse_h)

    def backward(self, dout, saved):
        qh, kh, vh, out_h, lse_h = saved
        dq, dk, dv, d_inputs = self.op.backward(self.to_heads(dout), qh, kh, vh, out_h, lse_h, self.block,
                                                self.settings)
        grads = [(torch.zeros_like(t) if g is None else g) if t.is_floating_point() else None
                 for t, g in zip(self.settings.inputs, d_inputs)]
        if self.comm.world > 1 and any(g is not None for g in grads):
            self.comm.sum([g for g in grads if g is not None])  # every rank: the whole problem's gradient
        return (self.from_heads(dq.to(qh.dtype)), self.from_heads(dk.to(kh.dtype)), self.from_heads(dv.to(vh.dtype)),
                [None if g is None else g.to(t.dtype) for t, g in zip(self.settings.inputs, grads)])


class UlyssesFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: UlyssesPlan, q, k, v, *inputs):
        out, lse, saved = plan.forward(q, k, v)
        ctx.plan = plan
        ctx.save_for_backward(*saved)
        if lse is None:
            return out
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, *unused):
        dq, dk, dv, d_inputs = ctx.plan.backward(dout.contiguous(), ctx.saved_tensors)
        return (None, dq, dk, dv, *d_inputs)
