"""Which schedule each call runs through the Python package, end to end on a machine without a GPU: the stand-in
torch beside this file and the fake driver (FakeCuda.c, its path in argv[1]: one sm_90a device) stand in for PyTorch
and libcuda; the JIT compiles for real (NVRTC). Run by test_schedule.py; exits non-zero with a message on the first
failed check."""

import ctypes
import os
import sys
import tempfile

fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # before the runtime opens libcuda.so.1 by that soname

import torch  # noqa: E402  (the stand-in: PYTHONPATH puts this folder first)

import flashtile  # noqa: E402

assert torch.__version__ == "stand-in", "the stand-in torch must come first on PYTHONPATH"

# The runtime's warnings go to the process's standard error: into a file here, to count the fallback's lines; Python's
# own messages (a failed check, a traceback) keep the original standard error.
sys.stderr = os.fdopen(os.dup(2), "w")
log = tempfile.TemporaryFile()
os.dup2(log.fileno(), 2)


def warnings():
    log.seek(0)
    return [line for line in log.read().decode().splitlines() if line.startswith("flashtile: warning:")]


class Params(ctypes.Structure):
    """FlashtileFwdParams (KernelAbi.h), as far as the checks read it."""

    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("lse", ctypes.c_void_p), ("strides", ctypes.c_longlong * 14), ("cu_seqlens_q", ctypes.c_void_p),
                ("cu_seqlens_k", ctypes.c_void_p), ("batch", ctypes.c_int), ("heads_q", ctypes.c_int),
                ("heads_kv", ctypes.c_int), ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int)]


fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaLastParams.restype = ctypes.POINTER(Params)


def check(condition: bool, what: str):
    if not condition:
        raise SystemExit(what)


def expect_error(error, text: str, fn):
    try:
        fn()
    except error as e:
        check(text in str(e), f"expected {error.__name__} with {text!r}, got {e!r}")
        return
    raise SystemExit(f"expected {error.__name__} with {text!r}; the call succeeded")


def tensors(head_dim: int, seqlen_q: int = 2048, seqlen_k: int = 2048):
    """q, k, v of one sequence pair and two heads: 2048 rows keep calls in the default shape class."""
    return (torch.zeros((1, seqlen_q, 2, head_dim), dtype=torch.bfloat16, device="cuda"),
            torch.zeros((1, seqlen_k, 2, head_dim), dtype=torch.bfloat16, device="cuda"),
            torch.zeros((1, seqlen_k, 2, head_dim), dtype=torch.bfloat16, device="cuda"))


def launches_after(fn) -> int:
    before = fake.fakeCudaLaunches()
    fn()
    return fake.fakeCudaLaunches() - before


# fa3 at head dim 128 on sm_90a, by default; the call runs the kernel explain names.
q, k, v = tensors(128)
chosen = flashtile.explain(q, k, v)
check(chosen["schedule"] == "fa3" and chosen["entry"].startswith("flashtile_fa3_") and not chosen["fell_back"],
      f"hd128: {chosen}")
check(chosen["order"] == ["fa3", "fa2"] and chosen["source"] == "jit" and chosen["forced_by"] is None, f"{chosen}")
check(chosen["reason"] == "preferred on sm_90a (order: fa3, fa2)", f"hd128 reason: {chosen['reason']}")
check(launches_after(lambda: flashtile.flash_attn_func(q, k, v)) >= 1, "hd128: nothing launched")

# fa3 at head dims 96 and 32 too (64-byte swizzled tiles), with no log line.
for head_dim in (96, 32):
    qd, kd, vd = tensors(head_dim)
    at = flashtile.explain(qd, kd, vd)
    check(at["schedule"] == "fa3" and not at["fell_back"] and at["entry"].startswith("flashtile_fa3_"),
          f"hd{head_dim}: {at}")
    check(flashtile.flash_attn_func(qd, kd, vd, strict=True) is not None, f"strict at hd{head_dim}")
q96, k96, v96 = tensors(96)
check(not warnings(), f"fa3 at hd96/hd32: log lines {warnings()}")

# A schedule without a kernel for a call falls back with one log line for any number of calls: fa3 named where it has
# no lowering (an sm_80 GPU, asked through arch=).
for _ in range(2):
    fell = flashtile.explain(q96, k96, v96, schedule="fa3", arch="sm_80")
