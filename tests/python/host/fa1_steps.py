"""The fa1 schedule's launches through the C ABI on a machine without a GPU: the fake driver (FakeCuda.c, its path in
argv[1]) records each launch and the probe (Fa1StepsProbe.c, argv[2]) reads the K/V-step fields of the last one; the
JIT compiles the kernel for real (NVRTC). Run by test_fa1_steps.py; exits non-zero with a message on the first failed
check."""

import ctypes
import sys

fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # before the runtime opens libcuda.so.1 by that soname
probe = ctypes.CDLL(sys.argv[2])

from flashtile import _lib  # noqa: E402

fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
for name in ("probeStateAcc", "probeStateMax", "probeStateSum"):
    getattr(probe, name).restype = ctypes.c_ulonglong
lib = _lib.library()
lib.lib.flashtile_set_schedule.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
if lib.lib.flashtile_set_schedule(lib.runtime(), b"fa1") != 0:
    raise SystemExit("flashtile_set_schedule(fa1): " + lib.lib.flashtile_last_error().decode())

WORKSPACE = 256  # the fake driver's cuMemAlloc: the runtime's own workspace
FLOAT = 4


def forward(sq, sk, batch=2, hq=4, hkv=2, d=64, variant=b"causal"):
    stride = (ctypes.c_longlong * 4)(sq * hq * d, hq * d, d, 1)
    kstride = (ctypes.c_longlong * 4)(sk * hkv * d, hkv * d, d, 1)
    q, k, v, o, lse = (n << 24 for n in range(1, 6))  # distinct, never dereferenced
    before = fake.fakeCudaLaunches()
    rc = lib.lib.flashtile_forward_variant(lib.runtime(), q, k, v, o, lse, 1, batch, sq, sk, hq, hkv, d, 0, stride,
                                           kstride, kstride, stride, 0.0, variant, None, None)
    if rc != 0:
        raise SystemExit(f"fa1 forward sq {sq} sk {sk}: " + lib.lib.flashtile_last_error().decode())
    return fake.fakeCudaLaunches() - before


def expect(what, got, want):
    if got != want:
        raise SystemExit(f"{what}: got {got}, expected {want}")


# 300 keys in 64-key tiles (fa1's default at head dim 64): five launches, K/V steps 0..4, over 2 x 4 x 2 Q tiles.
expect("launches for 300 keys", forward(100, 300), 5)
expect("the last launch's kvStep", probe.probeKvStep(), 4)
grid, block, smem = (ctypes.c_uint * 3)(), (ctypes.c_uint * 3)(), ctypes.c_uint()
fake.fakeCudaLastLaunch(grid, block, ctypes.byref(smem))
expect("grid", list(grid), [2, 4, 2])
expect("block", list(block), [128, 1, 1])
# The state of the 2 x 4 x 100 LSE rows: acc (64 floats a row), then m, then l.
rows = 2 * 4 * 100
expect("stateAcc", probe.probeStateAcc(), WORKSPACE)
expect("stateMax", probe.probeStateMax(), WORKSPACE + rows * 64 * FLOAT)
expect("stateSum", probe.probeStateSum(), WORKSPACE + rows * 65 * FLOAT)
# One tile of keys, or fewer: one launch.
expect("launches for 64 keys", forward(100, 64), 1)
expect("its kvStep", probe.probeKvStep(), 0)
expect("launches for 65 keys", forward(17, 65, variant=b"none"), 2)
print(f"fa1 steps: ok ({fake.fakeCudaLaunches()} launches)")
