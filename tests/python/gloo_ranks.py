"""The CPU tests' process group: `world` spawned processes each running target(rank, world, init_file, queue), which
puts one (rank, report) pair on the queue; returns {rank: report}. A rank that does not report within five minutes
fails the caller's queue.get; every process is joined (or terminated) before the call returns."""

import multiprocessing
import os
import tempfile


def run_ranks(target, world):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as scratch:
        init_file = os.path.join(scratch, "rendezvous")
        workers = [context.Process(target=target, args=(r, world, init_file, queue), daemon=True)
                   for r in range(world)]
        for w in workers:
            w.start()
        try:
            return dict(queue.get(timeout=300) for _ in workers)
        finally:
            for w in workers:
                w.join(timeout=60)
                if w.is_alive():
                    w.terminate()
