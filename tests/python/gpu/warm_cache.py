"""Compiles, in parallel processes, every kernel the flash-attn test port needs, so that the tests find them in the
disk cache (FLASHTILE_CACHE_DIR) instead of compiling the same kernel in every pytest worker."""

import itertools
import multiprocessing
import os
import sys
import time

# (seqlen_q, seqlen_k): one call per shape class (the short class averages <= 1024 rows, the default more).
SHAPES = [(256, 256), (1040, 1040)]
HEAD_DIMS = [32, 64, 96, 128, 192, 256]  # the port's head dims run as these (smaller ones zero-padded)


def jobs():
    return list(itertools.product(["float16", "bfloat16"], HEAD_DIMS, [0.0, 50.0], [False, True],
                                  ["none", "causal", "window", "window_causal"], SHAPES))


def run(chunk):
    import torch

    import flashtile

    for dtype, d, softcap, alibi, mask, (sq, sk) in chunk:
        dt = getattr(torch, dtype)
        q = torch.randn(1, sq, 2, d, device="cuda", dtype=dt)
        k = torch.randn(1, sk, 2, d, device="cuda", dtype=dt)
        window = {"window": (64, 16), "window_causal": (64, 0)}.get(mask, (-1, -1))
        slopes = torch.rand(1, 2, device="cuda") if alibi else None
        flashtile.flash_attn_func(q, k, k, causal=mask == "causal", window_size=window, softcap=softcap,
                                  alibi_slopes=slopes)
    torch.cuda.synchronize()
    return len(chunk)


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count()
    todo = jobs()
    chunks = [todo[i::workers] for i in range(workers)]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        done = sum(pool.map(run, chunks))
    print(f"warm_cache: {done} configurations in {time.perf_counter() - start:.1f} s with {workers} processes")
