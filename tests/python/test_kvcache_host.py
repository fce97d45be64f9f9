"""flash_attn_with_kvcache on a machine without a GPU: host/kvcache_calls.py runs in a child process with the
stand-in torch (host/torch) and a fake libcuda.so.1 built here from FakeCuda.c; it checks the argument errors and
what reaches the kernels' launches; host/kvcache_errors.py the device error record's report (flashtile.check_errors)
and FLASHTILE_CHECK_KVCACHE=1. Skipped without a C compiler, cuda.h or NVRTC (the JIT compiles for real)."""

import unittest

from fake_driver import run_host_script


class KvCacheHostPath(unittest.TestCase):
    def test_kvcache_host_calls(self):
        run_host_script(self, "kvcache_calls.py", "kvcache host calls: ok")

    def test_device_values_are_reported_and_checked(self):
        # The error record read back by flashtile.check_errors() and FLASHTILE_CHECK_KVCACHE=1 (kvcache_errors.py).
        run_host_script(self, "kvcache_errors.py", "kvcache errors: ok", env={"FLASHTILE_CHECK_KVCACHE": "0"})


if __name__ == "__main__":
    unittest.main()
