"""Timings of the Python package on a GPU machine (bench/device/python-check.sh runs it):

- call overhead: host time per call of a loop of tiny attention calls (B=1, S=128, one head, d=64, bf16), whose
  kernels take less than the call, so the loop measures the Python call → kernel launch path: flash_attn_func
  (its warm path for a call shape seen before, and its fully checked path), the torch.library op, the C ABI alone
  through ctypes (the 22-argument flashtile_forward_variant and the one-struct flashtile_forward_call), and torch's
  scaled_dot_product_attention as a yardstick;
- first call of a new variant in a fresh process with an empty kernel cache (MLIR + NVRTC + module load), and of
  the same variant in another fresh process with the cache on disk (the disk-cache hit), each split into loading
  the library, creating the runtime, registering the variant (tracing it) and the call itself; the MLIR half of
  the compile is timed after the call (flashtile.compile_variant to CUDA, warm), so NVRTC is roughly the rest.
Prints markdown tables (with the numbers measured before the warm paths, 2026-12-01) and writes JSON to --json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

FIRST_CALL = r"""
import json, os, sys, time, torch, flashtile
from flashtile import _lib, dsl
q = torch.randn(1, 512, 4, 128, device="cuda", dtype=torch.bfloat16)
torch.nn.functional.scaled_dot_product_attention(q, q, q)  # CUDA context and torch's kernels ready
torch.cuda.synchronize()
tag = sys.argv[1]
def score(s, c, p):  # a variant no cache has seen: its name and a constant come from the run's tag
    return s * p["gain"] + dsl.to_float(c.kv - c.q) * float(tag.split("_")[-1]) * 1e-9
variant = flashtile.Variant("probe_" + tag).param("gain", 1.0).score(score)
start = time.perf_counter()
library = _lib.library()
loaded = time.perf_counter()
library.runtime()
created = time.perf_counter()
variant.id  # traced and registered
registered = time.perf_counter()
flashtile.attention(q, q, q, variant)
torch.cuda.synchronize()
done = time.perf_counter()
mlir = time.perf_counter()
flashtile.compile_variant(variant.description(), "cuda", "bf16", 128)
mlir = time.perf_counter() - mlir
print(json.dumps({"total": done - start, "library": loaded - start, "runtime": created - loaded,
                  "variant": registered - created, "call": done - registered, "mlir_warm": mlir}))
"""

# Measured on the H200 before the warm paths, the shape-class notes and the one-struct call (2026-12-01).
BEFORE = {
    "flash_attn_func (eager)": 37.5,
    "C ABI through ctypes (flashtile_forward_variant)": 9.8,
    "first call, new variant, empty cache (s)": 1.166,
    "first call, same variant, disk cache (ms)": 7.5,
}


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

    shape = attn._call_fields(q, k, v, out, None, 0, 0, 0.0, b"causal", [], 0)
    template = bytes(shape)

    def raw_call():
        call = _lib.Call.from_buffer_copy(template)
        _lib.POINTERS.pack_into(call, _lib.POINTERS_OFFSET, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                lse.data_ptr(), 0, 0, stream)
        lib.lib.flashtile_forward_call(rt, ctypes.addressof(call))

    def checked():
        attn._flash_attn_func_checked(q, k, v, 0.0, None, True, (-1, -1), 0.0, None, False)

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    variant = flashtile.variants.softcap(20.0)
    rows = {
        "flash_attn_func (eager)": lambda: flashtile.flash_attn_func(q, k, v, causal=True),
        "flash_attn_func, every check (its first call of a shape)": checked,
        "torch.ops.flashtile.fwd": lambda: torch.ops.flashtile.fwd(q, k, v, None, None, 0, 0, 0.125, "causal", [], []),
        "C ABI through ctypes (flashtile_forward_variant)": raw,
        "C ABI through ctypes (flashtile_forward_call)": raw_call,
        "attention() with a Python variant": lambda: attn.attention(q, k, v, variant, params={"cap": 20.0}),
        "torch SDPA (yardstick)": lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
    }
    return {name: per_call(fn, iters) * 1e6 for name, fn in rows.items()}


def first_calls():
    tag = f"{os.getpid()}_{int(time.time())}"
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, FLASHTILE_CACHE_DIR=cache)
        env.pop("FLASHTILE_DISABLE_CACHE", None)
        run = lambda: json.loads(subprocess.check_output([sys.executable, "-c", FIRST_CALL, tag], env=env).splitlines()[-1])  # noqa: E731
        cold = run()
        warm = run()
    return {"first call, new variant, empty cache (s)": cold["total"],
            "first call, same variant, disk cache (ms)": warm["total"] * 1e3,
            "phases, empty cache (ms)": {k: v * 1e3 for k, v in cold.items()},
            "phases, disk cache (ms)": {k: v * 1e3 for k, v in warm.items()}}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch

    print(f"# flashtile Python timings on {torch.cuda.get_device_name()} (torch {torch.__version__})\n")
    calls = overhead(args.iters)
    print("| call (B=1, S=128, one head, d=64, bf16, causal) | µs per call (host) | before (2026-12-01) |\n"
          "| --- | --- | --- |")
    for name, us in calls.items():
        before = BEFORE.get(name)
        print(f"| {name} | {us:.1f} | {'' if before is None else before} |")
    first = first_calls()
    print("\n| first call | value | before (2026-12-01) |\n| --- | --- | --- |")
    for name, value in first.items():
        if isinstance(value, dict):
            phases = ", ".join(f"{k} {v:.1f}" for k, v in value.items())
            print(f"| {name} | {phases} | |")
        else:
            print(f"| {name} | {value:.3f} | {BEFORE[name]} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"call_overhead_us": calls, "first_call": first, "before": BEFORE}, f, indent=1)


if __name__ == "__main__":
    main()
