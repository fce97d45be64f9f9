#!/usr/bin/env python3
"""A list-scheduling model of the FA2 kernels' block order (bench/NOTES.md v11); no GPU, no PyTorch.

Blocks start in about linear order (x fastest) on `slots` concurrent block slots (SMs x blocks per SM); a block's
time is the K/V tiles it walks plus a fixed prologue/epilogue cost. For causal grids (blockM-row Q tiles,
blockN-key tiles, batch*heads pairs) it prints the makespan relative to the ideal (total work / slots) for
  per-pair     Q tiles last-to-first within each (batch, head) pair, pairs in order (lptGroupBlocks = 0);
  global LPT   every block of the grid sorted longest first;
  groups of N  pairs in groups of >= N blocks, each group's Q tiles last-to-first (lptGroupBlocks = N).
The model ignores that blocks sharing an SM speed up when alone, so it overstates tail effects; it is for
choosing between orders, not for predicting TFLOP/s.
"""
import argparse
import heapq
import math


def makespan(times, slots):
    free = [0.0] * slots
    for t in times:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def orders(seqlen, pairs, block_m, block_n, prologue, groups):
    q_tiles = seqlen // block_m
    walk = [(q + 1) * block_m / block_n + prologue for q in range(q_tiles)]  # causal: tiles up to the diagonal
    per_pair = [walk[q_tiles - 1 - x] for _ in range(pairs) for x in range(q_tiles)]
    result = {"per-pair": per_pair, "global LPT": sorted(per_pair, reverse=True)}
    for n in groups:
        group_pairs = max(1, min(pairs, math.ceil(n / q_tiles)))
        order = []
        for first in range(0, pairs, group_pairs):
            size = min(group_pairs, pairs - first)
            order += [walk[q_tiles - 1 - x] for x in range(q_tiles) for _ in range(size)]
        result[f"groups of {n}"] = order
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slots", type=int, default=264, help="concurrent blocks (H200: 132 SMs x 2)")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen, as bench_attention.py")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--block-m", type=int, default=128)
    ap.add_argument("--block-n", type=int, default=64)
    ap.add_argument("--prologue", type=float, default=1.0, help="fixed cost of a block, in K/V tiles")
    ap.add_argument("--seqlens", default="1024,2048,4096,8192,16384")
    ap.add_argument("--groups", default="256,512,768")
    args = ap.parse_args()
    groups = [int(g) for g in args.groups.split(",")]
    for seqlen in map(int, args.seqlens.split(",")):
        pairs = max(1, args.tokens // seqlen) * args.heads
        times = orders(seqlen, pairs, args.block_m, args.block_n, args.prologue, groups)
        ideal = sum(times["per-pair"]) / args.slots
        cells = ", ".join(f"{name} {makespan(t, args.slots) / ideal:.3f}" for name, t in times.items())
        print(f"causal {seqlen:6} tokens, {pairs:4} pairs: makespan / ideal: {cells}")


if __name__ == "__main__":
    main()
