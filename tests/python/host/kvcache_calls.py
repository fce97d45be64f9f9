"""flash_attn_with_kvcache's host path on a machine without a GPU: the stand-in torch beside this file and the fake
driver (FakeCuda.c, its path in argv[1]) stand in for PyTorch and libcuda; the JIT compiles the decode schedule's
KV-cache kernels for real (MLIR + NVRTC). Checks that every bad argument is an error naming it before any launch, and
that a call reaches the kernels with the right fields (read back from the fake driver's last launch at the offsets
the C compiler gives FlashtileFwdParams' fields). Run by test_kvcache_host.py; exits non-zero on the first failure."""

import ctypes
import os
import struct
import sys

fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # before the runtime opens libcuda.so.1 by that soname

import torch  # noqa: E402  (the stand-in: PYTHONPATH puts this folder first)

import flashtile  # noqa: E402

assert torch.__version__ == "stand-in", "the stand-in torch must come first on PYTHONPATH"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_kvcache_abi import c_layout  # noqa: E402

FIELDS = {  # FlashtileFwdParams field: struct format of one element
    "q": "Q", "k": "Q", "v": "Q", "o": "Q", "lse": "Q", "batch": "i", "headsQ": "i", "headsKv": "i", "seqlenQ": "i",
    "seqlenK": "i", "softmaxScale": "f", "variantParams": "f", "inputs": "Q", "numSplits": "i", "kvCache": "i",
    "cacheBatches": "i", "cacheCapacity": "i", "pageShift": "i", "kCacheBatchStride": "q", "vCacheBatchStride": "q",
    "cacheSeqlens": "Q", "cacheBatchIdx": "Q", "blockTable": "Q", "blockTableStride": "q", "kNew": "Q", "vNew": "Q",
    "kNewBatchStride": "q", "kNewRowStride": "q", "kNewHeadStride": "q", "seqlenNew": "i", "kRowStride": "q",
    "kHeadStride": "q", "rotaryCos": "Q", "rotarySin": "Q", "rotaryDim": "i", "seqlenRo": "i",
}
LAYOUT = c_layout("flashtile/runtime/KernelAbi.h", "struct FlashtileFwdParams", list(FIELDS))
fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaLastParams.restype = ctypes.c_void_p


def last_params() -> dict:
    raw = ctypes.string_at(fake.fakeCudaLastParams(), LAYOUT["sizeof"][0])
    out = {}
    for name, code in FIELDS.items():
        offset, size = LAYOUT[name]
        values = struct.unpack_from(f"{size // struct.calcsize(code)}{code}", raw, offset)
        out[name] = values[0] if len(values) == 1 else list(values)
    return out


def expect_params(what: str, **expected):
    got = last_params()
    for name, value in expected.items():
        actual = got[name]
        if isinstance(value, list):
            actual = actual[:len(value)]
        close = (abs(actual - value) <= 1e-6 * abs(value)) if isinstance(value, float) else actual == value
        if not close:
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
bf16, i32 = torch.bfloat16, torch.int32


def t(shape, dtype=bf16, device="cuda"):
    return torch.empty(shape, dtype=dtype, device=device)


q, k_cache, v_cache = t((B, 1, HQ, D)), t((B, CACHE, HKV, D)), t((B, CACHE, HKV, D))
k_new, v_new = t((B, 1, HKV, D)), t((B, 1, HKV, D))
seqlens = t((B,), i32)
kvc = flashtile.flash_attn_with_kvcache

# A contiguous cache, one new key appended, one split: the append kernel, then the attention kernel.
launches = fake.fakeCudaLaunches()
out, lse = kvc(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, num_splits=1, return_softmax_lse=True)
if fake.fakeCudaLaunches() - launches != 2:
    raise SystemExit(f"an appending call made {fake.fakeCudaLaunches() - launches} launches, expected 2 (append, "
                     "attention)")
