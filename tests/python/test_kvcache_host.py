"""flash_attn_with_kvcache on a machine without a GPU: host/kvcache_calls.py runs in a child process with the
stand-in torch (host/torch) and a fake libcuda.so.1 built here from FakeCuda.c; it checks the argument errors and
what reaches the kernels' launches. Skipped without a C compiler, cuda.h or NVRTC (the JIT compiles for real)."""

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


class KvCacheHostPath(unittest.TestCase):
    def test_kvcache_host_calls(self):
        compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("cc")
        include = cuda_include()
        if not compiler or not include:
            self.skipTest("no C compiler or no cuda.h for the fake driver")
        with tempfile.TemporaryDirectory() as work:
            fake = os.path.join(work, "libcuda.so.1")
            subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-I", include, "-I",
                            os.path.join(ROOT, "runtime", "include"), "-o", fake, os.path.join(HERE, "FakeCuda.c")],
                           check=True)
            import flashtile  # the package under test: its folder goes on the child's path after the stand-in

            package_root = os.path.dirname(os.path.dirname(os.path.abspath(flashtile.__file__)))
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "host"), package_root]),
                       FLASHTILE_CACHE_DIR=os.path.join(work, "cache"), FLASHTILE_LIBRARY=flashtile.library_path())
            env.pop("FLASHTILE_DISABLE_CACHE", None)
            child = subprocess.run([sys.executable, os.path.join(HERE, "host", "kvcache_calls.py"), fake], env=env,
                                   capture_output=True, text=True, timeout=600)
        if child.returncode != 0 and "NVRTC could not be loaded" in child.stdout + child.stderr:
            self.skipTest("no NVRTC here")
        self.assertEqual(child.returncode, 0, child.stdout + child.stderr)
        self.assertIn("kvcache host calls: ok", child.stdout)


if __name__ == "__main__":
    unittest.main()
