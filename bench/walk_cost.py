#!/usr/bin/env python3
"""What a thread block costs besides its K/V tiles: time of the sliding_window kernel against the tiles it walks.

The grid stays the same (B x H x Q tiles of blockM rows) while the window's left size changes how many K/V tiles
each block walks, so a least-squares fit  time = fixed * blocks + per_tile * tiles  separates the per-block cost
(prologue: Q and the first K tile copied before any MMA; epilogue: O and LSE stores; the two masked edge tiles'
extra work; launch) from the per-tile cost. Tiles are counted with the kernel's own rule (keys
[first row - left, last row] in blockN-key tiles). The fixed cost is printed in tile-equivalents: that is the
share of a short walk that a schedule could hide by prefetching the next block's Q and first K tile.
"""
import argparse

import torch

from bench_attention import Flashtile, bench
import check_variants


def tiles_walked(s, left, block_m, block_n):
    total = 0
    for first in range(0, s, block_m):
        last = min(first + block_m, s) - 1
        lo = max(first - left, 0) // block_n
        hi = (last + block_n) // block_n
        total += hi - lo
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--aot-dir", required=True)
    ap.add_argument("--lefts", default="0,64,128,256,512,1024,2048,4096")
    ap.add_argument("--block-m", type=int, default=64, help="the sliding_window kernel's blockM")
    ap.add_argument("--block-n", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=8192)
    args = ap.parse_args()
    ft = Flashtile(args.lib, args.aot_dir)
    check_variants.setup_argtypes(ft)
    b, h, d, s = 2, 16, 128, args.seqlen
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda")
    blocks = b * h * ((s + args.block_m - 1) // args.block_m)
    rows = []
    for left in map(int, args.lefts.split(",")):
        t = bench(lambda: check_variants.call(ft, "sliding_window", q, k, v, o, lse, [float(left), 0.0], []))
        tiles = b * h * tiles_walked(s, left, args.block_m, args.block_n)
        rows.append((left, tiles, t))
        print(f"left {left:5}: {tiles / blocks:6.2f} tiles per block, {t * 1e3:8.1f} us, "
              f"{t * 1e3 / (tiles / 132):.3f} us per tile per SM", flush=True)
    a = torch.tensor([[blocks, tiles] for _, tiles, _ in rows], dtype=torch.float64)
    y = torch.tensor([t for _, _, t in rows], dtype=torch.float64)
    fixed, per_tile = torch.linalg.lstsq(a, y[:, None]).solution[:, 0].tolist()
    fit = a @ torch.tensor([fixed, per_tile], dtype=torch.float64)
    worst = ((fit - y).abs() / y).max().item()
    print(f"fit: time = {fixed * 1e6:.3f} ns x blocks + {per_tile * 1e6:.3f} ns x tiles "
          f"(worst residual {worst:.1%}); a block's fixed cost = {fixed / per_tile:.2f} tiles")


if __name__ == "__main__":
    main()
