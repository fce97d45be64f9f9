"""The attention of one block on one rank: the pluggable local op of ring and Ulysses attention.

- "reference": flashtile.reference_attention, the fp64 oracle on the CPU. It takes position offsets, so every
  variant is exact on every block.
- "kernel": flashtile's GPU kernels (the torch ops behind flashtile.attention: out and lse forward, a backward from
  dout, out and lse, as flash-attn's). The kernels, the runtime and the torch ops take position offsets (validated on
  the GPU machine, 2026-12-07). By default a call's blocks get their placement where the variant needs it (Kernel.check
  says where) and run at local positions elsewhere, as before; Kernel(offsets=True) (FLASHTILE_PARALLEL_KERNEL_OFFSETS=1)
  places every block, Kernel(offsets=False) (=0) none, refusing by name what would then be inexact.
Both return lse as flash-attn does: (batch, heads, seqlen), varlen (heads, total).
"""

from __future__ import annotations

import os
from typing import List, Optional

import torch

from . import _hooks


class Settings:
    """What every block of one call shares: the variant's numbers and arrays, the scale, flags."""

    def __init__(self, params: List[float], inputs: List[torch.Tensor], scale: float, deterministic: bool,
                 schedule: Optional[str] = None, strict: bool = False):
        self.params, self.inputs, self.scale = params, inputs, scale
        self.deterministic, self.schedule, self.strict = bool(deterministic), schedule, bool(strict)


class Block:
    """One local call: its variant (the call's, maybe less its mask or sink), its varlen offsets and where it sits
    in the whole problem (reference_attention's keywords)."""

    def __init__(self, variant, placement: dict, cu_q: Optional[List[int]] = None, cu_k: Optional[List[int]] = None,
                 aligned: bool = False):
        self.variant, self.placement = variant, placement
        self.cu_q, self.cu_k = cu_q, cu_k
        # Whether the local positions are the whole problem's minus one shift for queries and keys alike, with equal
        # local and whole length differences: masks that depend on the key minus the query agree there.
        self.aligned = aligned

    @property
    def max_q(self) -> int:
        return max(b - a for a, b in zip(self.cu_q, self.cu_q[1:])) if self.cu_q else 0

    @property
    def max_k(self) -> int:
        return max(b - a for a, b in zip(self.cu_k, self.cu_k[1:])) if self.cu_k else 0


def _cu(values: Optional[List[int]], device) -> Optional[torch.Tensor]:
    return None if values is None else torch.tensor(values, dtype=torch.int32, device=device)


class Reference:
    name = "reference"
    input_dtypes = {"f32": torch.float64, "i32": torch.int32}  # the variant's arrays, by kind

    def check(self, mode: str, hooks: _hooks.Hooks, world: int, same_lengths: bool) -> None:
        """Every variant is exact: the oracle takes the blocks' offsets."""

    def forward(self, q, k, v, block: Block, s: Settings):
        from ..reference import reference_attention

        f64 = [t.to(torch.float64) for t in (q, k, v)]
        with torch.no_grad():
            return reference_attention(*f64, block.variant, params=s.params, inputs=s.inputs, softmax_scale=s.scale,
                                       return_lse=True, cu_seqlens_q=_cu(block.cu_q, "cpu"),
                                       cu_seqlens_k=_cu(block.cu_k, "cpu"), **block.placement)

    def backward(self, dout, q, k, v, out, lse, block: Block, s: Settings):
        from ..reference import reference_attention_backward

        f64 = [t.to(torch.float64) for t in (dout, q, k, v, out, lse)]
        return reference_attention_backward(*f64, block.variant, params=s.params, inputs=s.inputs,
                                            softmax_scale=s.scale, cu_seqlens_q=_cu(block.cu_q, "cpu"),
                                            cu_seqlens_k=_cu(block.cu_k, "cpu"), **block.placement)


_DIAGONAL_MASKS: Optional[set] = None


def _diagonal_masks() -> set:
    """Masks that are functions of the key minus the (aligned) query: causal's, both alignments. On a block whose
    queries and keys are one chunk of the sequence (a diagonal block) they give the whole problem's answer."""
    global _DIAGONAL_MASKS
    if _DIAGONAL_MASKS is None:
        from .. import variants

        _DIAGONAL_MASKS = {_hooks.Hooks(v).canonical("mask") for v in (variants.causal(), variants.causal_top_left())}
    return _DIAGONAL_MASKS


OFFSETS_VARIABLE = "FLASHTILE_PARALLEL_KERNEL_OFFSETS"


