"""The benchmarks' timer: the median milliseconds of a CUDA callable, by triton.testing.do_bench (25 warm-up runs,
200 ms of repeats) where Triton is installed, else by CUDA events (the median of 100 runs after 10 warm-ups)."""

import torch

try:
    import triton.testing

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
except ImportError:
    def bench(fn):
        for _ in range(10):
            fn()
        times = []
        for _ in range(100):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); e.synchronize()
            times.append(s.elapsed_time(e))
        return sorted(times)[len(times) // 2]
