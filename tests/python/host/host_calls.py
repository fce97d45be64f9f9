"""flash_attn_func's host path, end to end on a machine without a GPU: the stand-in torch beside this file and the
fake driver (FakeCuda.c, its path in argv[1]) stand in for PyTorch and libcuda; the JIT compiles for real (NVRTC).
Run by test_warm_path.py; exits non-zero with a message on the first failed check."""

import ctypes
import sys

fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # before the runtime opens libcuda.so.1 by that soname

import torch  # noqa: E402  (the stand-in: PYTHONPATH puts this folder first)

import flashtile  # noqa: E402
from flashtile import interface  # noqa: E402

assert torch.__version__ == "stand-in", "the stand-in torch must come first on PYTHONPATH"


class Params(ctypes.Structure):
    """FlashtileFwdParams (KernelAbi.h), as far as the checks read it."""

    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
                ("lse", ctypes.c_void_p), ("strides", ctypes.c_longlong * 14), ("cu_seqlens_q", ctypes.c_void_p),
                ("cu_seqlens_k", ctypes.c_void_p), ("batch", ctypes.c_int), ("heads_q", ctypes.c_int),
                ("heads_kv", ctypes.c_int), ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int),
                ("softmax_scale", ctypes.c_float), ("scale_log2", ctypes.c_float),
                ("variant_params", ctypes.c_float * 8)]


fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaLastParams.restype = ctypes.POINTER(Params)
def counted(name: str, counter: list):
    """Replaces interface.`name` with a wrapper that counts its calls in counter[0]; returns the original."""
    original = getattr(interface, name)

    def wrapper(*args):
        counter[0] += 1
        return original(*args)

    setattr(interface, name, wrapper)
    return original


checked_calls = [0]
counted("_flash_attn_func_checked", checked_calls)


def tensors(shape=(2, 128, 4, 64), dtype=torch.bfloat16, device="cuda"):
    return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(3)]


def launched(q, k, v, out, path: str, **expected):
    params = fake.fakeCudaLastParams().contents
    got = {"q": params.q, "k": params.k, "v": params.v, "o": params.o}
    want = {"q": q.data_ptr(), "k": k.data_ptr(), "v": v.data_ptr(), "o": out.data_ptr()}
    if got != want:
        raise SystemExit(f"{path}: the launch got pointers {got}, expected {want}")
    for name, value in expected.items():
        actual = getattr(params, name)
        actual = list(actual[:len(value)]) if isinstance(value, list) else actual
        if (abs(actual - value) > 1e-6 * abs(value)) if isinstance(value, float) else actual != value:
            raise SystemExit(f"{path}: the launch got {name} = {actual}, expected {value}")


def expect_calls(launches: int, checked_count: int, what: str):
    if fake.fakeCudaLaunches() != launches or checked_calls[0] != checked_count:
        raise SystemExit(f"{what}: {fake.fakeCudaLaunches()} launches and {checked_calls[0]} checked calls, expected "
                         f"{launches} and {checked_count}")


def expect_error(error, text: str, fn):
    try:
        fn()
    except error as e:
        if text not in str(e):
            raise SystemExit(f"expected {error.__name__} with {text!r}, got {e!r}")
        return
    raise SystemExit(f"expected {error.__name__} with {text!r}; the call succeeded")


# The first call is checked and filed; the second, with other tensors of the same shape, takes the warm path.
q, k, v = tensors()
out = flashtile.flash_attn_func(q, k, v, causal=True)
launched(q, k, v, out, "first call", batch=2, heads_q=4, seqlen_q=128, softmax_scale=0.125)
expect_calls(1, 1, "first call")
q2, k2, v2 = tensors()
out2, lse2, _ = flashtile.flash_attn_func(q2, k2, v2, causal=True, return_attn_probs=True)
launched(q2, k2, v2, out2, "warm call", batch=2, heads_q=4, seqlen_q=128, softmax_scale=0.125)
expect_calls(2, 1, "warm call")
assert tuple(out2.shape) == (2, 128, 4, 64) and tuple(lse2.shape) == (2, 4, 128) and lse2.dtype is torch.float32
assert fake.fakeCudaLastParams().contents.lse == lse2.data_ptr()

