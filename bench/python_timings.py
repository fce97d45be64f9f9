"""Timings of the Python package on a GPU machine (bench/device/python-check.sh runs it):

- call overhead: host time per call of a loop of tiny attention calls (B=1, S=128, one head, d=64, bf16), whose
  kernels take less than the call, so the loop measures the Python call → kernel launch path; the same for the
  torch.library op, the C ABI alone (ctypes), and torch's scaled_dot_product_attention as a yardstick;
- first call of a new variant in a fresh process with an empty kernel cache (MLIR + NVRTC + module load), and of
  the same variant in another fresh process with the cache on disk (the disk-cache hit).
Prints a markdown table and writes JSON to --json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

FIRST_CALL = r"""
import os, sys, time, torch, flashtile
from flashtile import dsl
q = torch.randn(1, 512, 4, 128, device="cuda", dtype=torch.bfloat16)
torch.nn.functional.scaled_dot_product_attention(q, q, q)  # CUDA context and torch's kernels ready
torch.cuda.synchronize()
tag = sys.argv[1]
def score(s, c, p):  # a variant no cache has seen: its name and a constant come from the run's tag
    return s * p["gain"] + dsl.to_float(c.kv - c.q) * float(tag.split("_")[-1]) * 1e-9
variant = flashtile.Variant("probe_" + tag).param("gain", 1.0).score(score)
start = time.perf_counter()
flashtile.attention(q, q, q, variant)
torch.cuda.synchronize()
print(time.perf_counter() - start)
"""


def per_call(fn, iters):
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - start) / iters
    torch.cuda.synchronize()
    return host


def overhead(iters):
    import ctypes

    import torch

    import flashtile
    from flashtile import _lib
    from flashtile import interface as attn

    q = torch.randn(1, 128, 1, 64, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    out = torch.empty_like(q)
    lse = torch.empty(1, 1, 128, device="cuda", dtype=torch.float32)
    lib = _lib.library()
    rt = lib.runtime()
    stride = (ctypes.c_longlong * 4)(*q.stride())
    stream = torch.cuda.current_stream().cuda_stream

    def raw():
        lib.lib.flashtile_forward_variant(rt, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                          lse.data_ptr(), 1, 1, 128, 128, 1, 1, 64, 64, stride, stride, stride, stride,
                                          0.0, b"causal", None, stream)

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    rows = {
        "flash_attn_func (eager)": lambda: flashtile.flash_attn_func(q, k, v, causal=True),
        "torch.ops.flashtile.fwd": lambda: torch.ops.flashtile.fwd(q, k, v, None, None, 0, 0, 0.125, "causal", [], []),
        "C ABI through ctypes": raw,
        "attention() with a Python variant": None,
        "torch SDPA (yardstick)": lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
    }
    variant = flashtile.variants.softcap(20.0)
    rows["attention() with a Python variant"] = lambda: attn.attention(q, k, v, variant, params={"cap": 20.0})
    return {name: per_call(fn, iters) * 1e6 for name, fn in rows.items()}


def first_calls():
    tag = f"{os.getpid()}_{int(time.time())}"
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, FLASHTILE_CACHE_DIR=cache)
        env.pop("FLASHTILE_DISABLE_CACHE", None)
        run = lambda: float(subprocess.check_output([sys.executable, "-c", FIRST_CALL, tag], env=env).split()[-1])  # noqa: E731
        cold = run()
        warm = run()
    return {"first call, new variant, empty cache (s)": cold, "first call, same variant, disk cache (ms)": warm * 1e3}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    print(f"# flashtile Python timings on {torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    calls = overhead(args.iters)
    print("| call (B=1, S=128, one head, d=64, bf16, causal) | µs per call (host) |\n| --- | --- |")
    for name, us in calls.items():
        print(f"| {name} | {us:.1f} |")
    first = first_calls()
    print("\n| first call | value |\n| --- | --- |")
    for name, value in first.items():
        print(f"| {name} | {value:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"call_overhead_us": calls, "first_call": first}, f, indent=1)


if __name__ == "__main__":
    main()
