"""The few torch.distributed operations context parallelism uses, and nothing of its own: a ring rotation
(batch_isend_irecv to the next rank, from the previous one), an all-to-all and a sum.

Gloo moves CPU tensors only: with CUDA tensors on a gloo group (several ranks sharing one GPU) the tensors are
staged through host memory. Under NCCL the operations run on NCCL's own stream: a rotation posted before a step's
compute overlaps it, and waiting for it orders the compute stream after it.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import torch.distributed as dist


class Comm:
    def __init__(self, group: Optional[dist.ProcessGroup]):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("flashtile.parallel needs torch.distributed initialized (dist.init_process_group, "
                               "e.g. under torchrun); see docs/parallel.md")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.host_staged = dist.get_backend(group) == "gloo"

    def _peer(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def _staged(self, t: torch.Tensor) -> bool:
        return self.host_staged and t.device.type != "cpu"

    def rotate(self, tensors: Sequence[torch.Tensor]) -> "Rotation":
        """Sends `tensors` to the next rank and receives as many of the same shapes from the previous one; the
        received tensors come from Rotation.wait()."""
        nxt, prev = self._peer((self.rank + 1) % self.world), self._peer((self.rank - 1) % self.world)
        ops, received, staged = [], [], []
        for t in tensors:
            t = t.contiguous()
            out = torch.empty_like(t)
            if self._staged(t):
                send, recv = t.cpu(), torch.empty(t.shape, dtype=t.dtype)
                staged.append((recv, out))
            else:
                send, recv = t, out
            ops.append(dist.P2POp(dist.isend, send, nxt, self.group))
            ops.append(dist.P2POp(dist.irecv, recv, prev, self.group))
            received.append(out)
        return Rotation(dist.batch_isend_irecv(ops), received, staged)

    def all_to_all(self, t: torch.Tensor) -> torch.Tensor:
        """Part j of dimension 0 of `t` goes to rank j; part j of the result came from rank j."""
        t = t.contiguous()
        if self._staged(t):
            host = t.cpu()
            out = torch.empty_like(host)
            dist.all_to_all_single(out, host, group=self.group)
            return out.to(t.device)
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=self.group)
        return out

    def sum(self, tensors: List[torch.Tensor]) -> None:
        """Sums each tensor over the ranks, in place."""
        for t in tensors:
            if self._staged(t):
                host = t.cpu()
                dist.all_reduce(host, group=self.group)
                t.copy_(host)
            else:
                dist.all_reduce(t, group=self.group)


class Rotation:
    def __init__(self, works, received: List[torch.Tensor], staged):
        self.works, self.received, self.staged = works, received, staged

    def wait(self) -> List[torch.Tensor]:
        for work in self.works:
            work.wait()
        for host, device in self.staged:
            device.copy_(host)
        return self.received