# Another flag, scale or window is another call shape: checked again, then warm.
flashtile.flash_attn_func(q, k, v, causal=False, softmax_scale=0.5)
expect_calls(3, 2, "new flags")
out = flashtile.flash_attn_func(q2, k2, v2, causal=False, softmax_scale=0.5)
launched(q2, k2, v2, out, "new flags, warm", softmax_scale=0.5)
expect_calls(4, 2, "new flags, warm")
flashtile.flash_attn_func(q, k, v, window_size=(16, 0), softcap=30.0)
out = flashtile.flash_attn_func(q2, k2, v2, window_size=(16, 0), softcap=30.0)
launched(q2, k2, v2, out, "window and softcap, warm", variant_params=[30.0, 16.0, -1.0])
expect_calls(6, 3, "window and softcap, warm")

# What the warm path must not take: bad values, other dtypes and devices, an unaligned view, a list window.
expect_error(ValueError, "softcap must be >= 0", lambda: flashtile.flash_attn_func(q, k, v, softcap=-1.0))
expect_error(ValueError, "window_size: sizes must be >= -1",
             lambda: flashtile.flash_attn_func(q, k, v, window_size=(-2, 0)))
expect_error(NotImplementedError, "dropout_p=0.1", lambda: flashtile.flash_attn_func(q, k, v, dropout_p=0.1))
expect_error(ValueError, "q, k, v must have one dtype",
             lambda: flashtile.flash_attn_func(q, k, tensors(dtype=torch.float16)[0], causal=True))
expect_error(ValueError, "q must be a CUDA tensor",
             lambda: flashtile.flash_attn_func(*tensors(device="cpu"), causal=True))
expect_error(ValueError, "softmax_scale must be finite",
             lambda: flashtile.flash_attn_func(q, k, v, causal=True, softmax_scale=float("nan")))
before = checked_calls[0]
unaligned = q.view_at_offset(1)
out = flashtile.flash_attn_func(unaligned, k, v, causal=True)
params = fake.fakeCudaLastParams().contents
assert params.q != unaligned.data_ptr() and params.q % 16 == 0, "an unaligned q must be copied, not launched"
flashtile.flash_attn_func(q, k, v, causal=True, window_size=[-1, -1])
expect_calls(fake.fakeCudaLaunches(), before + 2, "unaligned view and list window")

# Autograd must see calls on tensors that require grad: those go through its Function (the custom op under
# torch.compile), not the warm path.
q.requires_grad = True
flashtile.flash_attn_func(q, k, v, causal=True)
expect_calls(fake.fakeCudaLaunches(), before + 3, "requires_grad")
q.requires_grad = False
with torch.no_grad():
    flashtile.flash_attn_func(q, k, v, causal=True)
expect_calls(fake.fakeCudaLaunches(), before + 3, "no_grad")

# attention()'s warm path (the ctypes one here): checked once per call shape, variant and numbers, then warm.
attention_checks = [0]
attention_call = counted("_attention_call", attention_checks)
cases = (("causal", None, 0.125, []), ("sliding_window", {"left": 16}, 0.125, [16.0, 0.0]),
         ("sliding_window", {"left": 16.0}, 0.5, [16.0, 0.0]))
for variant, params, scale, numbers in cases:
    before = attention_checks[0]
    flashtile.attention(q, k, v, variant, params=params, softmax_scale=None if scale == 0.125 else scale)
    out, lse = flashtile.attention(q2, k2, v2, variant, params=params, return_lse=True,
                                   softmax_scale=None if scale == 0.125 else scale)
    launched(q2, k2, v2, out, f"attention {variant} {params}, warm", softmax_scale=scale, variant_params=numbers)
    if attention_checks[0] != before + 1 or tuple(lse.shape) != (2, 4, 128):
        raise SystemExit(f"attention {variant} {params}: {attention_checks[0] - before} checked calls, expected 1")
before = attention_checks[0]
expect_error(ValueError, "params: variant 'sliding_window' has no parameter(s) width",
             lambda: flashtile.attention(q, k, v, "sliding_window", params={"width": 16}))
flashtile.attention(q, k, v, "sliding_window", params={"left": 8})  # another number: checked
launched(q, k, v, flashtile.attention(q, k, v, "sliding_window", params={"left": 8}), "attention left 8",
         variant_params=[8.0, 0.0])