assert tuple(out.shape) == (B, 1, HQ, D) and out.dtype is bf16
assert tuple(lse.shape) == (B, HQ, 1) and lse.dtype is torch.float32
expect_params("contiguous", q=q.data_ptr(), k=k_cache.data_ptr(), v=v_cache.data_ptr(), o=out.data_ptr(),
              lse=lse.data_ptr(), batch=B, headsQ=HQ, headsKv=HKV, seqlenQ=1, seqlenK=CACHE, softmaxScale=D ** -0.5,
              numSplits=1, kvCache=1, cacheBatches=B, cacheCapacity=CACHE, kCacheBatchStride=CACHE * HKV * D,
              kRowStride=HKV * D, kHeadStride=D, cacheSeqlens=seqlens.data_ptr(), cacheBatchIdx=0, blockTable=0,
              kNew=k_new.data_ptr(), vNew=v_new.data_ptr(), kNewBatchStride=HKV * D, seqlenNew=1, rotaryDim=0)

# No new keys, cache_seqlens an int (a tensor made for the call), cache_batch_idx, a scale, causal with 4 query rows
# and a window: the variant's numbers reach the kernel.
q4, rows = t((B, 4, HQ, D)), t((B,), i32)
big_cache = t((5, CACHE, HKV, D))
launches = fake.fakeCudaLaunches()
out = kvc(q4, big_cache, big_cache, cache_seqlens=100, cache_batch_idx=rows, softmax_scale=0.5, causal=True,
          window_size=(64, -1), num_splits=1)
if fake.fakeCudaLaunches() - launches != 1:
    raise SystemExit("a call without new keys must launch the attention kernel alone")
params = last_params()
if params["cacheSeqlens"] in (0, seqlens.data_ptr()):
    raise SystemExit("cache_seqlens=100 must reach the kernel as a device array of its own")
expect_params("int cache_seqlens", q=q4.data_ptr(), o=out.data_ptr(), seqlenQ=4, softmaxScale=0.5, cacheBatches=5,
              cacheBatchIdx=rows.data_ptr(), kNew=0, seqlenNew=0, variantParams=[64.0, -1.0])

# A paged cache (pages of 64 keys) with a block table of 3 pages a sequence, rotary embedding of q and the new keys.
pool, table = t((7, 64, HKV, D)), t((B, 3), i32)
cos, sin = t((256, 32)), t((256, 32))
kvc(q, pool, pool, k_new, v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=seqlens, block_table=table,
    rotary_interleaved=False, num_splits=1)
expect_params("paged", kvCache=2, cacheBatches=7, cacheCapacity=192, pageShift=6, blockTable=table.data_ptr(),
              blockTableStride=3, kCacheBatchStride=64 * HKV * D, cacheSeqlens=seqlens.data_ptr(), rotaryDim=64,
              seqlenRo=256, rotaryCos=cos.data_ptr(), rotarySin=sin.data_ptr())

# A broadcast block table (row stride 0) is copied into a packed one: the C ABI reads a row stride of 0 as packed.
broadcast = torch.Tensor((B, 3), i32, torch.device("cuda"), strides=(0, 1))
kvc(q, pool, pool, cache_seqlens=seqlens, block_table=broadcast, num_splits=1)
params = last_params()
if params["blockTable"] == broadcast.data_ptr() or params["blockTableStride"] != 3:
    raise SystemExit(f"a broadcast block table reached the kernel as {params['blockTable']:#x} with row stride "
                     f"{params['blockTableStride']}")

# ALiBi slopes reach the kernel as its input; splits are the caller's when forced.
slopes = t((HQ,), torch.float32)
kvc(q, k_cache, v_cache, cache_seqlens=seqlens, alibi_slopes=slopes, causal=True, num_splits=1)
expect_params("alibi", inputs=[slopes.data_ptr()])

# Under torch.compile the call goes through the custom op flashtile::fwd_kvcache (the caches declared mutated),
# which launches the same call; its fake implementation gives the output shapes.
from flashtile import interface, kvcache  # noqa: E402

op = torch.ops.flashtile.fwd_kvcache
op_calls = []
torch.ops.flashtile.fwd_kvcache = lambda *args: op_calls.append(args) or op(*args)
interface._is_compiling = lambda: True
try:
    out, lse = kvc(q, pool, pool, k_new, v_new, cache_seqlens=seqlens, block_table=table, num_splits=1,
                   return_softmax_lse=True)
finally:
    interface._is_compiling = lambda: False
    torch.ops.flashtile.fwd_kvcache = op
if len(op_calls) != 1:
    raise SystemExit("a call while compiling must go through torch.ops.flashtile.fwd_kvcache")
