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

# A caller's workspace (flashtile_forward_decode's; the decode schedule off, so these few rows run fa1): used when it
# holds (head_dim_v + 2) floats per LSE row, refused with the size it needs otherwise.
lib.lib.flashtile_set_decode_schedule.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.lib.flashtile_set_decode_schedule(lib.runtime(), b"")
decode = lib.lib.flashtile_forward_decode
decode.restype = ctypes.c_int
decode.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 + [ctypes.c_void_p] * 4 + [
    ctypes.c_float, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def forward_with_workspace(workspace_bytes, sq=4, sk=130, batch=1, hq=2, hkv=2, d=64):
    stride = (ctypes.c_longlong * 4)(sq * hq * d, hq * d, d, 1)
    kstride = (ctypes.c_longlong * 4)(sk * hkv * d, hkv * d, d, 1)
    q, k, v, o, lse, workspace = (n << 24 for n in range(1, 7))
    rc = decode(lib.runtime(), q, k, v, o, lse, 1, batch, sq, sk, hq, hkv, d, 0, stride, kstride, kstride, stride, 0.0,
                b"none", None, 0, workspace, workspace_bytes, None)
    return rc, workspace, lib.lib.flashtile_last_error().decode()


needed = 1 * 2 * 4 * (64 + 2) * FLOAT
rc, workspace, error = forward_with_workspace(needed - 1)
expect("a workspace one byte short", rc, -1)
if f"needs {needed}" not in error or "fa1" not in error:
    raise SystemExit("a workspace one byte short: " + error)
before = fake.fakeCudaLaunches()
rc, workspace, error = forward_with_workspace(needed)
expect("a workspace of the size needed: " + error, rc, 0)
expect("launches for 130 keys", fake.fakeCudaLaunches() - before, 3)
expect("stateAcc in the caller's workspace", probe.probeStateAcc(), workspace)
print(f"fa1 steps: ok ({fake.fakeCudaLaunches()} launches)")