if attention_checks[0] != before + 2:
    raise SystemExit(f"attention, bad and new params: {attention_checks[0] - before} checked calls, expected 2")
interface._attention_call = attention_call

# Varlen through the one-struct call: the offsets' pointers, the packed rows and the grid of the longest sequence.
total_q, total_k = 300, 500
qv, kv, vv = (torch.zeros((rows, 4, 64), dtype=torch.bfloat16, device="cuda") for rows in (total_q, total_k, total_k))
cu_q, cu_k = (torch.zeros((3,), dtype=torch.int32, device="cuda") for _ in range(2))
for _ in range(2):  # the second call takes the runtime's warm path
    out_varlen = flashtile.flash_attn_varlen_func(qv, kv, vv, cu_q, cu_k, 200, 260, causal=True)
    params = fake.fakeCudaLastParams().contents
    if (params.cu_seqlens_q, params.cu_seqlens_k) != (cu_q.data_ptr(), cu_k.data_ptr()):
        raise SystemExit("varlen: the launch did not get the cu_seqlens pointers")
    if (params.batch, params.seqlen_q, params.seqlen_k, params.heads_q) != (2, total_q, total_k, 4):
        raise SystemExit(f"varlen: batch/rows/heads {params.batch}, {params.seqlen_q}, {params.seqlen_k}, "
                         f"{params.heads_q}")
    if list(params.strides[:3]) != [0, 4 * 64, 64]:  # batch stride 0, then row and head strides of q
        raise SystemExit(f"varlen: q strides {list(params.strides[:3])}")
    grid, block, smem = (ctypes.c_uint * 3)(), (ctypes.c_uint * 3)(), ctypes.c_uint()
    fake.fakeCudaLastLaunch(grid, block, ctypes.byref(smem))
    if grid[1:] != [4, 2] or grid[0] not in (-(-200 // 64), -(-200 // 128)):  # 64- or 128-row blocks
        raise SystemExit(f"varlen: grid {list(grid)} does not cover 200 rows x 4 heads x 2 sequences")
    launched(qv, kv, vv, out_varlen, "varlen")

# The C ABI's warm path still checks what the Python one hands it: a bad number after an accepted one, a null input.
lib = flashtile._lib.library()
call = interface._call_fields(q, k, v, out, None, 0, 0, 0.0, b"softcap", [5.0], 0)
flashtile._lib.POINTERS.pack_into(call, flashtile._lib.POINTERS_OFFSET, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                  out.data_ptr(), lse2.data_ptr(), 0, 0, 0)
for cap, ok in ((5.0, True), (5.0, True), (-1.0, False), (7.0, True), (0.0, False), (float("nan"), False),
                (float("nan"), False)):
    call.params[0] = cap
    rc = lib.lib.flashtile_forward_call(lib.runtime(), ctypes.addressof(call))
    if (rc == 0) != ok:
        raise SystemExit(f"softcap cap = {cap}: rc {rc}, {lib.lib.flashtile_last_error().decode()}")
    if not ok and "cap = " not in lib.lib.flashtile_last_error().decode():
        raise SystemExit(f"cap = {cap}: the error does not name the number: {lib.lib.flashtile_last_error()}")
call.params[0] = 5.0
call.q = q.data_ptr() + 2
if lib.lib.flashtile_forward_call(lib.runtime(), ctypes.addressof(call)) == 0:
    raise SystemExit("an unaligned q passed the warm C path")
assert "is not 16-byte aligned" in lib.lib.flashtile_last_error().decode()
call.size = 8
if lib.lib.flashtile_forward_call(lib.runtime(), ctypes.addressof(call)) == 0:
    raise SystemExit("a call struct of the wrong size was accepted")
# The stand-in torch has no C++ API: the C++ call path cannot be built, every call above took the ctypes path, and
# call_path() says so.
if not flashtile.call_path().startswith("ctypes: ") or interface._fast is not None:
    raise SystemExit(f"the stand-in torch cannot build the C++ call path, yet call_path() is {flashtile.call_path()!r}")
print(f"host calls: ok ({fake.fakeCudaLaunches()} launches)")
