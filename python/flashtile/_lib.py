"""Loading libflashtile_jit.so (the C ABI with the compiler inside) and calling it through ctypes."""

from __future__ import annotations

import ctypes
import glob
import operator
import os
import struct
import threading
from typing import Optional

_LIBRARY_NAME = "libflashtile_jit.so"


class FlashtileError(RuntimeError):
    """An error the library reported (its message names the argument or the failing step)."""


def library_path() -> str:
    """FLASHTILE_LIBRARY if set, else the library installed inside the package."""
    override = os.environ.get("FLASHTILE_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", _LIBRARY_NAME)


def _nvrtc_in_toolkit() -> bool:
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for home in filter(None, homes):
        if glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")):
            return True
    # What the loader finds by soname: LD_LIBRARY_PATH, then ld.so's cache (read directly: ctypes.util.find_library
    # runs ldconfig in a subprocess, milliseconds on every process's first call).
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep):
        if folder and glob.glob(os.path.join(folder, "libnvrtc.so*")):
            return True
    try:
        with open("/etc/ld.so.cache", "rb") as cache:
            return b"libnvrtc.so" in cache.read()
    except OSError:
        return False


def _preload_pip_nvrtc() -> Optional[str]:
    """Without a CUDA toolkit, NVRTC may come from the pip wheel PyTorch installs (nvidia-cuda-nvrtc). Loading it
    globally here lets the library's dlopen("libnvrtc.so.N") find it by its soname."""
    try:
        import nvidia  # type: ignore  # namespace package of NVIDIA's pip wheels
    except ImportError:
        return None
    candidates = []
    for root in getattr(nvidia, "__path__", []):
        for pattern in ("cuda_nvrtc/lib/libnvrtc.so.*", "cu*/lib/libnvrtc.so.*"):
            candidates += [p for p in glob.glob(os.path.join(root, pattern)) if "builtins" not in p]
    for path in sorted(candidates, reverse=True):  # newest major version first
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
        except OSError:
            continue
    return None


C_INT_MIN, C_INT_MAX = -(2 ** 31), 2 ** 31 - 1


def c_int(name: str, value) -> int:
    """`value` for a C int argument or field, or an error naming `name`: ctypes keeps only the low 32 bits of a
    larger Python int, without a word (head_dim=2**32 + 64 would reach the library as 64)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = operator.index(value)
    if not C_INT_MIN <= value <= C_INT_MAX:
        raise ValueError(f"{name} is {value}; accepted: {C_INT_MIN} to {C_INT_MAX} (a C int)")
    return value


def c_string(name: str, value) -> bytes:
    """`value` for a C string argument, or an error naming `name`: C reads a string up to its first NUL, so
    "causal\\x00junk" would reach the library as "causal", the rest dropped without a word."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    at = value.find("\0")
    if at >= 0:
        shown = value if len(value) <= 80 else value[:80] + "..."
        raise ValueError(f"{name} contains a NUL character at index {at} of {len(value)} ({shown!r}); a C string ends "
                         f"at its first NUL, so the rest would be dropped: remove it")
    return value.encode()


def set_ints(struct_, **fields) -> None:
    """Sets C int fields of a ctypes structure, each checked by c_int."""
    for name, value in fields.items():
        setattr(struct_, name, c_int(name, value))


class VariantArgs(ctypes.Structure):
    """flashtile_variant_args (CApi.h)."""

    _fields_ = [
        ("params", ctypes.POINTER(ctypes.c_float)),
        ("num_params", ctypes.c_int),
        ("inputs", ctypes.POINTER(ctypes.c_void_p)),
        ("num_inputs", ctypes.c_int),
    ]


