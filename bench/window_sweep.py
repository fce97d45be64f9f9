"""The backward of a causal sliding window at several widths, per kernel, on the GPU machine: where a short walk's time
goes.

At one shape (bf16, hd128 by default, batch 2 x seqlen 8k, 16 heads) the causal window (w, 0) runs for each w of
--windows (and w = -1: the plain causal mask). Every K/V tile's block walks about (w + block_n) / block_m query tiles,
so the main kernel's time over w is a line: its slope is the cost of a walk's iteration, its intercept (w -> 0) the
cost of a block without iterations (prologue, K/V loads, dK/dV stores, the dQ writer's drain), times the waves.
For each implementation (flashtile, and FA4 where flash-attn-4 imports) one line per w: the backward's device time
by kernel (torch.profiler, median of --reps calls), the main kernel's (flashtile: the kernel named *_bwd; FA4: its
longest), and TFLOP/s over the pairs the window attends (as bench/backward_bench.py counts them). Then the
least-squares line of the main kernel's time over the query tiles a block walks, per implementation.
"""

import argparse
import statistics

from fa4_peer import load_fa4

import torch
import flashtile


def attended_pairs(s, w):
    if w < 0 or w >= s:
        return s * (s + 1) / 2
    return w * (w + 1) / 2 + (s - w) * (w + 1)


def kernel_times(fn, reps):
    """Median device time (ms) of each kernel name over reps calls of fn."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    per = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per.setdefault(ev.name, []).append(ev.device_time_total / 1000.0)
    return {name: statistics.median(ts) * len(ts) / reps for name, ts in per.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hd", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--windows", default="128,256,512,1024,2048,4096,-1")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--block-m", type=int, default=64, help="flashtile's Q tile rows (the fit's x axis)")
    parser.add_argument("--block-n", type=int, default=128)
    args = parser.parse_args()
    heads, s, hd = 2048 // args.hd, args.seqlen, args.hd
    torch.manual_seed(0)
    q, k, v = (torch.randn(args.batch, s, heads, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    impls = {"flashtile": flashtile.flash_attn_func}
    fa4 = load_fa4()
    if fa4 is not None:
        impls["fa4"] = fa4.flash_attn_func
    print(torch.cuda.get_device_name(), f"hd{hd} s{s} b{args.batch} h{heads}")
    fits = {}
    for name, attn in impls.items():
        for w in (int(x) for x in args.windows.split(",")):
            out = attn(q, k, v, causal=True, window_size=(w, 0) if w >= 0 else (-1, -1))
            out = out[0] if isinstance(out, tuple) else out
            do = torch.randn_like(out)
            times = kernel_times(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True), args.reps)
            main_name = max(times, key=times.get)
            if name == "flashtile":
                main_name = next((n for n in times if n.endswith("_bwd")), main_name)
            total, main_ms = sum(times.values()), times[main_name]
            flops = 2.5 * 4 * args.batch * heads * attended_pairs(s, w) * hd
            walk = ((w if w >= 0 else s) + args.block_n) / args.block_m
            if w >= 0:
                fits.setdefault(name, []).append((min(walk, s / args.block_m), main_ms))
            others = ", ".join(f"{n[:40]} {t * 1000:.0f} us" for n, t in sorted(times.items(), key=lambda x: -x[1])
                               if n != main_name)
            print(f"{name:9} w={w:5}: total {total:.3f} ms, main {main_ms:.3f} ms, "
                  f"{flops / total / 1e9:.0f} TFLOP/s (main {flops / main_ms / 1e9:.0f}); others: {others}", flush=True)
    for name, pts in fits.items():
        n = len(pts)
        mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
        slope = sum((x - mx) * (y - my) for x, y in pts) / max(sum((x - mx) ** 2 for x, _ in pts), 1e-12)
        icpt = my - slope * mx
        print(f"fit {name}: main kernel ms = {icpt:.4f} + {slope * 1000:.2f} us x (query tiles of {args.block_m} "
              f"rows a block walks)")


if __name__ == "__main__":
    main()
