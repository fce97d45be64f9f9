"""The runtime launches an fa1 kernel once per K/V tile, with the state workspace, on a machine without a GPU:
host/fa1_steps.py runs in a child process with a fake libcuda.so.1 built here from FakeCuda.c and a probe of the
parameter block (Fa1StepsProbe.c). Skipped without a C compiler, cuda.h or NVRTC (the JIT compiles the kernel for
real)."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def cuda_include():
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "include", "cuda.h")):
            return os.path.join(home, "include")
    return None


class Fa1Steps(unittest.TestCase):
    def test_one_launch_per_kv_tile(self):
        compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("cc")
        include = cuda_include()
        if not compiler or not include:
            self.skipTest("no C compiler or no cuda.h for the fake driver")
        with tempfile.TemporaryDirectory() as work:
            fake = os.path.join(work, "libcuda.so.1")
            probe = os.path.join(work, "libfa1probe.so")
            headers = ["-I", include, "-I", os.path.join(ROOT, "runtime", "include")]
            subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", *headers, "-o", fake,
                            os.path.join(HERE, "FakeCuda.c")], check=True)
            subprocess.run([compiler, "-O1", "-shared", "-fPIC", *headers, "-o", probe,
                            os.path.join(HERE, "Fa1StepsProbe.c")], check=True)
            env = dict(os.environ, FLASHTILE_CACHE_DIR=os.path.join(work, "cache"))
            env.pop("FLASHTILE_DISABLE_CACHE", None)
            child = subprocess.run([sys.executable, os.path.join(HERE, "host", "fa1_steps.py"), fake, probe], env=env,
                                   capture_output=True, text=True, timeout=600)
        if child.returncode != 0 and "NVRTC could not be loaded" in child.stdout + child.stderr:
            self.skipTest("no NVRTC here")
        self.assertEqual(child.returncode, 0, child.stdout + child.stderr)
        self.assertIn("fa1 steps: ok", child.stdout)


if __name__ == "__main__":
    unittest.main()