class Positions(ctypes.Structure):
    """flashtile_positions (CApi.h): where a call sits in a larger problem it is one block of (dense offsets and
    sizes, varlen per-sequence device arrays, head offset and counts; 0 and NULL: the call's own)."""

    _fields_ = [
        ("q_offset", ctypes.c_int), ("k_offset", ctypes.c_int),
        ("seqlen_q_global", ctypes.c_int), ("seqlen_k_global", ctypes.c_int),
        ("q_offsets", ctypes.c_void_p), ("k_offsets", ctypes.c_void_p),
        ("cu_seqlens_q_global", ctypes.c_void_p), ("cu_seqlens_k_global", ctypes.c_void_p),
        ("head_offset", ctypes.c_int), ("heads_q_global", ctypes.c_int), ("heads_kv_global", ctypes.c_int),
    ]


MAX_PARAMS = 8  # FLASHTILE_CALL_MAX_PARAMS
MAX_INPUTS = 4  # FLASHTILE_CALL_MAX_INPUTS


class Call(ctypes.Structure):
    """flashtile_call (CApi.h): one forward call in one struct. The eight pointers come first (q, k, v, o, lse,
    cu_seqlens_q, cu_seqlens_k, stream), so that one struct.pack_into writes them (POINTERS)."""

    _fields_ = [
        ("size", ctypes.c_ulonglong),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("inputs", ctypes.c_void_p * MAX_INPUTS),
        ("variant", ctypes.c_char_p),
        ("schedule", ctypes.c_char_p),
        ("q_stride", ctypes.c_longlong * 4), ("k_stride", ctypes.c_longlong * 4),
        ("v_stride", ctypes.c_longlong * 4), ("o_stride", ctypes.c_longlong * 4),
        ("dtype", ctypes.c_int), ("batch", ctypes.c_int), ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int),
        ("max_seqlen_q", ctypes.c_int), ("max_seqlen_k", ctypes.c_int), ("heads_q", ctypes.c_int),
        ("heads_kv", ctypes.c_int), ("head_dim", ctypes.c_int), ("head_dim_v", ctypes.c_int),
        ("num_params", ctypes.c_int), ("num_inputs", ctypes.c_int),
        ("strict_schedule", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("params", ctypes.c_float * MAX_PARAMS),
        # FP8 descales (dtype FLASHTILE_E4M3 only): NULL or batch x heads_kv fp32 device values each.
        ("q_descale", ctypes.c_void_p), ("k_descale", ctypes.c_void_p), ("v_descale", ctypes.c_void_p),
        # A block of a larger problem: NULL or a flashtile_positions (Positions), read during the call.
        ("positions", ctypes.c_void_p),
        # The call's scratch memory: NULL (the runtime's own), or the caller's under CUDA graph capture.
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_ulonglong),
    ]


# q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, stream at Call.q's offset.
POINTERS = struct.Struct("8Q")
POINTERS_OFFSET = Call.q.offset
INPUTS = [struct.Struct(f"{n}Q") for n in range(MAX_INPUTS + 1)]
INPUTS_OFFSET = Call.inputs.offset


class BwdCall(ctypes.Structure):
    """flashtile_bwd_call (CApi.h): one backward call; `forward` is the forward's flashtile_call as it was made."""

    _fields_ = [
        ("size", ctypes.c_ulonglong),
        ("forward", Call),
        ("d_o", ctypes.c_void_p), ("d_q", ctypes.c_void_p), ("d_k", ctypes.c_void_p), ("d_v", ctypes.c_void_p),
        ("input_grads", ctypes.c_void_p * MAX_INPUTS),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_ulonglong),
        ("d_o_stride", ctypes.c_longlong * 4), ("d_q_stride", ctypes.c_longlong * 4),
        ("d_k_stride", ctypes.c_longlong * 4), ("d_v_stride", ctypes.c_longlong * 4),
        ("deterministic", ctypes.c_int),
    ]


