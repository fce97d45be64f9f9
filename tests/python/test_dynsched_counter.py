"""The runtime zeroes the tile counter of fa3's dynamic-scheduler kernels on the launch's stream before every launch,
in the runtime's own workspace or the caller's, on a machine without a GPU: host/dynsched_counter.py builds the
kernels with the flashtile CLI (FLASHTILE_CLI, set by the build's test registration) and runs them against a fake
libcuda.so.1 built here from FakeCuda.c, with a probe of the parameter block (DynschedProbe.c). Skipped without
the CLI, a C compiler, cuda.h or NVRTC."""

import os
import unittest

from fake_driver import run_host_script


class DynamicSchedulerCounter(unittest.TestCase):
    def test_each_launch_zeroes_its_counter(self):
        if not os.environ.get("FLASHTILE_CLI"):
            self.skipTest("FLASHTILE_CLI is not set (the build's test registration sets it)")
        run_host_script(self, "dynsched_counter.py", "dynsched counter: ok", probes=["DynschedProbe.c"],
                        stand_in_torch=False)


if __name__ == "__main__":
    unittest.main()