expect_params("custom op", q=q.data_ptr(), o=out.data_ptr(), lse=lse.data_ptr(), kvCache=2, kNew=k_new.data_ptr())
fake_out, fake_lse = kvcache._fwd_kvcache_fake(*op_calls[0])
if tuple(fake_out.shape) != tuple(out.shape) or tuple(fake_lse.shape) != tuple(lse.shape):
    raise SystemExit(f"the fake implementation gives {tuple(fake_out.shape)}, {tuple(fake_lse.shape)}; the call "
                     f"{tuple(out.shape)}, {tuple(lse.shape)}")

# An empty batch returns empty tensors and launches nothing.
before = fake.fakeCudaLaunches()
out, lse = kvc(t((0, 1, HQ, D)), t((0, CACHE, HKV, D)), t((0, CACHE, HKV, D)), t((0, 1, HKV, D)), t((0, 1, HKV, D)),
               cache_seqlens=t((0,), i32), return_softmax_lse=True)
if fake.fakeCudaLaunches() != before or tuple(out.shape) != (0, 1, HQ, D) or tuple(lse.shape) != (0, HQ, 1):
    raise SystemExit(f"an empty batch: shapes {tuple(out.shape)}, {tuple(lse.shape)}, "
                     f"{fake.fakeCudaLaunches() - before} launches")

# What the C ABI refuses comes back as a FlashtileError with its message (here a variant no one registered, handed to
# the launch directly: flash_attn_with_kvcache itself only passes variants it resolved).
before = fake.fakeCudaLaunches()
try:
    kvcache._launch(q, k_cache, v_cache, None, None, None, None, seqlens, -1, None, None, 0.125, "no_such_variant", [],
                    [], True, 0)
except flashtile.FlashtileError as e:
    if "flash_attn_with_kvcache" not in str(e) or "no_such_variant" not in str(e):
        raise SystemExit(f"the C ABI's error does not name the call and the variant: {e}")
else:
    raise SystemExit("an unknown variant was launched")
if fake.fakeCudaLaunches() != before:
    raise SystemExit("a refused call launched a kernel")

# Every bad argument is an error naming it, before any launch.
ok = dict(q=q, k_cache=k_cache, v_cache=v_cache, cache_seqlens=seqlens)


def bad(**changes):
    return dict(ok, **changes)


