"""Where a kernel call sits in a larger problem it is one block of (context parallelism: flashtile.parallel).

attention() takes reference_attention's keywords (q_offset, k_offset, head_offset, seqlen_q_global,
seqlen_k_global, heads_q_global, heads_kv_global, cu_seqlens_q_global, cu_seqlens_k_global); check() turns them
into the torch ops' arguments (a list of seven ints and four optional int32 device tensors), and struct() into the C
ABI's flashtile_positions. Values are checked against the call's sizes once more by the runtime, which names the
field (runtime/include/flashtile/runtime/Runtime.h, BlockPositions).
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from . import _lib

# The ops' `positions` list, in this order.
INT_NAMES = ("q_offset", "k_offset", "seqlen_q_global", "seqlen_k_global", "head_offset", "heads_q_global",
             "heads_kv_global")

# The ops' arguments of a plain call: no positions, no arrays.
PLAIN = (None, None, None, None, None)


def _natural(name: str, value) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be a whole number >= 0, got {type(value).__name__}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{name} is {value}; it must be >= 0")
    return _lib.c_int(name, value)


def _is_zero(value) -> bool:
    return value is None or (not isinstance(value, (bool, torch.Tensor)) and hasattr(value, "__index__")
                             and int(value) == 0)


def _int32_array(name: str, value, length: int, device) -> torch.Tensor:
    """An int32 tensor of `length` values on `device`: from a tensor of that shape, or a sequence of ints."""
    if isinstance(value, torch.Tensor):
        if value.dtype != torch.int32 or value.dim() != 1 or value.shape[0] != length:
            raise ValueError(f"{name} must be an int32 tensor of shape ({length},) (or a sequence of {length} ints), "
                             f"got {value.dtype} of shape {tuple(value.shape)}")
        return (value if value.device == device else value.to(device)).contiguous()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != length:
        raise ValueError(f"{name} must be a sequence of {length} ints (or an int32 tensor of shape ({length},)), "
                         f"got {value!r}")
    values = [_natural(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return torch.tensor(values, dtype=torch.int32, device=device)


def check(device, varlen: bool, batch: int, q_offset=0, k_offset=0, head_offset=0, seqlen_q_global=None,
          seqlen_k_global=None, heads_q_global=None, heads_kv_global=None, cu_seqlens_q_global=None,
          cu_seqlens_k_global=None, force: bool = False):
    """The ops' (positions, q_offsets, k_offsets, cu_seqlens_q_global, cu_seqlens_k_global) of a call's keywords:
    PLAIN when every keyword has its default (a plain call, the module without position offsets), unless `force`
    (the call runs the module with position offsets at these values, zeros included). Dense calls take q_offset and
    k_offset as ints with seqlen_q_global / seqlen_k_global; varlen calls per sequence: q_offset and k_offset an int
    (every sequence) or `batch` values, cu_seqlens_q_global / cu_seqlens_k_global `batch` + 1 offsets (lists or
    int32 tensors; moved to `device`)."""
    given = not all(_is_zero(v) for v in (q_offset, k_offset, head_offset, seqlen_q_global, seqlen_k_global,
                                          heads_q_global, heads_kv_global)) or (
        cu_seqlens_q_global is not None or cu_seqlens_k_global is not None)
    if not given and not force:
        return PLAIN
    ints = [0, 0, 0, 0, _natural("head_offset", head_offset), _natural("heads_q_global", heads_q_global or 0),
            _natural("heads_kv_global", heads_kv_global or 0)]
    arrays: List[Optional[torch.Tensor]] = [None, None, None, None]
    if not varlen:
        if cu_seqlens_q_global is not None or cu_seqlens_k_global is not None:
            raise ValueError("cu_seqlens_q_global and cu_seqlens_k_global are for varlen calls (with cu_seqlens_q/k); "
                             "dense calls pass seqlen_q_global and seqlen_k_global")
        ints[0], ints[1] = _natural("q_offset", q_offset), _natural("k_offset", k_offset)
        ints[2] = _natural("seqlen_q_global", seqlen_q_global or 0)
        ints[3] = _natural("seqlen_k_global", seqlen_k_global or 0)
        return (ints, *arrays)
    if seqlen_q_global is not None or seqlen_k_global is not None:
        raise ValueError("varlen: pass the larger problem's sequences as cu_seqlens_q_global / cu_seqlens_k_global, "
                         "not seqlen_q_global / seqlen_k_global")
    for i, (name, value) in enumerate((("q_offset", q_offset), ("k_offset", k_offset))):
        if _is_zero(value):
            continue
        if not isinstance(value, torch.Tensor) and hasattr(value, "__index__"):
            value = [_natural(name, value)] * batch  # one offset for every sequence
        arrays[i] = _int32_array(name, value, batch, device)
    for i, (name, value) in enumerate((("cu_seqlens_q_global", cu_seqlens_q_global),
                                       ("cu_seqlens_k_global", cu_seqlens_k_global))):
        if value is not None:
            arrays[2 + i] = _int32_array(name, value, batch + 1, device)
    return (ints, *arrays)


def struct(positions: Optional[List[int]], q_offsets, k_offsets, cu_seqlens_q_global,
           cu_seqlens_k_global) -> Tuple[Optional[_lib.Positions], list]:
    """The C ABI's flashtile_positions of the ops' arguments (None for a plain call), and the tensors it points
    into, to be held while the call runs."""
    if positions is None:
        for name, t in (("q_offsets", q_offsets), ("k_offsets", k_offsets),
                        ("cu_seqlens_q_global", cu_seqlens_q_global), ("cu_seqlens_k_global", cu_seqlens_k_global)):
            if t is not None:
                raise ValueError(f"{name} is given but positions is None; a block of a larger problem passes "
                                 f"positions ({', '.join(INT_NAMES)}) too")
        return None, []
    if len(positions) != len(INT_NAMES):
        raise ValueError(f"positions must be {len(INT_NAMES)} ints ({', '.join(INT_NAMES)}), got {len(positions)}")
    c = _lib.Positions()
    for name, value in zip(INT_NAMES, positions):
        setattr(c, name, _lib.c_int(name, value))
    held = []
    for field, t in (("q_offsets", q_offsets), ("k_offsets", k_offsets), ("cu_seqlens_q_global", cu_seqlens_q_global),
                     ("cu_seqlens_k_global", cu_seqlens_k_global)):
        if t is not None:
            if t.dtype != torch.int32 or t.dim() != 1:
                raise ValueError(f"{field} must be a 1-dimensional int32 tensor, got {t.dtype} of shape "
                                 f"{tuple(t.shape)}")
            t = t.contiguous()
            held.append(t)
            setattr(c, field, t.data_ptr())
    return c, held
