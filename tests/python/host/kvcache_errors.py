"""The KV cache's device error record and FLASHTILE_CHECK_KVCACHE through the Python package, on a machine without a
GPU: the stand-in torch beside this file and the fake driver (FakeCuda.c, its path in argv[1]), whose planted device
memory plays what a kernel wrote (fakeCudaPlant) and shows what the runtime zeroed (fakeCudaPlanted). The JIT
compiles the decode schedule's KV-cache kernels for real. Run by test_kvcache_host.py; exits non-zero on the first
failure."""

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

LAYOUT = c_layout("flashtile/runtime/KernelAbi.h", "struct FlashtileFwdParams", ["kvErrors", "kvCall"])
RECORD = c_layout("flashtile/runtime/KernelAbi.h", "struct FlashtileKvError", ["argument"])["sizeof"][0]
fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaLastParams.restype = ctypes.c_void_p
fake.fakeCudaPlant.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]
fake.fakeCudaPlanted.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]


def last_record() -> tuple:
    """(kvErrors, kvCall) of the last launch."""
    raw = ctypes.string_at(fake.fakeCudaLastParams(), LAYOUT["sizeof"][0])
    (address,) = struct.unpack_from("Q", raw, LAYOUT["kvErrors"][0])
    (call,) = struct.unpack_from("i", raw, LAYOUT["kvCall"][0])
    return address, call


def plant(address: int, ints) -> None:
    data = struct.pack(f"{len(ints)}i", *ints)
    if fake.fakeCudaPlant(address, data, len(data)) != 0:
        raise SystemExit(f"could not plant {len(ints)} ints at {address:#x}")


def planted(address: int, count: int) -> tuple:
    buffer = ctypes.create_string_buffer(4 * count)
    if fake.fakeCudaPlanted(address, buffer, 4 * count) != 0:
        raise SystemExit(f"nothing planted at {address:#x}")
    return struct.unpack(f"{count}i", buffer.raw)


def expect_error(text: str, fn, *args, **kwargs):
    before = fake.fakeCudaLaunches()
    try:
        fn(*args, **kwargs)
    except flashtile.FlashtileError as e:
        if text not in str(e):
            raise SystemExit(f"expected FlashtileError with {text!r}, got {e!r}")
        return before, str(e)
    raise SystemExit(f"expected FlashtileError with {text!r}; the call succeeded")


B, HQ, HKV, D, PAGE, PAGES, PER_SEQ = 2, 8, 2, 128, 16, 100, 8
bf16, i32 = torch.bfloat16, torch.int32


def t(shape, dtype=bf16):
    return torch.empty(shape, dtype=dtype, device="cuda")


kvc = flashtile.flash_attn_with_kvcache
q, pool = t((B, 1, HQ, D)), t((PAGES, PAGE, HKV, D))
k_new, v_new = t((B, 1, HKV, D)), t((B, 1, HKV, D))
seqlens, table = t((B,), i32), t((B, PER_SEQ), i32)

# Nothing ran yet: nothing to read.
flashtile.check_errors()

# A paged call appending one key gets the runtime's record and the call's number.
kvc(q, pool, pool, k_new, v_new, cache_seqlens=seqlens, block_table=table, num_splits=1)
record, call = last_record()
if record == 0 or call < 1:
    raise SystemExit(f"a KV-cache call reached its kernels with kvErrors {record:#x}, kvCall {call}")
flashtile.check_errors()  # the record is zero

# What a kernel would write: block_table[1][7] = 1048576 read by the attention kernel of that call.
plant(record, [3, call, 2, 1, 7, 1 << 20, PAGES - 1, 0] + [0] * (RECORD // 4 - 8))
_, message = expect_error("flashtile.check_errors: KV-cache call #%d (kernel flashtile_decode_none_bf16_d128_kvcache"
                          % call, flashtile.check_errors)
for part in ("batch 2, seqlen_q 1, a paged cache of 100 pages, 128 keys a sequence, 1 appended",
             "its attention kernel read block_table[1][7] = 1048576; accepted: a page index from 0 to num_pages - 1 "
             "= 99", "so that call's output and the keys it appended are wrong"):
    if part not in message:
        raise SystemExit(f"check_errors' message lacks {part!r}: {message}")
if planted(record, 1) != (0,):
    raise SystemExit(f"the runtime did not zero the record after reading it: {planted(record, 8)}")
flashtile.check_errors()  # reported once

# FLASHTILE_CHECK_KVCACHE=1: the device values are copied and checked before the launch.
os.environ["FLASHTILE_CHECK_KVCACHE"] = "1"
plant(seqlens.data_ptr(), [100, -5])
plant(table.data_ptr(), list(range(B * PER_SEQ)))
before, message = expect_error("kvCache.cacheSeqlens[1] = -5; accepted: 0 to seqlenK - seqlenNew = 127", kvc, q, pool,
                               pool, k_new, v_new, cache_seqlens=seqlens, block_table=table, num_splits=1)
if "FLASHTILE_CHECK_KVCACHE" not in message or fake.fakeCudaLaunches() != before:
    raise SystemExit(f"the debug mode's rejection must name it and launch nothing: {message}")
plant(seqlens.data_ptr(), [100, 50])
plant(table.data_ptr(), [0] * PER_SEQ + [1, 2, PAGES, 3, 4, 5, 6, 7])
expect_error("kvCache.blockTable[1][2] = 100; accepted: a page index from 0 to numPages - 1 = 99", kvc, q, pool, pool,
             k_new, v_new, cache_seqlens=seqlens, block_table=table, num_splits=1)
plant(table.data_ptr(), list(range(B * PER_SEQ)))
kvc(q, pool, pool, k_new, v_new, cache_seqlens=seqlens, block_table=table, num_splits=1)

# The same synchronization reads the record back: a later call reports an earlier one's value and launches nothing.
record, call = last_record()
plant(record, [1, call, 1, 0, -1, 4096, 127, 0] + [0] * (RECORD // 4 - 8))
before, message = expect_error("its append kernel read cache_seqlens[0] = 4096", kvc, q, pool, pool, k_new, v_new,
                               cache_seqlens=seqlens, block_table=table, num_splits=1)
if "found by a later call" not in message or fake.fakeCudaLaunches() != before:
    raise SystemExit(f"a record found by a later call must say so and launch nothing: {message}")
kvc(q, pool, pool, k_new, v_new, cache_seqlens=seqlens, block_table=table, num_splits=1)
del os.environ["FLASHTILE_CHECK_KVCACHE"]

print("kvcache errors: ok")
