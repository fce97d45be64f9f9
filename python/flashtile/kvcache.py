"""flash_attn_with_kvcache: attention over a KV cache (decode), flash-attn 2.x's call on torch tensors.

Every argument is checked here, before any launch, as the C ABI (CApiKvCache.h) checks it, so that a bad one is an
error naming the argument; the call then goes through flashtile_forward_kvcache on the current CUDA stream.
"""

import ctypes
import math
import operator
from typing import List, Optional, Tuple

import torch

from . import _lib, fp8
from . import interface as _interface

# Page sizes a paged cache may have (KvCache.h's isSupportedPageSize: powers of two, 16 to 256 keys).
SUPPORTED_PAGE_SIZES = (16, 32, 64, 128, 256)
MAX_SPLITS = 128  # flashtile_kvcache_call.num_splits: 0 (the runtime's choice) or 1..128
_STRIDE_MULTIPLE = 8  # kernels move rows as 16-byte vectors of 8 fp16/bf16 elements
_E4M3_STRIDE_MULTIPLE = 16  # and an e4m3 cache's rows as 16-byte vectors of 16 elements
_E4M3_CACHE_CODE = 2  # flashtile_kvcache_call.cache_dtype: FLASHTILE_E4M3
_KVCACHE_CALL_SIZE = ctypes.sizeof(_lib.KvCacheCall)


def _check_int32(name: str, t, shape: tuple, device, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor ({what}), got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise ValueError(f"{name} must be torch.int32 ({what}), got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape} ({what}), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device} (with q), got {t.device}")
    return t


def _check_cache(name: str, t, q) -> torch.Tensor:
    """A cache tensor: written in place by appends, so never copied; its layout must be one kernels read."""
    _interface._check_tensor(name, t, 4, "(batch_size_cache, seqlen_cache, nheads_k, headdim) or (num_blocks, "
                                         "page_block_size, nheads_k, headdim) with block_table")
    fp8.refuse_e5m2(name, t)
    if t.dtype != q.dtype and not fp8.is_e4m3(t):
        raise ValueError(f"{name} must have q's dtype {q.dtype} or be torch.float8_e4m3fn (an FP8 cache, with "
                         f"k_descale and v_descale), got {t.dtype}")
    if t.device != q.device:
        raise ValueError(f"{name} must be on {q.device} (with q), got {t.device}")
    strides = t.stride()
    if strides[-1] != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride 1), got strides {strides}")
    # A loop, not a generator: torch.compile traces these checks.
    multiple = _E4M3_STRIDE_MULTIPLE if fp8.is_e4m3(t) else _STRIDE_MULTIPLE
    bad_stride = False
    for stride in strides[:3]:
        bad_stride = bad_stride or stride < 0 or stride % multiple != 0
    if bad_stride:
        raise ValueError(f"{name}: strides {strides} are not supported; the first three must be non-negative "
                         f"multiples of {multiple} elements (16-byte rows). The cache is updated in place, "
                         "so flashtile does not copy it")
    return t


