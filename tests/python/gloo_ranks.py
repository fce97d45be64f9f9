"""The multi-process tests' helpers (tests/python and tests/python/gpu).

run_ranks: `world` spawned processes each running target(rank, world, init_file, queue, *args), which puts one (rank,
report) pair on the queue; returns {rank: report}. A rank that does not report within `timeout` seconds fails the
caller's queue.get; every process is joined (or terminated) before the call returns.
failures: the failed checks of reports whose entries are (case, [(name, ok, detail), ...] or a traceback string).
import_ring_flash_attn: ring-flash-attn's ring functions (see its docstring)."""

import importlib
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import types


def run_ranks(target, world, args=(), timeout=300):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as scratch:
        init_file = os.path.join(scratch, "rendezvous")
        workers = [context.Process(target=target, args=(r, world, init_file, queue) + tuple(args), daemon=True)
                   for r in range(world)]
        for w in workers:
            w.start()
        try:
            return dict(queue.get(timeout=timeout) for _ in workers)
        finally:
            for w in workers:
                w.join(timeout=60)
                if w.is_alive():
                    w.terminate()


def failures(reports):
    out = []
    for rank, results in sorted(reports.items()):
        for case, result in results:
            if isinstance(result, str):
                out.append(f"rank {rank} {case}: {result}")
                continue
            out += [f"rank {rank} {case} {name}: {detail}" for name, ok, detail in result if not ok]
    return out


def import_ring_flash_attn():
    """ring-flash-attn's ring functions. Its package __init__ also imports its Hugging Face adapter, which needs
    transformers: without transformers the package is entered without running that file."""
    if importlib.util.find_spec("transformers") is None and "ring_flash_attn" not in sys.modules:
        package = types.ModuleType("ring_flash_attn")
        package.__path__ = list(importlib.util.find_spec("ring_flash_attn").submodule_search_locations)
        sys.modules["ring_flash_attn"] = package
        from ring_flash_attn.ring_flash_attn import ring_flash_attn_func
        from ring_flash_attn.zigzag_ring_flash_attn import zigzag_ring_flash_attn_func
        package.ring_flash_attn_func, package.zigzag_ring_flash_attn_func = ring_flash_attn_func, \
            zigzag_ring_flash_attn_func
    return importlib.import_module("ring_flash_attn")
