#!/usr/bin/env python3
"""On the GPU machine: every kind of bad ahead-of-time kernel, and bad variant numbers, through the C ABI.

Each bad kernel library is a copy of one good kernel from .device/aot with one defect (a directory or FIFO in place
of a file, a cubin for another SM, truncated, garbage behind the ELF magic, another kernel's cubin, an entry that
names no symbol, fields out of range, another compiler version). flashtile_load_aot must refuse it with a message
naming the file; if a library were accepted anyway, a launch on real buffers must return an error, never fault.
Then, with .device/aot-variants: sliding_window with left -5 or 2.5 and softcap 0 or NaN must return an error
naming the parameter and leave O untouched, a valid window must run and write O, and a varlen call with every
sequence empty (null tensors, as PyTorch hands them) must succeed without a launch.

  python3 bench/device/bad_aot.py [--lib .device/lib/libflashtile.so] [--aot .device/aot]
                                  [--variants .device/aot-variants]
Prints one line per check; exit status 1 if any check failed.
"""
import argparse
import ctypes
import math
import os
import pathlib
import shutil
import struct
import sys
import tempfile

FLASHTILE_BF16 = 1
failures = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (": " + detail if detail else ""), flush=True)
    if not ok:
        failures.append(name)


class Cuda:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._ok(self.lib.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self._ok(self.lib.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        context = ctypes.c_void_p()
        self._ok(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
        self._ok(self.lib.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    def _ok(self, result, what):
        if result != 0:
            raise RuntimeError("%s failed: CUresult %d" % (what, result))

    def alloc(self, size, fill):
        pointer = ctypes.c_uint64()
        self._ok(self.lib.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "cuMemAlloc")
        self._ok(self.lib.cuMemsetD8_v2(pointer, ctypes.c_ubyte(fill), ctypes.c_size_t(size)), "cuMemsetD8")
        return pointer.value

    def read(self, pointer, size):
        self._ok(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")
        buffer = (ctypes.c_ubyte * size)()
        self._ok(self.lib.cuMemcpyDtoH_v2(buffer, ctypes.c_uint64(pointer), ctypes.c_size_t(size)), "cuMemcpyDtoH")
        return bytes(buffer)


class VariantArgs(ctypes.Structure):
    _fields_ = [("params", ctypes.POINTER(ctypes.c_float)), ("num_params", ctypes.c_int),
                ("inputs", ctypes.POINTER(ctypes.c_void_p)), ("num_inputs", ctypes.c_int)]


class Flashtile:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.flashtile_create.restype = ctypes.c_void_p
        self.lib.flashtile_destroy.argtypes = [ctypes.c_void_p]
        self.lib.flashtile_load_aot.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self.lib.flashtile_last_error.restype = ctypes.c_char_p
        self.lib.flashtile_version.restype = ctypes.c_char_p
        ll4 = ctypes.POINTER(ctypes.c_longlong)
        p = ctypes.c_void_p
        i = ctypes.c_int
        self.lib.flashtile_forward_variant.argtypes = [p, p, p, p, p, p, i, i, i, i, i, i, i, i, ll4, ll4, ll4, ll4,
                                                       ctypes.c_float, ctypes.c_char_p, ctypes.POINTER(VariantArgs), p]
        self.lib.flashtile_forward_varlen.argtypes = [p, p, p, p, p, p, p, p, i, i, i, i, i, i, i, i, i, i, ll4, ll4,
                                                      ll4, ll4, ctypes.c_float, ctypes.c_char_p, p]

    def error(self):
        return self.lib.flashtile_last_error().decode(errors="replace")


def strides(*values):
    return (ctypes.c_longlong * len(values))(*values)


def forward(ft, rt, buffers, variant, params, seqlen=256, heads=8, head_dim=128):
    q, k, v, o, lse = buffers
    s = strides(seqlen * heads * head_dim, heads * head_dim, head_dim, 1)
    array = (ctypes.c_float * max(len(params), 1))(*params)
    args = VariantArgs(array, len(params), None, 0)
    return ft.lib.flashtile_forward_variant(rt, q, k, v, o, lse, FLASHTILE_BF16, 1, seqlen, seqlen, heads, heads,
                                            head_dim, 0, s, s, s, s, 0.0, variant.encode(), ctypes.byref(args), None)


def pick_kernel(aot, variant="causal"):
    for manifest in sorted(pathlib.Path(aot).glob("*.manifest")):
        text = manifest.read_text()
        if "dtype=bf16\n" in text and "headDim=128\n" in text and "headDimV=128\n" in text and \
                "variant=%s\n" % variant in text and "shapeClass=default\n" in text:
            return manifest
    raise SystemExit("no bf16 head-dim-128 %s kernel in %s" % (variant, aot))


def replace_field(text, field, value):
    lines = [("%s=%s" % (field, value)) if l.startswith(field + "=") else l for l in text.splitlines()]
    return "\n".join(lines) + "\n"


def bad_libraries(good_manifest, other_cubin):
    """(name, expected text in the error, function that damages a copy in a directory)."""
    manifest_text = good_manifest.read_text()
    cubin = good_manifest.with_suffix(".cubin").read_bytes()
    flags = struct.unpack_from("<I", cubin, 48)[0]
    abi = cubin[8]
    sm80 = (flags & ~0xff00) | (80 << 8) if abi >= 8 else (flags & ~0xff) | 80

    def write(d, manifest=manifest_text, data=cubin):
        (d / "k.manifest").write_text(manifest)
        (d / "k.cubin").write_bytes(data)

    def as_dir(d, which):
        write(d)
        (d / which).unlink()
        (d / which).mkdir()

    def as_fifo(d, which):
        write(d)
        (d / which).unlink()
        os.mkfifo(d / which)

    return [
        ("manifest is a directory", "is a directory", lambda d: as_dir(d, "k.manifest")),
        ("cubin is a directory", "is a directory", lambda d: as_dir(d, "k.cubin")),
        ("cubin is a FIFO", "is a FIFO", lambda d: as_fifo(d, "k.cubin")),
        ("manifest is a FIFO", "is a FIFO", lambda d: as_fifo(d, "k.manifest")),
        ("sm_80 cubin under an sm_90a manifest", "compiled for sm_80",
         lambda d: write(d, data=cubin[:48] + struct.pack("<I", sm80) + cubin[52:])),
        ("truncated cubin", "truncated", lambda d: write(d, data=cubin[:len(cubin) // 2])),
        ("ELF magic and garbage", "not a 64-bit", lambda d: write(d, data=b"\x7fELF" + b"\x5a" * 4096)),
        ("another kernel's cubin", "defines no kernel", lambda d: write(d, data=other_cubin)),
        ("entry naming no symbol", "defines no kernel",
         lambda d: write(d, manifest=replace_field(manifest_text, "entry", "flashtile_no_such_kernel"))),
        ("blockM 1", "field 'blockM'", lambda d: write(d, manifest=replace_field(manifest_text, "blockM", "1"))),
        ("smemBytes INT_MAX", "field 'smemBytes'",
         lambda d: write(d, manifest=replace_field(manifest_text, "smemBytes", "2147483647"))),
        ("another compiler version", "written by flashtile 0.0.1+0123456789ab",
         lambda d: write(d, manifest=replace_field(manifest_text, "compilerVersion", "0.0.1+0123456789ab"))),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", default=".device/lib/libflashtile.so")
    parser.add_argument("--aot", default=".device/aot")
    parser.add_argument("--variants", default=".device/aot-variants")
    args = parser.parse_args()
    os.environ["FLASHTILE_DISABLE_CACHE"] = "1"
    ft = Flashtile(os.path.abspath(args.lib))
    cuda = Cuda()
    print("flashtile", ft.lib.flashtile_version().decode())
    seqlen, heads, head_dim = 256, 8, 128
    tensor_bytes = seqlen * heads * head_dim * 2
    q, k, v = (cuda.alloc(tensor_bytes, 0x3c) for _ in range(3))  # bf16 0x3c3c: about 0.0115
    lse = cuda.alloc(heads * seqlen * 4, 0)

    good = pick_kernel(args.aot)
    other = next(m for m in sorted(pathlib.Path(args.aot).glob("*.manifest")) if m != good)
    for name, expected, damage in bad_libraries(good, other.with_suffix(".cubin").read_bytes()):
        directory = pathlib.Path(tempfile.mkdtemp(prefix="flashtile-bad-aot-"))
        try:
            damage(directory)
            rt = ft.lib.flashtile_create()
            rc = ft.lib.flashtile_load_aot(rt, str(directory).encode())
            message = ft.error() if rc != 0 else ""
            if rc != 0:
                check("load refuses: " + name, expected in message and "internal error" not in message, message)
            else:
                # Accepted at load: the launch must still be a clear error, never a fault.
                o = cuda.alloc(tensor_bytes, 0x5a)
                rc = forward(ft, rt, (q, k, v, o, lse), "causal", [], seqlen, heads, head_dim)
                check("load refuses: " + name, False, "accepted; the launch returned %d (%s)" % (rc, ft.error()))
            ft.lib.flashtile_destroy(rt)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    rt = ft.lib.flashtile_create()
    rc = ft.lib.flashtile_load_aot(rt, os.path.abspath(args.variants).encode())
    check("load the variant kernels", rc == 0, ft.error() if rc else "")
    o = cuda.alloc(tensor_bytes, 0x5a)
    sentinel = cuda.read(o, tensor_bytes)
    bad_calls = [("sliding_window", [-5.0, 0.0], "left = -5"), ("sliding_window", [2.5, 0.0], "left = 2.5"),
                 ("softcap", [0.0], "cap = 0"), ("softcap", [math.nan], "cap = nan")]
    for variant, params, expected in bad_calls:
        rc = forward(ft, rt, (q, k, v, o, lse), variant, params, seqlen, heads, head_dim)
        message = ft.error() if rc else ""
        check("%s %s is an error" % (variant, params), rc != 0 and expected in message and "accepted:" in message,
              message or "returned success")
        check("%s %s leaves O untouched" % (variant, params), cuda.read(o, tensor_bytes) == sentinel)
    rc = forward(ft, rt, (q, k, v, o, lse), "sliding_window", [64.0, 0.0], seqlen, heads, head_dim)
    check("sliding_window [64, 0] runs", rc == 0, ft.error() if rc else "")
    check("sliding_window [64, 0] writes O", rc == 0 and cuda.read(o, tensor_bytes) != sentinel)

    cu = cuda.alloc(4 * 4, 0)  # batch 3: four zero offsets, every sequence empty
    s = strides(heads * head_dim, head_dim, 1)
    rc = ft.lib.flashtile_forward_varlen(rt, None, None, None, None, None, cu, cu, FLASHTILE_BF16, 3, 0, 0, 0, 0,
                                         heads, heads, head_dim, 0, s, s, s, s, 0.0, b"causal", None)
    check("varlen with every sequence empty and null tensors succeeds", rc == 0, ft.error() if rc else "")
    ft.lib.flashtile_destroy(rt)

    print("bad_aot: %d checks failed" % len(failures) if failures else "bad_aot: every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