def _check_cache_address(name: str, t: torch.Tensor) -> None:
    # At the launch: data_ptr() cannot be traced by torch.compile.
    if t.data_ptr() % 16:
        raise ValueError(f"{name} must start at a 16-byte aligned address (the cache is updated in place, so "
                         "flashtile does not copy it)")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            schedule=None, strict=False, q_descale=None, k_descale=None, v_descale=None):
    """flash-attn 2.x's flash_attn_with_kvcache (forward only; the cache tensors are updated in place).

    q: (batch, seqlen_q, nheads, headdim). k_cache/v_cache: (batch_size_cache, seqlen_cache, nheads_k, headdim)
    or, with block_table (batch, max_num_blocks_per_seq) int32, paged (num_blocks, page_block_size, nheads_k,
    headdim) with page_block_size 16, 32, 64, 128 or 256. k/v (batch, seqlen_new, nheads_k, headdim): new keys and
    values written into the cache at cache_seqlens (an int or an int32 (batch,) tensor; None: the whole cache) before
    attending. rotary_cos/rotary_sin (seqlen_ro, rotary_dim / 2) of q's dtype rotate q and k (with k/v only).
    cache_batch_idx (batch,) int32 selects rows of a contiguous cache. Causal and windows align to the bottom-right
    corner of each sequence's cache_seqlens + seqlen_new keys. Returns out (batch, seqlen_q, nheads, headdim), or
    (out, softmax_lse (batch, nheads, seqlen_q) fp32) with return_softmax_lse=True. cache_leftpad is not supported.
    schedule=/strict= as flash_attn_func's: only schedules whose kernels read KV caches serve these calls (decode),
    so another named schedule falls back with a log line, or raises with strict=True.

    FP8 caches (flash-attn 3's semantics, docs/fp8.md): k_cache and v_cache torch.float8_e4m3fn (both) with q, k, v
    and the rotary tables torch.bfloat16 or torch.float16; k_descale/v_descale None (= 1) or fp32 (batch, nheads_k):
    the cache's value of (b, h) is its e4m3 value times k_descale[b, h] (v_descale for v_cache), and new k/v are
    written (after rotary) as e4m3(value / descale), rounded to nearest and saturated at ±448. The output has q's
    dtype. q_descale is refused (q is not e4m3 here).
    """
    args = _checked_call(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                         cache_leftpad, block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved,
                         alibi_slopes, num_splits, schedule, strict, q_descale, k_descale, v_descale)
    # The custom op under torch.compile (no graph break; the caches are declared mutated), the direct call otherwise.
    if _interface._is_compiling():
        out, lse = torch.ops.flashtile.fwd_kvcache(*args)
    else:
        out, lse = _launch(*args)
    return (out, lse) if return_softmax_lse else out


def explain_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                    cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0, *,
                    schedule=None, strict=False, q_descale=None, k_descale=None, v_descale=None, arch=None):
    """Which kernel flash_attn_with_kvcache with these arguments runs, and why, without running it (nothing is
    appended). Returns flashtile.explain's dict (schedule, entry, source, order, forced_by, fell_back, reason); the
    entry names the cache's kernel, `..._kvcache_e4m3` for an FP8 cache. `arch`: None for q's GPU, or "sm_80",
    "sm_90a", "sm_100a"."""
    if arch is not None and not isinstance(arch, str):
        raise TypeError(f"arch must be None (q's GPU) or a target such as 'sm_90a', got {type(arch).__name__}")
    args = _checked_call(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                         cache_leftpad, block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved,
                         alibi_slopes, num_splits, schedule, strict, q_descale, k_descale, v_descale)
    return _launch(*args, explain_arch=arch or "")