check(fell["schedule"] == "fa2" and fell["fell_back"] and fell["entry"].startswith("flashtile_fa2_"), f"sm_80: {fell}")
check("schedule 'fa3' (named by the call) has no kernel" in fell["reason"] and "sm_80" in fell["reason"],
      f"sm_80 reason: {fell['reason']}")
check(len(warnings()) == 1 and "running 'fa2' instead" in warnings()[0], f"sm_80 log lines: {warnings()}")

# Decode-sized calls: the decode schedule.
q1, k1, v1 = tensors(128, seqlen_q=1)
check(flashtile.explain(q1, k1, v1)["schedule"] == "decode", "one query row: not decode")

# schedule= forces a schedule; strict=True makes a missing kernel an error instead of a fallback.
named = flashtile.explain(q, k, v, schedule="fa2")
check(named["schedule"] == "fa2" and named["forced_by"] == "the call" and named["reason"] == "named by the call",
      f"schedule='fa2': {named}")
check(launches_after(lambda: flashtile.flash_attn_func(q, k, v, schedule="fa2")) >= 1, "schedule='fa2': no launch")
check(launches_after(lambda: flashtile.attention(q, k, v, "none", schedule="fa2", strict=True)) >= 1,
      "attention(schedule='fa2', strict=True): no launch")
check(flashtile.flash_attn_func(q, k, v, strict=True) is not None, "strict at hd128")
check(flashtile.flash_attn_func(q96, k96, v96, schedule="fa3", strict=True) is not None, "strict fa3 at hd96")
expect_error(flashtile.FlashtileError, "strict schedule mode",
             lambda: flashtile.explain(q96, k96, v96, schedule="fa3", strict=True, arch="sm_80"))
expect_error(flashtile.FlashtileError, "schedule 'fa3' (named by the call) has no kernel",
             lambda: flashtile.explain(q96, k96, v96, schedule="fa3", strict=True, arch="sm_80"))
# Without a schedule named, sm_80's order is fa2 alone: no fallback, no log line.
plain = flashtile.explain(q96, k96, v96, arch="sm_80")
check(plain["schedule"] == "fa2" and not plain["fell_back"] and plain["order"] == ["fa2"], f"sm_80 default: {plain}")
check(len(warnings()) == 1, f"log lines after the strict calls: {warnings()}")
expect_error(ValueError, "schedule: 'fa 3' is not a schedule name",
             lambda: flashtile.flash_attn_func(q, k, v, schedule="fa 3"))
expect_error(TypeError, "schedule must be a schedule name", lambda: flashtile.flash_attn_func(q, k, v, schedule=3))
expect_error(TypeError, "strict must be True or False", lambda: flashtile.flash_attn_func(q, k, v, strict="yes"))
expect_error(ValueError, "explain: params and inputs are a variant's",
             lambda: flashtile.explain(q, k, v, params={"cap": 1.0}))

# The KV-cache call takes them too: only the decode schedule reads caches, so strict fa2 is an error naming it.
k_cache = torch.zeros((1, 256, 2, 128), dtype=torch.bfloat16, device="cuda")
v_cache = torch.zeros((1, 256, 2, 128), dtype=torch.bfloat16, device="cuda")
expect_error(flashtile.FlashtileError, "schedule 'fa2' (named by the call) has no kernel",
             lambda: flashtile.flash_attn_with_kvcache(q1, k_cache, v_cache, cache_seqlens=100, schedule="fa2",
                                                      strict=True))

# flash_attn_varlen_func with every key sequence empty: null k and v reach the launch (O = 0, LSE = -inf there).
qv = torch.zeros((4096, 2, 128), dtype=torch.bfloat16, device="cuda")
kv, vv = (torch.zeros((0, 2, 128), dtype=torch.bfloat16, device="cuda") for _ in range(2))
cu_q, cu_k = (torch.zeros((3,), dtype=torch.int32, device="cuda") for _ in range(2))
check(flashtile.explain(qv, kv, vv, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=2048,
                        max_seqlen_k=0)["schedule"] == "fa3", "varlen without keys: not fa3")
check(launches_after(lambda: flashtile.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 2048, 0)) >= 1,
      "varlen without keys: nothing launched")
params = fake.fakeCudaLastParams().contents
check(not params.k and not params.v and params.seqlen_k == 0 and params.seqlen_q == 4096,
      f"varlen without keys: k {params.k}, v {params.v}, rows {params.seqlen_q}/{params.seqlen_k}")
check(len(warnings()) == 1, f"log lines at the end: {warnings()}")
print("schedule calls: ok")