class Kernel:
    """flashtile's GPU kernels as the local op. `offsets`: True gives each block its placement in the whole problem
    (position and head offsets, the whole problem's sizes) through the kernels' position offsets; False runs every
    block at its local positions (exact only where Kernel.check allows; the rest is refused by name); None reads
    FLASHTILE_PARALLEL_KERNEL_OFFSETS (1: True, 0: False; unset or empty: None, the default), and None places the
    blocks of the calls that need it and no others."""

    name = "kernel"
    input_dtypes = {"f32": torch.float32, "i32": torch.int32}

    def __init__(self, offsets: Optional[bool] = None):
        if offsets is None:
            value = os.environ.get(OFFSETS_VARIABLE, "").strip()
            if value not in ("", "0", "1"):
                raise ValueError(f"{OFFSETS_VARIABLE}={value!r}: accepted: 1 (every block gets its position offsets), "
                                 "0 (none: local positions) or unset (the default: where the variant needs them)")
            offsets = {"": None, "0": False, "1": True}[value]
        if offsets is not None and not isinstance(offsets, bool):
            raise TypeError(f"offsets must be True, False or None (read {OFFSETS_VARIABLE}), got {offsets!r}")
        self.offsets = offsets

    def check(self, mode: str, hooks: _hooks.Hooks, world: int, same_lengths: bool) -> Optional[Kernel]:
        """The one place that knows whether the kernels are given position (and head) offsets. Returns the op that
        runs the call: this one, or, where `offsets` is None and the call needs them, one that places every block.

        Without offsets a block of a split sequence runs with its local positions. That is exact where the hooks read
        no position (the blocks the KV-range rules keep whole run without their mask), and on diagonal blocks of
        causal masks when queries and keys are split alike. Under Ulysses every rank sees whole sequences but a slice
        of the heads: exact where the hooks read no head index. Anything else needs the offsets (AttentionArgs::
        positions, the ops' positions arguments; checked on the GPU machine by tests/python/gpu/test_positions_gpu.py,
        2026-12-07): given by default, and with offsets=False refused, before any communication, on every rank alike.
        """
        if world == 1 or self.offsets:
            return self
        why = self._needs_offsets(mode, hooks, same_lengths)
        if why and self.offsets is None:
            return Kernel(offsets=True)
        if why:
            raise NotImplementedError(
                f"flashtile.parallel: variant '{hooks.variant.name}' cannot run {mode} attention on flashtile's GPU "
                f"kernels without position offsets: {why}. Exact without them: ring attention for variants whose "
                "hooks read no positions (none, softcap, sinks) and causal ones; Ulysses for variants that read no "
                "head index. Kernel(offsets=True), or leaving FLASHTILE_PARALLEL_KERNEL_OFFSETS unset (the default), "
                "gives the blocks their placement; local='reference' (fp64, CPU) is exact too. See docs/parallel.md.")
        return self

    @staticmethod
    def _needs_offsets(mode: str, hooks: _hooks.Hooks, same_lengths: bool) -> Optional[str]:
        """Why a call of `mode` over `hooks` is inexact with its blocks at local positions (None: it is exact)."""
        why = None
        if mode == "ring":
            positional_mask = hooks.reads("positions", _hooks.MASK_HOOKS)
            if hooks.reads("positions", ("score", "sink")):
                why = "its score or sink hook reads query/key positions or sequence sizes"
            elif positional_mask and hooks.canonical("mask") not in _diagonal_masks():
                why = "its mask reads positions and is not a causal mask (windows, document masks, a user's mask)"
            elif positional_mask and not same_lengths:
                why = "it is causal but queries and keys are not split alike (different lengths)"
        elif hooks.reads("heads"):
            why = "its hooks read the query head or the head counts, and each rank computes a slice of the heads"
        return why

    def _checked(self, block: Block) -> None:
        if not self.offsets and _hooks.Hooks.reads_positions(block.variant) and not block.aligned:
            raise RuntimeError(f"flashtile.parallel: internal error: block of variant '{block.variant.name}' needs "
                               "global positions the kernels cannot take (Kernel.check should have refused it)")

    def _call(self, q, k, v, block: Block, s: Settings):
        from .. import interface

        return interface._attention_call(q, k, v, block.variant, s.params, s.inputs, s.scale,
                                         _cu(block.cu_q, q.device), _cu(block.cu_k, q.device), block.max_q,
                                         block.max_k)

    def _positions(self, block: Block, q, cu_q) -> tuple:
        """The ops' position arguments of `block`: its placement with offsets on (every block runs the module with
        position offsets, the first one's zeros included), none without."""
        from .. import _positions

        if not self.offsets:
            return _positions.PLAIN
        batch = cu_q.shape[0] - 1 if cu_q is not None else q.shape[0]
        return _positions.check(q.device, cu_q is not None, batch, force=True, **block.placement)

    def forward(self, q, k, v, block: Block, s: Settings):
        self._checked(block)
        qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved, values, arrays, dv = self._call(q, k, v, block, s)
        out, lse = torch.ops.flashtile.fwd(qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved.id, values, arrays,
                                           s.schedule, s.strict, s.deterministic, *self._positions(block, q, cu_q))
        return out[..., :dv], lse

    def backward(self, dout, q, k, v, out, lse, block: Block, s: Settings):
        from .. import interface

        self._checked(block)
        qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved, values, arrays, dv = self._call(q, k, v, block, s)
        pdv = vp.shape[-1]
        wanted = [t.dtype == torch.float32 for t in arrays]
        dq, dk, dvv, grads = torch.ops.flashtile.bwd(
            interface._pad_last(dout, pdv), qp, kp, vp, interface._pad_last(out, pdv).contiguous(), lse.contiguous(),
            cu_q, cu_k, max_q, max_k, scale, resolved.id, values, arrays, wanted, s.schedule, s.strict,
            s.deterministic, *self._positions(block, q, cu_q))
        d = q.shape[-1]
        return dq[..., :d], dk[..., :d], dvv[..., :dv], [g if w else None for g, w in zip(grads, wanted)]


def local_op(local, device: torch.device):
    """The local op a call asked for: "auto" (kernels on CUDA tensors, the reference on CPU ones), "kernel",
    "reference", or an object with check/forward/backward as the two here."""
    if local == "auto":
        return Kernel() if device.type == "cuda" else Reference()
    if local == "kernel":
        if device.type != "cuda":
            raise ValueError(f"local='kernel' runs flashtile's GPU kernels: q, k, v must be CUDA tensors, got {device}")
        return Kernel()
    if local == "reference":
        if device.type != "cpu":
            raise ValueError(f"local='reference' is the fp64 CPU oracle: q, k, v must be CPU tensors, got {device}")
        return Reference()
    if all(hasattr(local, m) for m in ("check", "forward", "backward")):
        return local
    raise ValueError(f"local must be 'auto', 'kernel', 'reference' or an object with check/forward/backward, "
                     f"got {local!r}")
