"""The runtime launches an fa1 kernel once per K/V tile, with the state workspace, on a machine without a GPU:
host/fa1_steps.py runs in a child process with a fake libcuda.so.1 built here from FakeCuda.c and a probe of the
parameter block (Fa1StepsProbe.c). Skipped without a C compiler, cuda.h or NVRTC (the JIT compiles the kernel for
real)."""

import unittest

from fake_driver import run_host_script


class Fa1Steps(unittest.TestCase):
    def test_one_launch_per_kv_tile(self):
        run_host_script(self, "fa1_steps.py", "fa1 steps: ok", probes=["Fa1StepsProbe.c"], stand_in_torch=False)


if __name__ == "__main__":
    unittest.main()
