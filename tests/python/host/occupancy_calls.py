"""One decode call of flash_attn_func on a machine without a GPU, under the fake driver (FakeCuda.c, its path in
argv[1]) and the stand-in torch: prints the split count the launch got (FlashtileFwdParams.numSplits, read back from
the fake driver's last launch) for the occupancy the fake driver answers (FLASHTILE_FAKE_BLOCKS_PER_SM, set by
test_split_occupancy.py). With an answer of 0 blocks an SM, the call must fail naming the kernel. Exits non-zero on
the first failed check."""

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

LAYOUT = c_layout("flashtile/runtime/KernelAbi.h", "struct FlashtileFwdParams", ["numSplits"])
fake.fakeCudaLaunches.restype = ctypes.c_ulonglong
fake.fakeCudaLastParams.restype = ctypes.c_void_p

# One query row per (batch, head): 2 x 8 Q tiles, each walking 8192 keys (128 K/V tiles of the decode schedule).
B, H, SEQLEN_K, D = 2, 8, 8192, 128
q = torch.empty((B, 1, H, D), dtype=torch.bfloat16, device="cuda")
k, v = (torch.empty((B, SEQLEN_K, H, D), dtype=torch.bfloat16, device="cuda") for _ in range(2))

blocks = os.environ["FLASHTILE_FAKE_BLOCKS_PER_SM"]
if blocks == "0":
    try:
        flashtile.flash_attn_func(q, k, v)
    except RuntimeError as e:
        if "fits no thread block on an SM" not in str(e):
            raise SystemExit(f"0 blocks an SM: expected the kernel named as fitting no block, got {e!r}")
    else:
        raise SystemExit("0 blocks an SM: the call succeeded")
    if fake.fakeCudaLaunches() != 0:
        raise SystemExit("0 blocks an SM: the failed call launched a kernel")
    print("occupancy call: ok (refused)")
    sys.exit(0)

flashtile.flash_attn_func(q, k, v)
if fake.fakeCudaLaunches() == 0:
    raise SystemExit("the decode call launched nothing")
offset, size = LAYOUT["numSplits"]
(splits,) = struct.unpack_from("i", ctypes.string_at(fake.fakeCudaLastParams(), offset + size), offset)
print(f"blocks per SM = {blocks}: numSplits = {splits}")
print("occupancy call: ok")
