#!/usr/bin/env python3
"""Times kernels of several `flashtile aot` directories on the same shapes, in one process: which tiling is faster
for which variant, head dim and sequence length (the data behind Fa2Config's defaults and shape classes).

  python3 bench/shape_sweep.py --lib .device/lib/libflashtile.so --aot-dirs .device/aot,.device/sweep/bm64 \\
      --variants causal,softcap_causal --head-dims 128 --seqlens 512,1024,2048

Dense bf16, B = tokens / seqlen, H = hidden / head_dim, Sq = Sk; useful TFLOP/s (4*D*attended pairs), median of
CUDA-event or triton timings. A kernel a directory lacks is shown as '-'. Correctness is check_variants.py's job.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import Flashtile, bench  # noqa: E402
from check_variants import VARIANTS, call, setup_argtypes  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--aot-dirs", required=True, help="comma-separated `flashtile aot` output directories")
    ap.add_argument("--variants", default="none,causal")
    ap.add_argument("--head-dims", default="128")
    ap.add_argument("--seqlens", default="512,1024,2048,8192")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    ap.add_argument("--hidden", type=int, default=2048, help="heads * head_dim")
    args = ap.parse_args()
    dirs = args.aot_dirs.split(",")
    runtimes = []
    for d in dirs:
        ft = Flashtile(args.lib, d)
        setup_argtypes(ft)
        runtimes.append(ft)
    by_name = {v.name: v for v in VARIANTS}
    print(f"{'variant':22} {'hd':>4} {'seqlen':>6} " + " ".join(f"{os.path.basename(d.rstrip('/')):>12}" for d in dirs)
          + "   (TFLOP/s; last column: best / first)")
    gen = torch.Generator(device="cuda")
    for name in args.variants.split(","):
        var = by_name.get(name)
        for hd in (int(x) for x in args.head_dims.split(",")):
            for s in (int(x) for x in args.seqlens.split(",")):
                b, h = max(1, args.tokens // s), max(1, args.hidden // hd)
                q, k, v = (torch.randn(b, s, h, hd, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                o = torch.empty_like(q)
                lse = torch.empty(b, h, s, device="cuda")
                gen.manual_seed(0)
                inputs = var.inputs(b, h, s, gen) if var else []
                params = var.params if var else []
                if var:
                    pairs = var.mask(s, s, inputs, b).expand(b, 1, s, s).sum().item() / b
                else:  # "none"
                    pairs = s * s
                flops = 4 * b * h * hd * pairs
                row = []
                for ft in runtimes:
                    try:
                        row.append(flops / bench(lambda: call(ft, name, q, k, v, o, lse, params, inputs)) / 1e9)
                    except RuntimeError:
                        row.append(None)
                cells = " ".join(f"{x:12.1f}" if x else f"{'-':>12}" for x in row)
                known = [x for x in row if x]
                gain = f"{max(known) / row[0]:6.2f}" if row[0] and known else "     -"
                print(f"{name:22} {hd:4} {s:6} {cells} {gain}", flush=True)


if __name__ == "__main__":
    main()
