"""Blocks of a larger problem through the Python package, end to end on a machine without a GPU: the stand-in torch
beside this file and the fake driver (FakeCuda.c, its path in argv[1]: one sm_90a device) stand in for PyTorch and
libcuda; the JIT compiles for real (NVRTC). A call with position keywords runs a kernel compiled with position offsets
and its launch's second parameter holds them (FlashtilePositions); the plain call of the same shape runs the plain
kernel with nothing there; the backward op's three kernels get the positions too; bad values are refused by the
runtime naming the field. Run by test_positions_host.py; exits non-zero with a message on the first failed check."""

import ctypes
import sys

fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # before the runtime opens libcuda.so.1 by that soname

import torch  # noqa: E402  (the stand-in: PYTHONPATH puts this folder first)

import flashtile  # noqa: E402
from flashtile import _lib  # noqa: E402

assert torch.__version__ == "stand-in", "the stand-in torch must come first on PYTHONPATH"


class Positions(ctypes.Structure):
    """FlashtilePositions (PositionsAbi.h)."""

    _fields_ = [("q_offset", ctypes.c_int), ("k_offset", ctypes.c_int), ("seqlen_q_global", ctypes.c_int),
                ("seqlen_k_global", ctypes.c_int), ("q_offsets", ctypes.c_void_p), ("k_offsets", ctypes.c_void_p),
                ("cu_seqlens_q_global", ctypes.c_void_p), ("cu_seqlens_k_global", ctypes.c_void_p),
                ("head_offset", ctypes.c_int), ("heads_q_global", ctypes.c_int), ("heads_kv_global", ctypes.c_int)]


fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaLastSecond.restype = ctypes.POINTER(Positions)


def check(condition: bool, what: str):
    if not condition:
        raise SystemExit(what)


def second():
    p = fake.fakeCudaLastSecond().contents
    return tuple(getattr(p, name) for name, _ in Positions._fields_)


def launched(fn) -> int:
    before = fake.fakeCudaLaunches()
    fn()
    return fake.fakeCudaLaunches() - before


q = torch.zeros((2, 256, 8, 64), dtype=torch.bfloat16, device="cuda")
k = torch.zeros((2, 256, 2, 64), dtype=torch.bfloat16, device="cuda")
place = dict(q_offset=256, k_offset=128, seqlen_q_global=1024, seqlen_k_global=512, head_offset=8, heads_q_global=16,
             heads_kv_global=4)
want = (256, 128, 1024, 512, None, None, None, None, 8, 16, 4)

# A block: the module with position offsets, its positions second.
check(launched(lambda: flashtile.attention(q, k, k, "sliding_window", params={"left": 64, "right": 0}, schedule="fa2",
                                           **place)) == 1, "block: not one launch")
check(second() == want, f"block: second parameter {second()}, expected {want}")
# The plain call of the same shape: the plain module, nothing but (empty) tensor maps second.
check(launched(lambda: flashtile.attention(q, k, k, "sliding_window", params={"left": 64, "right": 0},
                                           schedule="fa2")) == 1, "plain: not one launch")
check(second() == (0, 0, 0, 0, None, None, None, None, 0, 0, 0), f"plain: second parameter {second()}")
entry = flashtile.explain(q, k, k, "sliding_window", params={"left": 64, "right": 0}, schedule="fa2")["entry"]

# The backward op: preprocess, main and postprocess, each with the positions.
out = torch.zeros((2, 256, 8, 64), dtype=torch.bfloat16, device="cuda")
lse = torch.zeros((2, 8, 256), dtype=torch.float32, device="cuda")
ops_positions = [place[n] for n in ("q_offset", "k_offset", "seqlen_q_global", "seqlen_k_global", "head_offset",
                                    "heads_q_global", "heads_kv_global")]
n = launched(lambda: torch.ops.flashtile.bwd(out, q, k, k, out, lse, None, None, 0, 0, 0.125, "causal", [], [], [],
                                             "fa2", False, False, ops_positions, None, None, None, None))
check(n >= 2, f"backward: {n} launches")
check(second() == want, f"backward: last kernel's second parameter {second()}, expected {want}")

# Varlen: per-sequence device arrays.
qv = torch.zeros((300, 8, 64), dtype=torch.bfloat16, device="cuda")
kv = torch.zeros((300, 2, 64), dtype=torch.bfloat16, device="cuda")
cu = torch.full((3,), 0, dtype=torch.int32, device="cuda")
offsets = torch.full((2,), 0, dtype=torch.int32, device="cuda")
globals_ = torch.full((3,), 0, dtype=torch.int32, device="cuda")
check(launched(lambda: flashtile.attention(qv, kv, kv, "causal", cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=200,
                                           max_seqlen_k=200, schedule="fa2", q_offset=offsets,
                                           cu_seqlens_k_global=globals_)) == 1, "varlen block: not one launch")
got = second()
check(got[:4] == (0, 0, 0, 0) and got[4] == offsets.data_ptr() and got[5] is None and got[6] is None
      and got[7] == globals_.data_ptr(), f"varlen block: second parameter {got}")


def refused(text, **keywords):
    try:
        flashtile.attention(q, k, k, "causal", schedule="fa2", **keywords)
    except (_lib.FlashtileError, ValueError, TypeError) as e:
        check(text in str(e), f"expected {text!r}, got {e!r}")
        return
    raise SystemExit(f"expected an error with {text!r}; the call succeeded")


# Values the runtime refuses, named; and the Python keywords.
refused("positions: qOffset + seqlenQ = 900 + 256 is past the larger problem's seqlenQGlobal = 1024",
        q_offset=900, seqlen_q_global=1024)
refused("positions: headOffset (2), headsQGlobal (16) and headsKvGlobal (4)", head_offset=2, heads_q_global=16,
        heads_kv_global=4)
refused("q_offset is -3; it must be >= 0", q_offset=-3)
refused("cu_seqlens_q_global and cu_seqlens_k_global are for varlen calls", cu_seqlens_q_global=[0, 1, 2])
print("positions calls: ok")
