"""The backward's GPU time by kernel: flashtile's (its preprocess, main kernel and dQ postprocess) beside FA4's
SM90 backward (where bench/device/fa4-install.sh installed it) and cuDNN's, at the shapes given, from
torch.profiler's CUDA activity (device time), beside the call's time alone (CUDA events around one call, as
bench/backward_bench.py times it), back to back, and the host's issue time.

Where the backward trails at short sequences (hd128 1k causal ran 0.60x FA4 on 2026-12-07) this says whether the
main kernel or the fixed kernels around it hold the difference.

    python3 bench/backward_kernels.py --shapes 128:1024:1,128:1024:0,128:8192:1   # D:S:causal, 16k tokens, hidden 2048
"""

import argparse
import collections
import time

import torch
from torch.profiler import ProfilerActivity, profile

from backward_bench import time_ms  # bench/ is the script's folder, first on sys.path
from fa4_peer import load_fa4


def shape_arg(text):
    """D:S:C triples: head dim, sequence length, causal (0 or 1)."""
    out = []
    for item in text.split(","):
        d, s, c = (int(x) for x in item.split(":"))
        if c not in (0, 1):
            raise argparse.ArgumentTypeError(f"--shapes: causal must be 0 or 1, got {c} in {item!r}")
        out.append((d, s, bool(c)))
    return out


def forwards(fa4):
    import flashtile

    def ft(q, k, v, causal):
        out = flashtile.flash_attn_func(q, k, v, causal=causal)
        return out[0] if isinstance(out, tuple) else out

    def cudnn(q, k, v, causal):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return out.transpose(1, 2)

    impls = {"flashtile": ft, "cudnn": cudnn}
    if fa4 is not None:
        def fa4_fn(q, k, v, causal):
            out = fa4.flash_attn_func(q, k, v, causal=causal)
            return out[0] if isinstance(out, tuple) else out
        impls["fa4"] = fa4_fn
    return impls


def walls(call, reps):
    """µs of one call timed alone (CUDA events around it, then a sync: as bench/backward_bench.py times it), of one
    call among `reps` issued back to back (the host's launches hidden behind the GPU's work where they are shorter),
    and of the host alone (the calls' issue time, no sync)."""
    alone = time_ms(call, warmup=0, reps=reps) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    host = (time.perf_counter() - t0) / reps * 1e6
    end.record()
    torch.cuda.synchronize()
    return alone, start.elapsed_time(end) * 1e3 / reps, host


def breakdown(fn, d, s, causal, reps):
    """{kernel name: (calls per backward, µs per backward)}, the summed µs per backward, and walls()."""
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = fn(q, k, v, causal)
    do = torch.randn_like(out)
    for _ in range(3):
        torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    torch.cuda.synchronize()
    wall = walls(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True), max(reps, 10))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
        torch.cuda.synchronize()
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time_total > 0:
            entry = kernels[event.name[:70]]
            entry[0] += 1
            entry[1] += event.device_time_total
    table = {name: (n / reps, us / reps) for name, (n, us) in kernels.items()}
    return table, sum(us for _, us in table.values()), wall


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=shape_arg, default=shape_arg("128:1024:1,128:1024:0,128:2048:1,128:8192:1"))
    parser.add_argument("--reps", type=int, default=10, help="backward calls profiled a case (default 10)")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    impls = forwards(load_fa4())
    for d, s, causal in args.shapes:
        print(f"== hd{d} {s // 1024}k {'causal' if causal else 'non-causal'} (batch {16384 // s}, {2048 // d} heads)")
        totals = {}
        for who, fn in impls.items():
            try:
                table, total, (alone, streamed, host) = breakdown(fn, d, s, causal, args.reps)
            except Exception as e:  # a peer that does not run this shape: say so, go on
                print(f"  {who}: failed ({type(e).__name__}: {str(e)[:120]})")
                continue
            totals[who] = total
            print(f"  {who}: {total:8.1f} us of kernels a backward; timed alone {alone:.1f} us, back to back "
                  f"{streamed:.1f} us, host {host:.1f} us a call")
            for name, (calls, us) in sorted(table.items(), key=lambda kv: -kv[1][1]):
                print(f"    {us:8.1f} us  x{calls:g}  {name}")
        if "flashtile" in totals:
            print("  flashtile / peer time: " + ", ".join(
                f"{who} {totals['flashtile'] / t:.2f}" for who, t in totals.items() if who != "flashtile"))


if __name__ == "__main__":
    main()
