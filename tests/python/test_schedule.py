"""The choice of schedule per call through the Python package, on a machine without a GPU: host/schedule_calls.py
runs in a child process with the stand-in torch (host/torch) and a fake libcuda.so.1 of an sm_90a device built from
FakeCuda.c, and checks explain() and what reaches the launches: fa3 at head dims 128, 96 and 32, a fallback with one log line,
decode for one query row, schedule= and strict=, and a varlen call without keys. Skipped without a C compiler, cuda.h
or NVRTC (the JIT compiles the kernels for real)."""

import unittest

from fake_driver import run_host_script


class ScheduleChoice(unittest.TestCase):
    def test_schedule_calls(self):
        run_host_script(self, "schedule_calls.py", "schedule calls: ok",
                        env={"FLASHTILE_SCHEDULE": "", "FLASHTILE_STRICT_SCHEDULE": "", "FLASHTILE_LOG": ""})


if __name__ == "__main__":
    unittest.main()
