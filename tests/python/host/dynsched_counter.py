"""fa3's dynamic-scheduler kernels through the C ABI on a machine without a GPU: the fake driver (FakeCuda.c, its
path in argv[1]) records each launch and each cuMemsetD32Async, and the probe (DynschedProbe.c, argv[2]) reads the
tile counter of the last parameter block; the kernels are compiled for real by `flashtile aot` (FLASHTILE_CLI). Run
by test_dynsched_counter.py; exits non-zero with a message on the first failed check."""

import ctypes
import os
import subprocess
import sys
import tempfile

fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # before the runtime opens libcuda.so.1 by that soname
probe = ctypes.CDLL(sys.argv[2])

from flashtile import _lib  # noqa: E402

fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaMemsetsD32.restype = ctypes.c_ulonglong
fake.fakeCudaLastMemsetD32.restype = ctypes.c_ulonglong
probe.probeTileCounter.restype = ctypes.c_ulonglong

library = tempfile.mkdtemp(prefix="dynsched-aot-")
built = subprocess.run([os.environ["FLASHTILE_CLI"], "aot", "--schedule", "fa3", "--scheduler", "dynamic",
                        "--variants", "causal", "--dtypes", "bf16", "--head-dims", "64",
                        "--shape-classes", "default,short", "--out", library, "-j", "1"],
                       capture_output=True, text=True)
if built.returncode != 0:
    if "NVRTC could not be loaded" in built.stdout + built.stderr:
        print("NVRTC could not be loaded")
    raise SystemExit("flashtile aot --scheduler dynamic: " + built.stdout + built.stderr)
manifests = [name for name in os.listdir(library) if name.endswith(".manifest")]
if not manifests or not all("bind=tileCounter@0" in open(os.path.join(library, m)).read() for m in manifests):
    raise SystemExit(f"the manifests of {library} do not all bind a tile counter (workspace.N.bind=tileCounter@0)")

lib = _lib.library()
lib.lib.flashtile_set_schedule.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.lib.flashtile_load_aot.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
if lib.lib.flashtile_load_aot(lib.runtime(), library.encode()) != 0:
    raise SystemExit("flashtile_load_aot: " + lib.lib.flashtile_last_error().decode())
if lib.lib.flashtile_set_schedule(lib.runtime(), b"fa3") != 0:
    raise SystemExit("flashtile_set_schedule(fa3): " + lib.lib.flashtile_last_error().decode())
lib.lib.flashtile_set_decode_schedule.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.lib.flashtile_set_decode_schedule(lib.runtime(), b"")  # short calls run fa3 too

RUNTIME_WORKSPACE = 256  # the fake driver's cuMemAlloc: the runtime's own buffer
SMS = 132  # the fake device's SM count


def expect(what, got, want):
    if got != want:
        raise SystemExit(f"{what}: got {got}, expected {want}")


def memset_state():
    value, count = ctypes.c_uint(), ctypes.c_size_t()
    dst = fake.fakeCudaLastMemsetD32(ctypes.byref(value), ctypes.byref(count))
    return fake.fakeCudaMemsetsD32(), dst, value.value, count.value


decode = lib.lib.flashtile_forward_decode
decode.restype = ctypes.c_int
decode.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 + [ctypes.c_void_p] * 4 + [
    ctypes.c_float, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def forward(sq, batch=2, hq=4, d=64, workspace=None, workspace_bytes=0):
    stride = (ctypes.c_longlong * 4)(sq * hq * d, hq * d, d, 1)
    q, k, v, o, lse = (n << 24 for n in range(1, 6))  # distinct, never dereferenced
    rc = decode(lib.runtime(), q, k, v, o, lse, 1, batch, sq, sq, hq, hq, d, 0, stride, stride, stride, stride, 0.0,
                b"causal", None, 0, workspace, workspace_bytes, None)
    return rc, lib.lib.flashtile_last_error().decode()


# Each launch: one cuMemsetD32Async of one int to 0, then the kernel with that counter, on a grid of at most one
# block an SM and at most one block per Q tile of every (batch, head) pair.
for sq in (1000, 4096):
    memsets, launches = fake.fakeCudaMemsetsD32(), fake.fakeCudaLaunches()
    rc, error = forward(sq)
    expect(f"seqlen {sq}: " + error, rc, 0)
    count, dst, value, ints = memset_state()
    expect(f"seqlen {sq}: memsets", count - memsets, 1)
    expect(f"seqlen {sq}: launches", fake.fakeCudaLaunches() - launches, 1)
    expect(f"seqlen {sq}: zeroed value", value, 0)
    expect(f"seqlen {sq}: zeroed ints", ints, 1)
    expect(f"seqlen {sq}: counter in the runtime's workspace", dst, RUNTIME_WORKSPACE)
    expect(f"seqlen {sq}: the kernel's counter", probe.probeTileCounter(), dst)
    grid, block, smem = (ctypes.c_uint * 3)(), (ctypes.c_uint * 3)(), ctypes.c_uint()
    fake.fakeCudaLastLaunch(grid, block, ctypes.byref(smem))
    tiles = probe.probeQTiles() * 2 * 4
    expect(f"seqlen {sq}: grid", list(grid), [min(tiles, SMS), 1, 1])

# A caller's workspace: the counter at its start; one too small is refused with what it needs.
workspace = 7 << 24
rc, error = forward(2048, workspace=workspace, workspace_bytes=4)
expect("a caller's workspace: " + error, rc, 0)
expect("counter in the caller's workspace", memset_state()[1], workspace)
expect("the kernel's counter", probe.probeTileCounter(), workspace)
memsets = fake.fakeCudaMemsetsD32()
rc, error = forward(2048, workspace=workspace, workspace_bytes=3)
expect("a workspace of 3 bytes", rc, -1)
if "needs 4" not in error or "tile_counter" not in error:
    raise SystemExit("a workspace of 3 bytes: " + error)
expect("no memset for a refused call", fake.fakeCudaMemsetsD32() - memsets, 0)
print(f"dynsched counter: ok ({fake.fakeCudaMemsetsD32()} counters zeroed)")
