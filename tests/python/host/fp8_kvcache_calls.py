"""flash_attn_with_kvcache over an e4m3 KV cache on a machine without a GPU: the stand-in torch beside this file and
the fake driver (FakeCuda.c, its path in argv[1]); the JIT compiles the decode schedule's KV-cache kernels over an
8-bit cache for real (MLIR + NVRTC). Checks that such a call reaches the e4m3 cache's kernels with the cache, the
descales (the kernels' FlashtileFp8Params, their second parameter here) and the cache's fields; that explain_kvcache
names the kernel (..._kvcache_e4m3) and a 16-bit cache's another; and that every bad combination is an error naming
the argument before any launch. Run by test_fp8_kvcache.py; exits non-zero on the first failure."""

import ctypes
import os
import struct
import sys

fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # before the runtime opens libcuda.so.1 by that soname

# The e4m3-cache kernels run only where asked to until a GPU has validated them (docs/fp8.md); the launches here are
# the fake driver's.

import torch  # noqa: E402  (the stand-in: PYTHONPATH puts this folder first)

import flashtile  # noqa: E402

assert torch.__version__ == "stand-in", "the stand-in torch must come first on PYTHONPATH"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_kvcache_abi import c_layout  # noqa: E402

FIELDS = {  # FlashtileFwdParams field: struct format of one element
    "q": "Q", "k": "Q", "v": "Q", "o": "Q", "kvCache": "i", "cacheBatches": "i", "cacheCapacity": "i",
    "pageShift": "i", "kCacheBatchStride": "q", "kRowStride": "q", "kHeadStride": "q", "blockTable": "Q",
    "kNew": "Q", "vNew": "Q", "seqlenNew": "i",
}
LAYOUT = c_layout("flashtile/runtime/KernelAbi.h", "struct FlashtileFwdParams", list(FIELDS))
fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaLastParams.restype = ctypes.c_void_p
fake.fakeCudaLastSecond.restype = ctypes.c_void_p


def expect_params(what: str, **expected):
    raw = ctypes.string_at(fake.fakeCudaLastParams(), LAYOUT["sizeof"][0])
    for name, value in expected.items():
        offset, size = LAYOUT[name]
        actual = struct.unpack_from(FIELDS[name], raw, offset)[0]
        if actual != value:
            raise SystemExit(f"{what}: the launch got {name} = {actual}, expected {value}")


def expect_error(error, text: str, fn, **kwargs):
    before = fake.fakeCudaLaunches()
    try:
        fn(**kwargs)
    except error as e:
        if text not in str(e):
            raise SystemExit(f"expected {error.__name__} with {text!r}, got {e!r}")
        if fake.fakeCudaLaunches() != before:
            raise SystemExit(f"{text!r}: the bad call launched a kernel before failing")
        return
    raise SystemExit(f"expected {error.__name__} with {text!r}; the call succeeded")

B, HQ, HKV, D, CACHE = 2, 8, 2, 128, 512
bf16, e4m3, i32, f32 = torch.bfloat16, torch.float8_e4m3fn, torch.int32, torch.float32


def t(shape, dtype=bf16, device="cuda"):
    return torch.empty(shape, dtype=dtype, device=device)


def last_descales():
    """(qDescale, kDescale, vDescale) of the last launch's FlashtileFp8Params (Fp8Abi.h: three pointers first)."""
    return struct.unpack_from("3Q", ctypes.string_at(fake.fakeCudaLastSecond(), 24))


kvc = flashtile.flash_attn_with_kvcache
q, k_new, v_new = t((B, 1, HQ, D)), t((B, 1, HKV, D)), t((B, 1, HKV, D))
pool, table, seqlens = t((7, 64, HKV, D), e4m3), t((B, 3), i32), t((B,), i32)
kd, vd = t((B, HKV), f32), t((B, HKV), f32)

# A paged e4m3 cache, one new key appended, one split: the append kernel, then the attention kernel, both with the
# descales.
launches = fake.fakeCudaLaunches()
out, lse = kvc(q, pool, pool, k_new, v_new, cache_seqlens=seqlens, block_table=table, num_splits=1,
               k_descale=kd, v_descale=vd, return_softmax_lse=True)
