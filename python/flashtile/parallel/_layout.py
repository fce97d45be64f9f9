"""How a sequence is split across the ranks of a group, and where each rank's rows sit in the whole sequence.

- "contiguous": rank r holds rows [r·S/W, (r+1)·S/W) (one chunk of S/W rows);
- "zigzag": the sequence is cut into 2W chunks and rank r holds chunks r and 2W−1−r, in that order, so that under
  a causal mask every rank has the same work (ring-flash-attn's load balancing).
Under varlen every sequence of the packed batch is split so: a rank holds its share of each sequence, packed in the
sequences' order, and each sequence's length must divide into W (contiguous) or 2W (zigzag) chunks.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch

LAYOUTS = ("contiguous", "zigzag")


def check_layout(layout) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    return layout


def chunks_per_rank(layout: str) -> int:
    return 2 if layout == "zigzag" else 1


def chunk_ids(layout: str, world: int, rank: int) -> List[int]:
    """The whole sequence's chunks rank `rank` holds, in its local order."""
    return [rank, 2 * world - 1 - rank] if layout == "zigzag" else [rank]


class Split:
    """One tensor's split: per batch entry (dense: one entry for all) the whole sequence's length and each chunk's;
    the local tensor's rows of each local chunk."""

    def __init__(self, layout: str, world: int, rank: int, local_rows: int, name: str,
                 cu_seqlens: Optional[Sequence[int]] = None):
        self.layout, self.world, self.rank, self.n = layout, world, rank, chunks_per_rank(layout)
        parts = self.n * world
        self.varlen = cu_seqlens is not None
        if not self.varlen:
            if local_rows % self.n:
                raise ValueError(f"{name}: the zigzag layout splits each rank's {local_rows} rows into 2 chunks; "
                                 "give each rank an even number of rows")
            self.lengths = [local_rows * world]
        else:
            self.lengths = [cu_seqlens[b + 1] - cu_seqlens[b] for b in range(len(cu_seqlens) - 1)]
            bad = [(b, n) for b, n in enumerate(self.lengths) if n % parts]
            if bad:
                b, n = bad[0]
                raise ValueError(f"cu_seqlens: sequence {b} has {n} tokens; the {layout} layout over {world} ranks "
                                 f"splits each sequence into {parts} equal chunks (pad it to a multiple of {parts})")
            if sum(self.lengths) // world != local_rows:
                raise ValueError(f"{name}: this rank holds {local_rows} rows; cu_seqlens says its share is "
                                 f"{sum(self.lengths) // world} (1/{world} of every sequence)")
        self.chunk = [n // parts for n in self.lengths]  # each sequence's chunk length
        self.global_cu = list(cu_seqlens) if self.varlen else None

    def ids(self, rank: Optional[int] = None) -> List[int]:
        return chunk_ids(self.layout, self.world, self.rank if rank is None else rank)

    def local_cu(self, chunks: int) -> List[int]:
        """Offsets of `chunks` chunks of every sequence packed (varlen)."""
        out = [0]
        for c in self.chunk:
            out.append(out[-1] + chunks * c)
        return out

    def rows_of(self, i: int, device) -> Optional[torch.Tensor]:
        """Varlen: the local tensor's rows of local chunk `i` (of every sequence), in order; dense: None (a slice)."""
        if not self.varlen:
            return None
        starts = self.local_cu(self.n)
        rows = [torch.arange(starts[b] + i * c, starts[b] + (i + 1) * c) for b, c in enumerate(self.chunk)]
        return torch.cat(rows).to(device)


def whole_rows(split: Split, rank: int) -> torch.Tensor:
    """The whole (packed) sequence's rows rank `rank` holds, in its local order."""
    starts = split.global_cu or [0]
    return torch.cat([torch.arange(starts[b] + g * c, starts[b] + (g + 1) * c)
                      for b, c in enumerate(split.chunk) for g in split.ids(rank)])


def gathered_order(split: Split) -> torch.Tensor:
    """Row j of the ranks' local tensors concatenated in rank order is row order[j] of the whole sequence."""
    return torch.cat([whole_rows(split, rank) for rank in range(split.world)])
