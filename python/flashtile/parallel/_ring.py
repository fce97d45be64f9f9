"""Ring attention: each rank keeps its queries and passes K/V around the ring; after W steps every query chunk has
met every key chunk, and the partial (out, lse) pairs are merged by their LSE in fp32 (fp64 for fp64 inputs).

A block is (a local query chunk, a key chunk of the rank whose K/V this step holds). The variant's KV-range rules,
evaluated on the block's place in the whole problem, skip blocks they exclude and drop the mask of blocks they keep
whole. A sink joins each row's softmax once: the block of a query chunk with its own key chunk carries it.

The backward walks the same blocks with the whole problem's out and lse: dQ stays, dK/dV travel with the K/V they
belong to and reach their owner after W steps, each a sum in a fixed order (deterministic given deterministic local
backwards); the variant's input gradients are summed over the ranks.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from . import _hooks
from ._comm import Comm
from ._layout import Split
from ._local import Block, Settings

NEG_INF = float("-inf")


class RingPlan:
    """The blocks of every step of one call, and the arithmetic around them."""

    def __init__(self, comm: Comm, op, hooks: _hooks.Hooks, rules: _hooks.BlockRules, settings: Settings,
                 split_q: Split, split_k: Split, acc_dtype: torch.dtype):
        self.comm, self.op, self.hooks, self.settings = comm, op, hooks, settings
        self.split_q, self.split_k, self.acc_dtype = split_q, split_k, acc_dtype
        self.varlen = split_q.varlen
        self._row_cache: Dict[tuple, torch.Tensor] = {}
        self._variants: Dict[Tuple[bool, bool], object] = {}
        sink = hooks.has("sink")
        self.steps: List[List[Tuple[int, int, Block]]] = []
        for step in range(comm.world):
            src = (comm.rank - step) % comm.world
            blocks = []
            for i, gq in enumerate(split_q.ids()):
                for j, gk in enumerate(split_k.ids(src)):
                    carries_sink = sink and gq == gk
                    kind = rules.classify(self._seqs(gq, gk))
                    if kind == "skip" and not carries_sink:
                        continue
                    variant = self._variant(drop_mask=kind == "full", drop_sink=sink and not carries_sink)
                    blocks.append((i, j, self._block(variant, gq, gk)))
            self.steps.append(blocks)

    # Planning ----------------------------------------------------------------------------------------------------
    def _variant(self, drop_mask: bool, drop_sink: bool):
        key = (drop_mask and self.hooks.has("mask"), drop_sink)
        if key not in self._variants:
            v = self.hooks.variant
            self._variants[key] = _hooks.without(v, mask=key[0], sink=key[1]) if any(key) else v
        return self._variants[key]

    def _rows_keys(self, gq: int, gk: int):
        """Dense: the block's query rows and keys in the whole sequence (varlen: per sequence, in _seqs)."""
        cq, ck = self.split_q.chunk[0], self.split_k.chunk[0]
        return (gq * cq, (gq + 1) * cq), (gk * ck, (gk + 1) * ck)

    def _seqs(self, gq: int, gk: int) -> List[dict]:
        sq, sk = self.split_q, self.split_k
        if not self.varlen:
            rows, keys = self._rows_keys(gq, gk)
            return [{"seqlen_q": sq.lengths[0], "seqlen_k": sk.lengths[0], "key_offset": 0, "rows": rows,
                     "keys": keys}]
        return [{"b": b, "seqlen_q": sq.lengths[b], "seqlen_k": sk.lengths[b], "key_offset": sk.global_cu[b],
                 "rows": (gq * cq, (gq + 1) * cq), "keys": (gk * ck, (gk + 1) * ck)}
                for b, (cq, ck) in enumerate(zip(sq.chunk, sk.chunk))]

    def _block(self, variant, gq: int, gk: int) -> Block:
        sq, sk = self.split_q, self.split_k
        aligned = gq == gk and sq.lengths == sk.lengths
        if not self.varlen:
            placement = dict(q_offset=gq * sq.chunk[0], k_offset=gk * sk.chunk[0], seqlen_q_global=sq.lengths[0],
                             seqlen_k_global=sk.lengths[0])
            return Block(variant, placement, aligned=aligned)
        placement = dict(q_offset=[gq * c for c in sq.chunk], k_offset=[gk * c for c in sk.chunk],
                         cu_seqlens_q_global=sq.global_cu, cu_seqlens_k_global=sk.global_cu)
        return Block(variant, placement, sq.local_cu(1), sk.local_cu(1), aligned=aligned)

    # Chunks of local tensors -------------------------------------------------------------------------------------
    def _rows(self, split: Split, i: int, device):
        key = (id(split), i)
        if key not in self._row_cache:
            self._row_cache[key] = split.rows_of(i, device)
        return self._row_cache[key]

    def _chunk(self, split: Split, t: torch.Tensor, i: int, dim: int = 1) -> torch.Tensor:
        """Local chunk i of a local tensor: dense along `dim` (1: rows of (B, S, H, D), 2: of lse (B, H, S)),
        varlen along the packed rows (0, or 1 for lse (H, T))."""
        if not self.varlen:
            n = t.shape[dim] // split.n
            return t.narrow(dim, i * n, n).contiguous()  # the whole tensor itself under the contiguous layout
        return t.index_select(dim, self._rows(split, i, t.device))

    def _place(self, split: Split, whole: torch.Tensor, part: torch.Tensor, i: int, dim: int = 1) -> None:
        """whole's local chunk i = part."""
        if not self.varlen:
            n = whole.shape[dim] // split.n
            whole.narrow(dim, i * n, n).copy_(part)
        else:
            whole.index_copy_(dim, self._rows(split, i, whole.device), part.to(whole.dtype))

    def _add(self, split: Split, whole: torch.Tensor, part: torch.Tensor, j: int) -> None:
        """whole's local chunk j += part (one add per element: a fixed order)."""
        if not self.varlen:
            n = whole.shape[1] // split.n
            whole.narrow(1, j * n, n).add_(part.to(whole.dtype))
        else:
            rows = self._rows(split, j, whole.device)
            whole.index_copy_(0, rows, whole.index_select(0, rows) + part.to(whole.dtype))

    # Forward -----------------------------------------------------------------------------------------------------
    def _lse_rows(self, lse: torch.Tensor) -> torch.Tensor:
        """lse (B, H, L) or (H, T) as (B, L, H, 1) or (T, H, 1), beside out."""
        return (lse.transpose(-1, -2) if self.varlen else lse.transpose(1, 2)).unsqueeze(-1).to(self.acc_dtype)

    def _merge(self, acc, out: torch.Tensor, lse: torch.Tensor):
        out, lse = out.to(self.acc_dtype), self._lse_rows(lse)
        if acc is None:
            return out, lse
        acc_out, acc_lse = acc
        merged = torch.logaddexp(acc_lse, lse)
        seen = merged > NEG_INF  # rows that saw no key anywhere yet keep O = 0, LSE = -inf
        zero = torch.zeros((), dtype=self.acc_dtype, device=out.device)
        keep = torch.where(seen, torch.exp(acc_lse - merged), zero)
        take = torch.where(seen, torch.exp(lse - merged), zero)
        return acc_out * keep + out * take, merged

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        sq, n = self.split_q, self.split_q.n
        qs = [self._chunk(sq, q, i, 0 if self.varlen else 1) for i in range(n)]
        acc: List[Optional[tuple]] = [None] * n
        kv = [k, v]
        for step, blocks in enumerate(self.steps):
            rotation = self.comm.rotate(kv) if step + 1 < self.comm.world else None
            for i, j, block in blocks:
                kj, vj = (self._chunk(self.split_k, t, j, 0 if self.varlen else 1) for t in kv)
                acc[i] = self._merge(acc[i], *self.op.forward(qs[i], kj, vj, block, self.settings))
            if rotation is not None:
                kv = rotation.wait()
        out = q.new_zeros(q.shape[:-1] + (v.shape[-1],), dtype=self.acc_dtype)
        lse_rows = torch.full(out.shape[:-1] + (1,), NEG_INF, dtype=self.acc_dtype, device=q.device)
        for i, a in enumerate(acc):
            if a is not None:
                self._place(sq, out, a[0], i, 0 if self.varlen else 1)
                self._place(sq, lse_rows, a[1], i, 0 if self.varlen else 1)
        lse = lse_rows.squeeze(-1)
        lse = lse.transpose(0, 1) if self.varlen else lse.transpose(1, 2)
        return out.to(q.dtype), lse.contiguous()

    # Backward ----------------------------------------------------------------------------------------------------
    def backward(self, dout, q, k, v, out, lse):
        sq, sk, n = self.split_q, self.split_k, self.split_q.n
        rd, ld = (0, 1) if self.varlen else (1, 2)  # the row dimension of q-like tensors and of lse
        qs = [self._chunk(sq, q, i, rd) for i in range(n)]
        douts = [self._chunk(sq, dout, i, rd) for i in range(n)]
        outs = [self._chunk(sq, out, i, rd) for i in range(n)]
        lses = [self._chunk(sq, lse, i, ld).contiguous() for i in range(n)]
        dq = torch.zeros(q.shape, dtype=self.acc_dtype, device=q.device)
        d_inputs: List[Optional[torch.Tensor]] = [None] * len(self.settings.inputs)
        kv, travelling, pending = [k, v], None, None
        for step, blocks in enumerate(self.steps):
            rotation = self.comm.rotate(kv) if step + 1 < self.comm.world else None
            dk = torch.zeros(k.shape, dtype=self.acc_dtype, device=k.device)
            dv = torch.zeros(v.shape, dtype=self.acc_dtype, device=v.device)
            for i, j, block in blocks:
                kj, vj = (self._chunk(sk, t, j, rd) for t in kv)
                gq, gk, gv, gin = self.op.backward(douts[i], qs[i], kj, vj, outs[i], lses[i], block, self.settings)
                self._add(sq, dq, gq, i)
                self._add(sk, dk, gk, j)
                self._add(sk, dv, gv, j)
                for x, g in enumerate(gin):
                    if g is not None:
                        g = g.to(self.acc_dtype)
                        d_inputs[x] = g if d_inputs[x] is None else d_inputs[x] + g
            if step == 0:
                travelling = [dk, dv]
            else:
                earlier = pending.wait()  # the owner's and the ranks' after it, in ring order
                travelling = [earlier[0] + dk, earlier[1] + dv]
            if self.comm.world > 1:
                pending = self.comm.rotate(travelling)  # the last one delivers dK/dV to their owner
            if rotation is not None:
                kv = rotation.wait()
        dk, dv = pending.wait() if self.comm.world > 1 else travelling
        grads = [(torch.zeros(t.shape, dtype=self.acc_dtype, device=t.device) if g is None else g)
                 if t.is_floating_point() else None for t, g in zip(self.settings.inputs, d_inputs)]
        if self.comm.world > 1 and any(g is not None for g in grads):
            self.comm.sum([g for g in grads if g is not None])  # every rank: the whole problem's gradient
        return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype),
                [None if g is None else g.to(t.dtype) for t, g in zip(self.settings.inputs, grads)])


class RingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: RingPlan, q, k, v, *inputs):
        out, lse = plan.forward(q, k, v)
        ctx.plan = plan
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv, d_inputs = ctx.plan.backward(dout.contiguous(), q, k, v, out, lse)
        return (None, dq, dk, dv, *d_inputs)