cases = [
    (ValueError, "q must have 4 dimensions", bad(q=t((B, HQ, D)))),
    (ValueError, "q must be torch.float16, torch.bfloat16 or torch.float8_e4m3fn", bad(q=t((B, 1, HQ, D), torch.float32))),
    (ValueError, "q must be a CUDA tensor", bad(q=t((B, 1, HQ, D), device="cpu"))),
    (ValueError, "k_cache must have q's dtype", bad(k_cache=t((B, CACHE, HKV, D), torch.float16))),
    (ValueError, "v_cache must have k_cache's first three dimensions", bad(v_cache=t((B, CACHE, 4, D)))),
    (ValueError, "k_cache's head dim must be q's", bad(k_cache=t((B, CACHE, HKV, 64)), v_cache=t((B, CACHE, HKV, 64)))),
    (ValueError, "head dims: q/k_cache 80", dict(q=t((B, 1, HQ, 80)), k_cache=t((B, CACHE, HKV, 80)),
                                               v_cache=t((B, CACHE, HKV, 80)), cache_seqlens=seqlens)),
    (ValueError, "must be a multiple of k_cache's nheads_k", bad(q=t((B, 1, 7, D)))),
    (ValueError, "k_cache must have a contiguous last dimension", bad(k_cache=t((B, CACHE, D, HKV)).transpose(2, 3))),
    (ValueError, "k_cache must start at a 16-byte aligned address", bad(k_cache=k_cache.view_at_offset(1))),
    (ValueError, "k_cache has 1 rows (batch_size_cache)", bad(k_cache=t((1, CACHE, HKV, D)),
                                                              v_cache=t((1, CACHE, HKV, D)))),
    (NotImplementedError, "cache_leftpad", bad(cache_leftpad=seqlens)),
    (ValueError, "k and v: pass both", bad(k=k_new)),
    (ValueError, "k must be (batch, seqlen_new, nheads_k, headdim)", bad(k=t((B, 1, HQ, D)), v=t((B, 1, HQ, D)))),
    (ValueError, "v must have q's dtype", bad(k=k_new, v=t((B, 1, HKV, D), torch.float16))),
    (ValueError, "cache_seqlens: required with k and v", bad(k=k_new, v=v_new, cache_seqlens=None)),
    (ValueError, "k: seqlen_new is 600", bad(k=t((B, 600, HKV, D)), v=t((B, 600, HKV, D)))),
    (ValueError, "cache_seqlens is 512; accepted: 0 to 511", bad(k=k_new, v=v_new, cache_seqlens=512)),
    (ValueError, "cache_seqlens is -1", bad(cache_seqlens=-1)),
    (TypeError, "cache_seqlens must be an int or an int32 tensor", bad(cache_seqlens=3.5)),
    (ValueError, "cache_seqlens must be torch.int32", bad(cache_seqlens=t((B,), torch.float32))),
    (ValueError, "cache_seqlens must have shape (2,)", bad(cache_seqlens=t((3,), i32))),
    (ValueError, "cache_seqlens must be on", bad(cache_seqlens=t((B,), i32, "cpu"))),
    (ValueError, "cache_batch_idx must be torch.int32", bad(cache_batch_idx=t((B,), torch.float32))),
    (ValueError, "cache_batch_idx: a paged cache", bad(k_cache=pool, v_cache=pool, block_table=table,
                                                      cache_batch_idx=rows)),
    (ValueError, "block_table must be torch.int32", bad(k_cache=pool, v_cache=pool, block_table=t((B, 3),
                                                                                                   torch.float32))),
    (ValueError, "block_table must have shape (2, 3)", bad(k_cache=pool, v_cache=pool, block_table=t((3, 3), i32))),
    (ValueError, "block_table must be an int32 tensor of shape (batch, max_num_blocks_per_seq)",
     bad(k_cache=pool, v_cache=pool, block_table=t((6,), i32))),
    (ValueError, "page size (dimension 1 of a paged cache) is 48", bad(k_cache=t((7, 48, HKV, D)),
                                                                      v_cache=t((7, 48, HKV, D)), block_table=table)),
    (ValueError, "rotary_cos and rotary_sin: pass both", bad(k=k_new, v=v_new, rotary_cos=cos)),
    (ValueError, "rotary_cos/rotary_sin: rotary embedding rotates q and the appended k",
     bad(rotary_cos=cos, rotary_sin=sin)),
    (ValueError, "rotary_cos must have q's dtype", bad(k=k_new, v=v_new, rotary_cos=t((600, 32), torch.float16),
                                                       rotary_sin=t((600, 32), torch.float16))),
    (ValueError, "rotary_sin must have rotary_cos's shape", bad(k=k_new, v=v_new, rotary_cos=t((600, 32)),
                                                                rotary_sin=t((600, 16)))),
    (ValueError, "rotary_dim (2 x dimension 1) is 192", bad(k=k_new, v=v_new, rotary_cos=t((600, 96)),
                                                            rotary_sin=t((600, 96)))),
    (ValueError, "rotary_cos: seqlen_ro is 256; accepted: at least the cache's 512", bad(k=k_new, v=v_new,
                                                                                         rotary_cos=cos,
                                                                                         rotary_sin=sin)),
    (ValueError, "rotary_cos: seqlen_ro is 256 but rows are rotated at positions up to",
     bad(k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin, cache_seqlens=300)),
    (ValueError, "num_splits must be 0", bad(num_splits=129)),
    (ValueError, "num_splits must be 0", bad(num_splits=-1)),
    (ValueError, "window_size: sizes must be >= -1", bad(window_size=(-2, 0))),
    (ValueError, "softcap must be >= 0", bad(softcap=-1.0)),
    (ValueError, "alibi_slopes must have shape", bad(alibi_slopes=t((3,), torch.float32))),
    (ValueError, "softmax_scale must be finite", bad(softmax_scale=float("inf"))),
]
for error, text, kwargs in cases:
    expect_error(error, text, kvc, **kwargs)

print(f"kvcache host calls: ok ({fake.fakeCudaLaunches()} launches, {len(cases)} bad arguments refused)")