class KvCacheCall(ctypes.Structure):
    """flashtile_kvcache_call (CApiKvCache.h): one call over a KV cache (flash_attn_with_kvcache)."""

    _fields_ = [
        ("size", ctypes.c_ulonglong),
        ("q", ctypes.c_void_p), ("k_cache", ctypes.c_void_p), ("v_cache", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p), ("k_new", ctypes.c_void_p), ("v_new", ctypes.c_void_p),
        ("cache_seqlens", ctypes.c_void_p), ("cache_batch_idx", ctypes.c_void_p), ("block_table", ctypes.c_void_p),
        ("cache_seqlens_host", ctypes.c_void_p), ("cache_batch_idx_host", ctypes.c_void_p),
        ("block_table_host", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("inputs", ctypes.c_void_p * MAX_INPUTS),
        ("variant", ctypes.c_char_p),
        ("schedule", ctypes.c_char_p),
        ("workspace_bytes", ctypes.c_ulonglong),
        ("q_stride", ctypes.c_longlong * 4), ("o_stride", ctypes.c_longlong * 4),
        ("k_cache_stride", ctypes.c_longlong * 4), ("v_cache_stride", ctypes.c_longlong * 4),
        ("k_new_stride", ctypes.c_longlong * 4), ("v_new_stride", ctypes.c_longlong * 4),
        ("block_table_stride", ctypes.c_longlong),
        ("dtype", ctypes.c_int), ("batch", ctypes.c_int), ("seqlen_q", ctypes.c_int), ("heads_q", ctypes.c_int),
        ("heads_kv", ctypes.c_int), ("head_dim", ctypes.c_int), ("head_dim_v", ctypes.c_int),
        ("cache_batch", ctypes.c_int), ("cache_seqlen", ctypes.c_int),
        ("num_pages", ctypes.c_int), ("page_size", ctypes.c_int), ("max_pages_per_seq", ctypes.c_int),
        ("seqlen_new", ctypes.c_int),
        ("num_splits", ctypes.c_int),
        ("num_params", ctypes.c_int), ("num_inputs", ctypes.c_int),
        ("strict_schedule", ctypes.c_int),
        ("softmax_scale", ctypes.c_float),
        ("params", ctypes.c_float * MAX_PARAMS),
        ("rotary_cos", ctypes.c_void_p), ("rotary_sin", ctypes.c_void_p),
        ("rotary_dim", ctypes.c_int), ("seqlen_ro", ctypes.c_int), ("rotary_interleaved", ctypes.c_int),
        ("cache_dtype", ctypes.c_int), ("k_descale", ctypes.c_void_p), ("v_descale", ctypes.c_void_p),
    ]


class ReferenceCall(ctypes.Structure):
    """flashtile_reference_call (CApiJit.h): a variant's attention and gradients in fp64 on the CPU."""

    _fields_ = [
        ("size", ctypes.c_ulonglong),
        ("variant", ctypes.c_char_p),
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("d_o", ctypes.c_void_p),
        ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p), ("d_q", ctypes.c_void_p), ("d_k", ctypes.c_void_p),
        ("d_v", ctypes.c_void_p),
        ("inputs", ctypes.c_void_p * MAX_INPUTS),
        ("input_lengths", ctypes.c_longlong * MAX_INPUTS),
        ("input_grads", ctypes.c_void_p * MAX_INPUTS),
        ("param_grads", ctypes.c_void_p),
        ("params", ctypes.c_double * MAX_PARAMS),
        ("softmax_scale", ctypes.c_double),
        ("batch", ctypes.c_int), ("seqlen_q", ctypes.c_int), ("seqlen_k", ctypes.c_int), ("heads_q", ctypes.c_int),
        ("heads_kv", ctypes.c_int), ("head_dim", ctypes.c_int), ("head_dim_v", ctypes.c_int),
        ("num_params", ctypes.c_int), ("num_inputs", ctypes.c_int),
        ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("q_offset", ctypes.c_longlong), ("k_offset", ctypes.c_longlong),
        ("seqlen_q_global", ctypes.c_int), ("seqlen_k_global", ctypes.c_int),
        ("head_offset", ctypes.c_int), ("heads_q_global", ctypes.c_int), ("heads_kv_global", ctypes.c_int),
        ("q_offsets", ctypes.c_void_p), ("k_offsets", ctypes.c_void_p),
        ("cu_seqlens_q_global", ctypes.c_void_p), ("cu_seqlens_k_global", ctypes.c_void_p),
        ("fwd_o", ctypes.c_void_p), ("fwd_lse", ctypes.c_void_p),
    ]


