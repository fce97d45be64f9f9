"""forward() sizes a split-KV call by the driver's occupancy (cuOccupancyMaxActiveBlocksPerMultiprocessor, asked
once per loaded kernel): the same decode call, under a fake driver that answers 1 and then 4 blocks an SM, gets
different split counts, and an answer of 0 is an error naming the kernel. host/occupancy_calls.py runs each call in a
child process with the stand-in torch; the JIT compiles the decode kernel for real (once: the runs share a disk
cache). Skipped without a C compiler, cuda.h or NVRTC."""

import re
import tempfile
import unittest

from fake_driver import run_host_script


class SplitOccupancy(unittest.TestCase):
    def splits(self, blocks: int, cache: str) -> int:
        out = run_host_script(self, "occupancy_calls.py", "occupancy call: ok",
                              env={"FLASHTILE_FAKE_BLOCKS_PER_SM": str(blocks), "FLASHTILE_CACHE_DIR": cache})
        return int(re.search(r"numSplits = (\d+)", out).group(1))

    def test_driver_occupancy_decides_the_split_count(self):
        with tempfile.TemporaryDirectory() as cache:
            one, four = self.splits(1, cache), self.splits(4, cache)
            run_host_script(self, "occupancy_calls.py", "occupancy call: ok (refused)",
                            env={"FLASHTILE_FAKE_BLOCKS_PER_SM": "0", "FLASHTILE_CACHE_DIR": cache})
        # 16 Q tiles on 132 SMs (the fake GPU): 132 block slots fill a wave with fewer splits than 528 do. Were the
        # driver's answer ignored, both calls would get the same count.
        self.assertGreater(one, 1)
        self.assertLess(one, four)


if __name__ == "__main__":
    unittest.main()
