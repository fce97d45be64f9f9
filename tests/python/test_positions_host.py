"""Blocks of a larger problem through the Python package on a machine without a GPU: host/positions_calls.py runs in
a child process with the stand-in torch (host/torch) and a fake libcuda.so.1 built from FakeCuda.c, and checks that a
call with position keywords launches a kernel compiled with position offsets whose second parameter holds them (a
plain call's does not), forward, backward and varlen, and that bad values are refused naming the field. Skipped
without a C compiler, cuda.h or NVRTC (the JIT compiles the kernels for real)."""

import unittest

from fake_driver import run_host_script


class PositionsHost(unittest.TestCase):
    def test_positions_calls(self):
        run_host_script(self, "positions_calls.py", "positions calls: ok",
                        env={"FLASHTILE_SCHEDULE": "", "FLASHTILE_STRICT_SCHEDULE": "", "FLASHTILE_LOG": ""})


if __name__ == "__main__":
    unittest.main()
