"""Runs a host/ script in a child process against a fake libcuda.so.1 built here from FakeCuda.c (and optional C
probe libraries next to it), the way the host-path tests need: the JIT compiles kernels for real, the fake driver
records what reaches its launches. The test is skipped without a C compiler, cuda.h or NVRTC."""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def cuda_include():
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "include", "cuda.h")):
            return os.path.join(home, "include")
    return None


def run_host_script(test, script, ok_line, probes=(), stand_in_torch=True, env=None):
    """Builds the fake driver (and each C file of `probes` into a shared library), runs host/`script` with their
    paths as arguments, asserts it exits 0 printing `ok_line` and returns its standard output. With
    `stand_in_torch`, the child imports the stand-in torch (host/torch) and the package under test from this
    process's flashtile; `env` adds variables to the child's environment (FakeCuda.c reads some)."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("cc")
    include = cuda_include()
    if not compiler or not include:
        test.skipTest("no C compiler or no cuda.h for the fake driver")
    headers = ["-I", include, "-I", os.path.join(ROOT, "runtime", "include"), "-I", ROOT]
    with tempfile.TemporaryDirectory() as work:
        libraries = [os.path.join(work, "libcuda.so.1")]
        subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", *headers, "-o",
                        libraries[0], os.path.join(HERE, "FakeCuda.c")], check=True)
        for source in probes:
            library = os.path.join(work, "lib" + os.path.splitext(source)[0].lower() + ".so")
            subprocess.run([compiler, "-O1", "-shared", "-fPIC", *headers, "-o", library, os.path.join(HERE, source)],
                           check=True)
            libraries.append(library)
        child_env = {**os.environ, "FLASHTILE_CACHE_DIR": os.path.join(work, "cache"), **(env or {})}
        if stand_in_torch:
            import flashtile  # the package under test: its folder goes on the child's path after the stand-in

            package_root = os.path.dirname(os.path.dirname(os.path.abspath(flashtile.__file__)))
            child_env.update(PYTHONPATH=os.pathsep.join([os.path.join(HERE, "host"), package_root]),
                             FLASHTILE_LIBRARY=flashtile.library_path())
        child_env.pop("FLASHTILE_DISABLE_CACHE", None)
        child = subprocess.run([sys.executable, os.path.join(HERE, "host", script), *libraries], env=child_env,
                               capture_output=True, text=True, timeout=600)
    if child.returncode != 0 and "NVRTC could not be loaded" in child.stdout + child.stderr:
        test.skipTest("no NVRTC here")
    test.assertEqual(child.returncode, 0, child.stdout + child.stderr)
    test.assertIn(ok_line, child.stdout)
    return child.stdout