def _checked_call(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
                  block_table, softmax_scale, causal, window_size, softcap, rotary_interleaved, alibi_slopes,
                  num_splits, schedule, strict, q_descale, k_descale, v_descale):
    """flash_attn_with_kvcache's arguments checked, as _launch's (and the custom op's) arguments."""
    schedule_name, strict_flag = _interface._schedule_option(schedule, strict)
    if isinstance(q, torch.Tensor):
        fp8.refuse_e4m3_query("q", q)
    q = _interface._check_tensor("q", q, 4, "(batch, seqlen_q, nheads, headdim)")
    k_cache = _check_cache("k_cache", k_cache, q)
    v_cache = _check_cache("v_cache", v_cache, q)
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache and v_cache must have one dtype (both q's, or both torch.float8_e4m3fn), got "
                         f"{k_cache.dtype} and {v_cache.dtype}")
    cache_e4m3 = fp8.is_e4m3(k_cache)
    batch, seqlen_q, heads_q, d = q.shape
    if cache_leftpad is not None:
        raise NotImplementedError("cache_leftpad: flashtile has no left-padded caches yet; pass None (sequences "
                                  "start at row 0 of their cache)")
    if softmax_scale is not None and (not math.isfinite(float(softmax_scale)) or float(softmax_scale) == 0.0):
        raise ValueError(f"softmax_scale must be finite and non-zero, or None (1/sqrt(headdim)), got {softmax_scale}")

    # The cache: contiguous or paged.
    paged = block_table is not None
    heads_kv, dk, dv = k_cache.shape[2], k_cache.shape[3], v_cache.shape[3]
    if tuple(v_cache.shape[:3]) != tuple(k_cache.shape[:3]):
        raise ValueError(f"v_cache must have k_cache's first three dimensions {tuple(k_cache.shape[:3])}, got "
                         f"{tuple(v_cache.shape)}")
    if dk != d:
        raise ValueError(f"k_cache's head dim must be q's ({d}), got {dk}")
    if (d != dv or d not in _interface._SUPPORTED_HEAD_DIM_SET) and (d, dv) not in _interface.SUPPORTED_HEAD_DIM_PAIRS:
        raise ValueError(f"head dims: q/k_cache {d}, v_cache {dv} are not supported; accepted: equal head dims "
                         f"{', '.join(map(str, _interface.SUPPORTED_HEAD_DIMS))}, or 192 with 128 for v (a cache "
                         "is updated in place, so flashtile does not pad it)")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"nheads ({heads_q}) must be a multiple of k_cache's nheads_k ({heads_kv})")
    if paged:
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx: a paged cache (block_table given) takes its rows from block_table; "
                             "cache_batch_idx selects rows of a contiguous cache only")
        if not isinstance(block_table, torch.Tensor):
            raise TypeError(f"block_table must be an int32 tensor of shape (batch, max_num_blocks_per_seq), got "
                            f"{type(block_table).__name__}")
        if block_table.dim() != 2:
            raise ValueError(f"block_table must be an int32 tensor of shape (batch, max_num_blocks_per_seq), got "
                             f"shape {tuple(block_table.shape)}")
        block_table = _check_int32("block_table", block_table, (batch, block_table.shape[1]), q.device,
                                   "(batch, max_num_blocks_per_seq)")
        if block_table.shape[1] < 1:
            raise ValueError("block_table must have at least one block per sequence, got shape "
                             f"{tuple(block_table.shape)}")
        # Rows of max_num_blocks_per_seq entries one row stride apart (the C ABI reads a row stride of 0 as packed,
        # so a broadcast table is copied, not followed).
        if block_table.stride()[1] != 1 or block_table.stride()[0] < block_table.shape[1]:
            block_table = block_table.contiguous()
        num_pages, page_size = k_cache.shape[0], k_cache.shape[1]
        if page_size not in SUPPORTED_PAGE_SIZES:
            raise ValueError(f"k_cache: page size (dimension 1 of a paged cache) is {page_size}; accepted: "
                             f"{', '.join(map(str, SUPPORTED_PAGE_SIZES))}")
        if num_pages < 1:
            raise ValueError("k_cache: a paged cache has at least one page (num_blocks >= 1)")
        capacity = block_table.shape[1] * page_size
    else:
        cache_rows, capacity = k_cache.shape[0], k_cache.shape[1]
        if capacity < 1:
            raise ValueError(f"k_cache: seqlen_cache is {capacity}; a cache holds at least one key")
        if cache_batch_idx is not None:
            cache_batch_idx = _check_int32("cache_batch_idx", cache_batch_idx, (batch,), q.device, "(batch,)")
            cache_batch_idx = cache_batch_idx.contiguous()
        elif cache_rows < batch:
            raise ValueError(f"k_cache has {cache_rows} rows (batch_size_cache) but q's batch is {batch}; without "
                             "cache_batch_idx batch entry b reads cache row b")

    # New keys and values.
    if (k is None) != (v is None):
        raise ValueError("k and v: pass both (new keys and values appended to the cache) or neither")
    seqlen_new = 0
    if k is not None:
        for name, t in (("k", k), ("v", v)):
            if isinstance(t, torch.Tensor):
                fp8.refuse_e4m3_query(name, t)
        k = _interface._check_tensor("k", k, 4, "(batch, seqlen_new, nheads_k, headdim)")
        v = _interface._check_tensor("v", v, 4, "(batch, seqlen_new, nheads_k, headdim_v)")
        for name, t in (("k", k), ("v", v)):
            if t.dtype != q.dtype:
                raise ValueError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
            if t.device != q.device:
                raise ValueError(f"{name} must be on {q.device} (with q), got {t.device}")
        seqlen_new = k.shape[1]
        if tuple(k.shape) != (batch, seqlen_new, heads_kv, d) or tuple(v.shape) != (batch, seqlen_new, heads_kv, dv):
            raise ValueError(f"k must be (batch, seqlen_new, nheads_k, headdim) = ({batch}, seqlen_new, {heads_kv}, "
                             f"{d}) and v ({batch}, seqlen_new, {heads_kv}, {dv}); got k {tuple(k.shape)}, v "
                             f"{tuple(v.shape)}")
        if seqlen_new < 1 or seqlen_new > capacity:
            raise ValueError(f"k: seqlen_new is {seqlen_new}; accepted: 1 to the cache's {capacity} keys a sequence")
        if cache_seqlens is None:
            raise ValueError("cache_seqlens: required with k and v (the new keys are written at cache_seqlens[b])")
        if seqlen_q < 1:
            raise ValueError("q: seqlen_q is 0 but k and v are appended; a call that appends attends at least one "
                             "query row")

    # cache_seqlens: None (every sequence holds `capacity` keys), an int, or an int32 (batch,) tensor.
    held = -1  # the one length of every sequence when cache_seqlens is an int (its values are then checked on the host)
    if cache_seqlens is not None and not isinstance(cache_seqlens, torch.Tensor):
        if isinstance(cache_seqlens, bool) or not hasattr(cache_seqlens, "__index__"):
            raise TypeError(f"cache_seqlens must be an int or an int32 tensor of shape ({batch},), got "
                            f"{type(cache_seqlens).__name__}")
        held = operator.index(cache_seqlens)
        if held < 0 or held > capacity - seqlen_new:
            raise ValueError(f"cache_seqlens is {held}; accepted: 0 to {capacity - seqlen_new} (the cache holds "
                             f"{capacity} keys a sequence, {seqlen_new} of them appended by this call)")
        cache_seqlens = torch.full((batch,), held, dtype=torch.int32, device=q.device)
    elif cache_seqlens is not None:
        cache_seqlens = _check_int32("cache_seqlens", cache_seqlens, (batch,), q.device, "(batch,)").contiguous()

    # Rotary embedding of q and k.
    rotary_dim = seqlen_ro = 0
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError("rotary_cos and rotary_sin: pass both or neither")
    if rotary_cos is not None:
        if k is None:
            raise ValueError("rotary_cos/rotary_sin: rotary embedding rotates q and the appended k; pass k and v too")
        for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                raise ValueError(f"{name} must be a tensor of shape (seqlen_ro, rotary_dim / 2)")
            if t.dtype != q.dtype:
                raise ValueError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
            if t.device != q.device:
                raise ValueError(f"{name} must be on {q.device} (with q), got {t.device}")
        if tuple(rotary_sin.shape) != tuple(rotary_cos.shape):
            raise ValueError(f"rotary_sin must have rotary_cos's shape {tuple(rotary_cos.shape)}, got "
                             f"{tuple(rotary_sin.shape)}")
        seqlen_ro, rotary_dim = rotary_cos.shape[0], 2 * rotary_cos.shape[1]
        if rotary_dim < 2 or rotary_dim > d:
            raise ValueError(f"rotary_cos: rotary_dim (2 x dimension 1) is {rotary_dim}; accepted: 2 to headdim = {d}")
        if seqlen_ro < 1:
            raise ValueError("rotary_cos: seqlen_ro is 0; the tables have at least one row")
        if held >= 0:
            needed = held + max(seqlen_new, seqlen_q)
            if seqlen_ro < needed:
                raise ValueError(f"rotary_cos: seqlen_ro is {seqlen_ro} but rows are rotated at positions up to "
                                 f"cache_seqlens + max(seqlen_new, seqlen_q) - 1 = {needed - 1}")
        elif seqlen_ro < capacity:
            raise ValueError(f"rotary_cos: seqlen_ro is {seqlen_ro}; accepted: at least the cache's {capacity} keys a "
                             "sequence (as flash-attn asks)")
        rotary_cos, rotary_sin = rotary_cos.contiguous(), rotary_sin.contiguous()
        if not isinstance(rotary_interleaved, (bool, int)) or int(rotary_interleaved) not in (0, 1):
            raise ValueError(f"rotary_interleaved must be True or False, got {rotary_interleaved!r}")

    k_descale, v_descale = fp8.check_cache_descales(q, cache_e4m3, batch, heads_kv, q_descale, k_descale, v_descale)
    if isinstance(num_splits, bool) or not hasattr(num_splits, "__index__") or not (
            0 <= operator.index(num_splits) <= MAX_SPLITS):
        raise ValueError(f"num_splits must be 0 (flashtile's heuristic) or 1 to {MAX_SPLITS}, got {num_splits!r}")
    window = _interface._check_flags(window_size, softcap, alibi_slopes, batch, heads_q, q.device)
    # A single query row sees every key of its sequence under bottom-right causal, so the unmasked kernel computes
    # the same; flash-attn drops the flag there too, except with ALiBi (kept here likewise).
    use_causal = bool(causal) and not (seqlen_q == 1 and alibi_slopes is None)
    resolved, values = _interface._flash_attn_variant(use_causal, window, float(softcap), alibi_slopes, capacity)
    params = [float(values[n]) for n in resolved.param_names]
    inputs = [] if alibi_slopes is None else [alibi_slopes.contiguous()]

    if len(params) > _lib.MAX_PARAMS or len(inputs) > _lib.MAX_INPUTS:
        raise ValueError(f"a variant takes at most {_lib.MAX_PARAMS} numbers and {_lib.MAX_INPUTS} input arrays; "
                         f"got {len(params)} and {len(inputs)}")
    q = _interface._kernel_ready(q)
    if k is not None:
        k, v = _interface._kernel_ready(k), _interface._kernel_ready(v)
    scale = float(softmax_scale) if softmax_scale is not None else d ** -0.5
    return (q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, held,
            cache_batch_idx, block_table, scale, resolved.id, params, inputs, bool(rotary_interleaved),
            operator.index(num_splits), schedule_name.decode() if schedule_name else None, bool(strict_flag),
            k_descale, v_descale)