class _Library:
    def __init__(self, path: str):
        if not os.path.exists(path):
            raise FlashtileError(
                f"flashtile's library is missing at {path}; reinstall the package (pip install .) or set "
                "FLASHTILE_LIBRARY to a built libflashtile_jit.so"
            )
        self.path = path
        lib = ctypes.CDLL(path)
        c_int, c_float, c_char_p, c_void_p = ctypes.c_int, ctypes.c_float, ctypes.c_char_p, ctypes.c_void_p
        ll_p = ctypes.POINTER(ctypes.c_longlong)
        lib.flashtile_create.restype = c_void_p
        lib.flashtile_create.argtypes = []
        lib.flashtile_destroy.argtypes = [c_void_p]
        lib.flashtile_enable_jit.argtypes = [c_void_p]
        lib.flashtile_load_aot.argtypes = [c_void_p, c_char_p]
        lib.flashtile_last_error.restype = c_char_p
        lib.flashtile_version.restype = c_char_p
        for name in ("flashtile_register_variant", "flashtile_variant_id"):
            getattr(lib, name).restype = c_void_p
            getattr(lib, name).argtypes = [c_char_p]
        lib.flashtile_compile_variant.restype = c_void_p
        lib.flashtile_compile_variant.argtypes = [c_char_p, c_char_p, c_int, c_int, c_int, c_char_p]
        lib.flashtile_builtin_variants.restype = c_void_p
        lib.flashtile_string_free.argtypes = [c_void_p]
        lib.flashtile_forward_variant.restype = c_int
        lib.flashtile_forward_variant.argtypes = (
            [c_void_p] * 6 + [c_int] * 8 + [ll_p] * 4 + [c_float, c_char_p, c_void_p, c_void_p]
        )
        lib.flashtile_forward_varlen_variant.restype = c_int
        lib.flashtile_forward_varlen_variant.argtypes = (
            [c_void_p] * 8 + [c_int] * 10 + [ll_p] * 4 + [c_float, c_char_p, c_void_p, c_void_p]
        )
        lib.flashtile_forward_call.restype = c_int
        lib.flashtile_forward_call.argtypes = [c_void_p, c_void_p]
        lib.flashtile_backward_call.restype = c_int
        lib.flashtile_backward_call.argtypes = [c_void_p, c_void_p]
        lib.flashtile_forward_workspace_size.restype = c_int
        lib.flashtile_forward_workspace_size.argtypes = [c_void_p, c_void_p, ctypes.POINTER(ctypes.c_ulonglong)]
        lib.flashtile_backward_workspace_size.restype = c_int
        lib.flashtile_backward_workspace_size.argtypes = [c_void_p, c_void_p, ctypes.POINTER(ctypes.c_ulonglong)]
        lib.flashtile_reference_attention.restype = c_int
        lib.flashtile_reference_attention.argtypes = [c_void_p]
        lib.flashtile_forward_kvcache.restype = c_int
        lib.flashtile_forward_kvcache.argtypes = [c_void_p, c_void_p]
        lib.flashtile_explain.restype = c_int
        lib.flashtile_explain.argtypes = [c_void_p, c_void_p, c_char_p, c_void_p, ctypes.c_ulonglong]
        lib.flashtile_explain_kvcache.restype = c_int
        lib.flashtile_explain_kvcache.argtypes = [c_void_p, c_void_p, c_char_p, c_void_p, ctypes.c_ulonglong]
        for name in ("flashtile_set_schedule", "flashtile_set_strict_schedule"):
            getattr(lib, name).restype = c_int
        lib.flashtile_set_schedule.argtypes = [c_void_p, c_char_p]
        lib.flashtile_check_errors.restype = c_int
        lib.flashtile_check_errors.argtypes = [c_void_p]
        lib.flashtile_set_strict_schedule.argtypes = [c_void_p, c_int]
        self.lib = lib
        self._runtime = None
        self._lock = threading.Lock()

    def error(self, what: str) -> FlashtileError:
        message = self.lib.flashtile_last_error()
        return FlashtileError(f"{what}: {message.decode(errors='replace') if message else 'unknown error'}")

    def string(self, pointer, what: str) -> str:
        if not pointer:
            raise self.error(what)
        try:
            return ctypes.string_at(pointer).decode()
        finally:
            self.lib.flashtile_string_free(pointer)

    def runtime(self) -> int:
        """The process's runtime, with the JIT enabled (created on first use)."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    if not _nvrtc_in_toolkit():
                        _preload_pip_nvrtc()
                    rt = self.lib.flashtile_create()
                    if not rt:
                        raise self.error("creating the runtime")
                    if self.lib.flashtile_enable_jit(rt) != 0:
                        raise self.error("enabling the JIT")
                    aot = os.environ.get("FLASHTILE_AOT_DIR")
                    if aot and self.lib.flashtile_load_aot(rt, aot.encode()) != 0:
                        raise self.error(f"loading the ahead-of-time kernels of FLASHTILE_AOT_DIR={aot}")
                    self._runtime = rt
        return self._runtime


_library: Optional[_Library] = None
_library_lock = threading.Lock()


def library() -> _Library:
    global _library
    if _library is None:
        with _library_lock:
            if _library is None:
                _library = _Library(library_path())
    return _library


def check_errors() -> None:
    """Raises FlashtileError if a kernel of an earlier flash_attn_with_kvcache call met an out-of-range device value
    (cache_seqlens, cache_batch_idx or block_table): the kernels clamp such values, so that call's output is wrong.
    The message names the call (its number, kernel, sizes and stream), the argument (e.g. `block_table[1][7] =
    1048576`) and the accepted range. Synchronizes the GPUs the package ran such calls on (flashtile_check_errors);
    the record is cleared once reported. Returns None when nothing was recorded or nothing ran."""
    lib = library()
    if lib._runtime is None:
        return
    if lib.lib.flashtile_check_errors(lib._runtime) != 0:
        raise lib.error("flashtile.check_errors")


def version() -> str:
    return library().lib.flashtile_version().decode()


def builtin_variants() -> list:
    lib = library()
    return lib.string(lib.lib.flashtile_builtin_variants(), "listing the built-in variants").split(",")


def variant_id(variant: str) -> str:
    """The id of a built-in name or a JSON description (name#hash of its IR)."""
    text = c_string("variant", variant)
    lib = library()
    return lib.string(lib.lib.flashtile_variant_id(text), "computing the variant's id")


def register_variant(description: str) -> str:
    text = c_string("description", description)
    lib = library()
    return lib.string(lib.lib.flashtile_register_variant(text), "registering the variant")


_DTYPES = {"f16": 0, "fp16": 0, "float16": 0, "bf16": 1, "bfloat16": 1}


def compile_variant(variant: str, stage: str = "tile", dtype: str = "bf16", head_dim: int = 128,
                    head_dim_v: int = 0, arch: str = "sm_90a") -> str:
    """The tile IR ("tile"), scheduled IR ("scheduled") or CUDA ("cuda") of a built-in name or a description."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not one of bf16, f16")
    head_dim, head_dim_v = c_int("head_dim", head_dim), c_int("head_dim_v", head_dim_v)
    texts = c_string("variant", variant), c_string("stage", stage), c_string("arch", arch)
    lib = library()
    pointer = lib.lib.flashtile_compile_variant(texts[0], texts[1], _DTYPES[dtype], head_dim, head_dim_v, texts[2])
    return lib.string(pointer, f"compiling to {stage}")
