"""flash_attn_func's and the C ABI's warm paths on a machine without a GPU: host/host_calls.py runs in a child
process with the stand-in torch (host/torch) and a fake libcuda.so.1 built here from FakeCuda.c, and checks what
reaches the driver's launch (pointers, numbers, scale) and that every changed or bad argument is still checked.
Skipped without a C compiler, cuda.h or NVRTC (the JIT compiles the kernels for real)."""

import unittest

from fake_driver import run_host_script


class WarmPath(unittest.TestCase):
    def test_host_calls(self):
        # fa2's kernels, whose grids host_calls.py checks (the fake driver's sm_90a device would run fa3's
        # persistent ones by default; test_schedule.py checks that choice).
        run_host_script(self, "host_calls.py", "host calls: ok", env={"FLASHTILE_SCHEDULE": "fa2"})


if __name__ == "__main__":
    unittest.main()
