"""Python call overhead on a GPU machine: a warm flash_attn_func / attention() call against torch's own
scaled_dot_product_attention (FLASH and CUDNN backends) in the same loop, on a tiny problem (B=1, S=128, H=8, d=64,
bf16, causal) whose kernels take less than a call.

Each row is timed `--reps` times, the rows interleaved (one loop of `--iters` calls per row per repetition), and
the median is printed, two ways:
- host µs per call: the loop's calls back to back, no synchronization inside it (one after it, outside the time):
  what a caller's thread spends per call;
- synced µs per call: a torch.cuda.synchronize() after every call: launch to completion, the kernel included.

flashtile runs twice: in this process through the C++ call path (FLASHTILE_EXTENSION=wait: built against this
PyTorch first if it is not cached; the build's time is printed), and in a child process with
FLASHTILE_EXTENSION=off (the ctypes path, the fallback). Both print their rows with the same SDPA rows measured in
their own loop. --json writes every figure.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

PROBLEM = dict(batch=1, seqlen=128, heads=8, head_dim=64)


def rows():
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashtile

    torch.manual_seed(0)
    b, s, h, d = PROBLEM["batch"], PROBLEM["seqlen"], PROBLEM["heads"], PROBLEM["head_dim"]
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # SDPA's layout (B, H, S, d), the same storage
    softcap = flashtile.variants.softcap(20.0)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa_call():
        return sdpa(qt, kt, vt, is_causal=True)

    # (call, the context its loop runs in): a backend is chosen around the loop, not inside each call.
    return {
        "flash_attn_func(q, k, v, causal=True)": (lambda: flashtile.flash_attn_func(q, k, v, causal=True), None),
        "attention(q, k, v, \"causal\")": (lambda: flashtile.attention(q, k, v, "causal"), None),
        "attention(q, k, v, softcap Variant, params={\"cap\": 20.0})":
            (lambda: flashtile.attention(q, k, v, softcap, params={"cap": 20.0}), None),
        "SDPA, is_causal=True (torch's choice)": (sdpa_call, None),
        "SDPA, FLASH_ATTENTION backend": (sdpa_call, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
        "SDPA, CUDNN_ATTENTION backend": (sdpa_call, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)),
    }


def timed(row, loop, iters):
    fn, context = row
    with context() if context else contextlib.nullcontext():
        return loop(fn, iters)


def host_per_call(fn, iters):
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / iters * 1e6


def synced_per_call(fn, iters):
    import torch

    sync = torch.cuda.synchronize
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
        sync()
    return (time.perf_counter() - start) / iters * 1e6


def measure(iters, reps):
    import torch

    import flashtile

    start = time.perf_counter()
    table = rows()
    for row in table.values():  # first calls: kernels compiled or loaded, call shapes filed
        timed(row, host_per_call, 3)
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    host = {name: [] for name in table}
    synced = {name: [] for name in table}
    for _ in range(reps):
        for name, row in table.items():
            host[name].append(timed(row, host_per_call, iters))
        for name, row in table.items():
            synced[name].append(timed(row, synced_per_call, max(iters // 4, 1)))
    return {
        "call_path": flashtile.call_path(),
        "first_calls_s": first,
        "host_us": {n: statistics.median(v) for n, v in host.items()},
        "host_us_all": host,
        "synced_us": {n: statistics.median(v) for n, v in synced.items()},
        "synced_us_all": synced,
    }


def print_table(title, result):
    print(f"\n### {title}\n\ncall path: {result['call_path']}\n")
    print("| call | host µs per call (median) | synced µs per call (median) |\n| --- | --- | --- |")
    for name in result["host_us"]:
        print(f"| {name} | {result['host_us'][name]:.1f} | {result['synced_us'][name]:.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.iters, args.reps)))
        return
    os.environ.setdefault("FLASHTILE_EXTENSION", "wait")
    import torch

    import flashtile

    start = time.perf_counter()
    flashtile.flash_attn_func(*(torch.randn(1, 128, 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3)))
    torch.cuda.synchronize()
    first_call = time.perf_counter() - start
    print(f"# flashtile call overhead on {torch.cuda.get_device_name()} (torch {torch.__version__}, Python "
          f"{sys.version.split()[0]}), B=1 S=128 H=8 d=64 bf16 causal, {args.iters} calls x {args.reps} reps\n")
    print(f"first call of the process (library, runtime, kernel, and the C++ call path if it had to be built): "
          f"{first_call:.2f} s")
    extension = measure(args.iters, args.reps)
    child_env = dict(os.environ, FLASHTILE_EXTENSION="off")
    child = subprocess.run([sys.executable, __file__, "--child", "--iters", str(args.iters), "--reps", str(args.reps)],
                           env=child_env, check=True, capture_output=True, text=True)
    fallback = json.loads(child.stdout.strip().splitlines()[-1])
    print_table("C++ call path (FLASHTILE_EXTENSION=wait)", extension)
    print_table("ctypes path (FLASHTILE_EXTENSION=off), child process", fallback)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"problem": PROBLEM, "first_call_s": first_call, "extension": extension,
                       "ctypes": fallback}, out, indent=1)


if __name__ == "__main__":
    main()