if fake.fakeCudaLaunches() - launches != 2:
    raise SystemExit(f"an appending call made {fake.fakeCudaLaunches() - launches} launches, expected 2")
assert tuple(out.shape) == (B, 1, HQ, D) and out.dtype is bf16, "the output has q's dtype"
expect_params("paged e4m3", q=q.data_ptr(), k=pool.data_ptr(), v=pool.data_ptr(), o=out.data_ptr(), kvCache=2,
              cacheBatches=7, cacheCapacity=192, pageShift=6, kCacheBatchStride=64 * HKV * D, kRowStride=HKV * D,
              kHeadStride=D, blockTable=table.data_ptr(), kNew=k_new.data_ptr(), vNew=v_new.data_ptr(), seqlenNew=1)
if last_descales() != (0, kd.data_ptr(), vd.data_ptr()):
    raise SystemExit(f"the attention kernel got descales {last_descales()}, expected (0, k_descale, v_descale)")

# A contiguous e4m3 cache without descales (= 1): null pointers reach the kernel.
cache = t((B, CACHE, HKV, D), e4m3)
kvc(q, cache, cache, cache_seqlens=seqlens, num_splits=1)
expect_params("contiguous e4m3", k=cache.data_ptr(), kvCache=1, cacheBatches=B, cacheCapacity=CACHE)
if last_descales() != (0, 0, 0):
    raise SystemExit(f"a call without descales passed {last_descales()}")

# explain_kvcache names the e4m3 cache's kernel, and a 16-bit cache's another; nothing launches.
before = fake.fakeCudaLaunches()
entry8 = flashtile.explain_kvcache(q, pool, pool, cache_seqlens=seqlens, block_table=table, k_descale=kd,
                                   arch="sm_90a")["entry"]
entry16 = flashtile.explain_kvcache(q, t((7, 64, HKV, D)), t((7, 64, HKV, D)), cache_seqlens=seqlens,
                                    block_table=table, arch="sm_90a")["entry"]
if not entry8.endswith("_kvcache_e4m3") or not entry16.endswith("_kvcache") or fake.fakeCudaLaunches() != before:
    raise SystemExit(f"explain_kvcache named {entry8!r} and {entry16!r} ({fake.fakeCudaLaunches() - before} launches)")

# Every bad combination is an error naming the argument, before any launch.
ok = dict(q=q, k_cache=pool, v_cache=pool, cache_seqlens=seqlens, block_table=table)


def bad(**changes):
    return dict(ok, **changes)


cases = [
    (ValueError, "q: torch.float8_e4m3fn q is not supported by flash_attn_with_kvcache", bad(q=t((B, 1, HQ, D), e4m3))),
    (ValueError, "k: torch.float8_e4m3fn k is not supported", bad(k=t((B, 1, HKV, D), e4m3), v=v_new)),
    (ValueError, "q_descale: flash_attn_with_kvcache takes q in torch.float16 or torch.bfloat16",
     bad(q_descale=t((B, HKV), f32))),
    (ValueError, "k_cache and v_cache must have one dtype", bad(v_cache=t((7, 64, HKV, D)))),
    (ValueError, "k_descale: descales apply to torch.float8_e4m3fn caches only",
     bad(k_cache=t((7, 64, HKV, D)), v_cache=t((7, 64, HKV, D)), k_descale=kd)),
    (ValueError, "k_descale must have shape (2, 2) (batch, nheads_k)", bad(k_descale=t((B, HQ), f32))),
    (ValueError, "v_descale must be torch.float32", bad(v_descale=t((B, HKV), bf16))),
    (ValueError, "k_descale must be on", bad(k_descale=t((B, HKV), f32, "cpu"))),
    (TypeError, "v_descale must be None or a torch.float32 tensor", bad(v_descale=0.5)),
    (ValueError, "k_cache: strides", bad(k_cache=torch.Tensor((7, 64, HKV, D), e4m3, torch.device("cuda"),
                                                              strides=(64 * HKV * 136, HKV * 136, 136, 1)))),
]
for error, text, kwargs in cases:
    expect_error(error, text, kvc, **kwargs)

print(f"fp8 kvcache host calls: ok ({fake.fakeCudaLaunches()} launches, {len(cases)} bad arguments refused)")