def _launch(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value: int,
            cache_batch_idx, block_table, softmax_scale: float, variant: str, params, inputs, rotary_interleaved: bool,
            num_splits: int, schedule: Optional[str] = None, strict: bool = False, k_descale=None, v_descale=None,
            explain_arch: Optional[str] = None):
    """Allocates O and LSE and launches on the current stream of q's device; the arguments are checked already.
    cache_seqlens_value: the one length every sequence holds when the caller gave an int (checked by the runtime on
    the host too), else -1. explain_arch not None: nothing runs; flashtile_explain_kvcache's answer as a dict ("" for
    q's GPU)."""
    batch, seqlen_q, heads_q, d = q.shape
    dv = v_cache.shape[3]
    out = torch.empty((batch, seqlen_q, heads_q, dv), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    if explain_arch is None and (batch == 0 or heads_q == 0 or (seqlen_q == 0 and k is None)):
        return out, lse
    _check_cache_address("k_cache", k_cache)
    _check_cache_address("v_cache", v_cache)
    q = _interface._aligned(q)
    if k is not None:
        k, v = _interface._aligned(k), _interface._aligned(v)

    call = _lib.KvCacheCall()
    call.size = _KVCACHE_CALL_SIZE
    variant_id = variant.encode()  # held until the call returns: the struct points into it
    call.variant = variant_id
    call.schedule = _interface._schedule_option(schedule, strict)[0]  # held for the process
    call.strict_schedule = int(strict)
    call.dtype = _interface._DTYPE_CODES[q.dtype]
    # Sizes past a C int are errors here: ctypes would keep their low 32 bits.
    _lib.set_ints(call, batch=batch, seqlen_q=seqlen_q, heads_q=heads_q, heads_kv=k_cache.shape[2], head_dim=d,
                  head_dim_v=dv)
    call.q, call.o, call.lse = q.data_ptr(), out.data_ptr(), lse.data_ptr()
    call.q_stride[:], call.o_stride[:] = q.stride(), out.stride()
    call.k_cache, call.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
    call.k_cache_stride[:], call.v_cache_stride[:] = k_cache.stride(), v_cache.stride()
    if block_table is not None:
        call.block_table = block_table.data_ptr()
        call.block_table_stride = block_table.stride()[0]
        _lib.set_ints(call, num_pages=k_cache.shape[0], page_size=k_cache.shape[1],
                      max_pages_per_seq=block_table.shape[1])
    else:
        _lib.set_ints(call, cache_batch=k_cache.shape[0], cache_seqlen=k_cache.shape[1])
        if cache_batch_idx is not None:
            call.cache_batch_idx = cache_batch_idx.data_ptr()
    if cache_seqlens is not None:
        call.cache_seqlens = cache_seqlens.data_ptr()
    seqlens_host = None
    if cache_seqlens_value >= 0:
        seqlens_host = (ctypes.c_int * batch)(*([_lib.c_int("cache_seqlens", cache_seqlens_value)] * batch))
        call.cache_seqlens_host = ctypes.addressof(seqlens_host)
    if k is not None:
        call.k_new, call.v_new = k.data_ptr(), v.data_ptr()
        _lib.set_ints(call, seqlen_new=k.shape[1])
        call.k_new_stride[:], call.v_new_stride[:] = k.stride(), v.stride()
    if rotary_cos is not None:
        call.rotary_cos, call.rotary_sin = rotary_cos.data_ptr(), rotary_sin.data_ptr()
        _lib.set_ints(call, rotary_dim=2 * rotary_cos.shape[1], seqlen_ro=rotary_cos.shape[0])
        call.rotary_interleaved = 1 if rotary_interleaved else 0
    if fp8.is_e4m3(k_cache):
        call.cache_dtype = _E4M3_CACHE_CODE
        call.k_descale = None if k_descale is None else k_descale.data_ptr()
        call.v_descale = None if v_descale is None else v_descale.data_ptr()
    call.num_splits = num_splits
    call.softmax_scale = softmax_scale
    call.num_params, call.num_inputs = len(params), len(inputs)
    call.params[:len(params)] = params
    for i, t in enumerate(inputs):
        call.inputs[i] = t.data_ptr()

    lib = _lib.library()
    runtime = lib.runtime()
    if explain_arch is not None:
        return _explain(lib, runtime, call, q, explain_arch)
    index = q.get_device()
    call.stream = _interface._current_stream(index)
    # The runtime launches on the calling thread's current device: make it q's.
    if index != _interface._current_device():
        with torch.cuda.device(index):
            rc = lib.lib.flashtile_forward_kvcache(runtime, ctypes.addressof(call))
    else:
        rc = lib.lib.flashtile_forward_kvcache(runtime, ctypes.addressof(call))
    if rc != 0:
        raise lib.error("flashtile flash_attn_with_kvcache")
    return out, lse


_EXPLAIN_BYTES = 4096  # more than an explanation takes (the C ABI says so if not)


def _explain(lib, runtime, call, q, arch: str):
    """flashtile_explain_kvcache's answer for a filled call, as flashtile.explain's dict ("" arch: q's GPU)."""
    text = ctypes.create_string_buffer(_EXPLAIN_BYTES)
    target = _lib.c_string("arch", arch) if arch else None
    args = (runtime, ctypes.addressof(call), target, text, _EXPLAIN_BYTES)
    if arch:
        rc = lib.lib.flashtile_explain_kvcache(*args)
    else:
        with torch.cuda.device(q.get_device()):
            rc = lib.lib.flashtile_explain_kvcache(*args)
    if rc != 0:
        raise lib.error("flashtile explain_kvcache")
    fields = dict(line.split("=", 1) for line in text.value.decode().splitlines())
    return {"schedule": fields["schedule"], "entry": fields["entry"], "source": fields["source"],
            "order": fields["order"].split(",") if fields["order"] else [], "forced_by": fields["forced_by"] or None,
            "fell_back": fields["fell_back"] == "1", "reason": fields["reason"]}


@torch.library.custom_op("flashtile::fwd_kvcache", mutates_args=("k_cache", "v_cache"), device_types="cuda")
def _fwd_kvcache_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: Optional[torch.Tensor],
                    v: Optional[torch.Tensor], rotary_cos: Optional[torch.Tensor], rotary_sin: Optional[torch.Tensor],
                    cache_seqlens: Optional[torch.Tensor], cache_seqlens_value: int,
                    cache_batch_idx: Optional[torch.Tensor], block_table: Optional[torch.Tensor],
                    softmax_scale: float, variant: str, params: List[float], inputs: List[torch.Tensor],
                    rotary_interleaved: bool, num_splits: int, schedule: Optional[str] = None,
                    strict: bool = False, k_descale: Optional[torch.Tensor] = None,
                    v_descale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention over a KV cache: (O, LSE); k/v, when given, are written into k_cache/v_cache. Arguments are
    checked by flash_attn_with_kvcache."""
    return _launch(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value,
                   cache_batch_idx, block_table, softmax_scale, variant, params, inputs, rotary_interleaved, num_splits,
                   schedule, strict, k_descale, v_descale)


@_fwd_kvcache_op.register_fake
def _fwd_kvcache_fake(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value,
                      cache_batch_idx, block_table, softmax_scale, variant, params, inputs, rotary_interleaved,
                      num_splits, schedule=None, strict=False, k_descale=None, v_descale=None):
    batch, seqlen_q, heads_q, _ = q.shape
    out = q.new_empty((batch, seqlen_q, heads_q, v_cache.shape[3]))
    lse = q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32)
    return out, lse
