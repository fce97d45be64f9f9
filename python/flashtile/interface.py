"""Attention on torch tensors: flash-attn 2.x's calls, flashtile's variants, and the torch.library custom op.

About 1060 lines, over the project's 1000: the public calls, their argument checks, the custom ops and the warm
path's prepared calls share the private helpers here; the prepared calls (_Prepared to _launch_prepared) are the
part to move out next."""

import ctypes
import math
import operator
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from . import _extension, _lib, _positions, fp8
from . import variants as _variants
from .variant import Variant, both

SUPPORTED_HEAD_DIMS = (32, 64, 96, 128, 192, 256)
SUPPORTED_HEAD_DIM_PAIRS = ((192, 128),)
_SUPPORTED_HEAD_DIM_SET = frozenset(SUPPORTED_HEAD_DIMS)
_DTYPE_CODES = {torch.float16: 0, torch.bfloat16: 1}
if fp8.E4M3 is not None:
    _DTYPE_CODES[fp8.E4M3] = 2  # FLASHTILE_E4M3: forward only, O in bf16 (flashtile.fp8)
_INPUT_DTYPES = {"f32": torch.float32, "i32": torch.int32}
_BUILTINS = set(_variants.names())

VariantLike = Union[str, Variant]


# Variants -------------------------------------------------------------------------------------------------------

class _Resolved:
    """A variant as calls pass it to the library: its id, and its declaration for checking numbers and inputs."""

    __slots__ = ("id", "id_bytes", "decl", "param_names")

    def __init__(self, id_: str, decl: Variant):
        self.id, self.id_bytes, self.decl = id_, id_.encode(), decl
        self.param_names = tuple(decl.param_names)


_builtin_cache: Dict[str, _Resolved] = {}


def resolve_variant(variant: VariantLike) -> _Resolved:
    """A built-in name, or a Variant (registered with the compiler on first use)."""
    if isinstance(variant, Variant):
        resolved = getattr(variant, "_resolved", None)
        if resolved is None or resolved.id != variant.id:
            resolved = _Resolved(variant.id, variant)
            variant._resolved = resolved
        return resolved
    if isinstance(variant, str):
        resolved = _builtin_cache.get(variant)
        if resolved is None:
            if variant not in _BUILTINS:
                raise ValueError(f"variant: unknown built-in {variant!r}; built in: {', '.join(sorted(_BUILTINS))}, "
                                 "or pass a flashtile.Variant")
            resolved = _builtin_cache[variant] = _Resolved(variant, _variants.by_name(variant))
        return resolved
    raise TypeError(f"variant: expected a built-in name or a flashtile.Variant, got {type(variant).__name__}")


_combined_cache: Dict[tuple, _Resolved] = {}


def _flash_attn_variant(causal: bool, window: Tuple[int, int], softcap: float, alibi: Optional[torch.Tensor],
                        seqlen_k: int) -> Tuple[_Resolved, Dict[str, float]]:
    """The variant and numbers for flash-attn's flags, normalized as flash-attn does: causal is the window
    (-1, 0); a side at least seqlen_k long is unbounded."""
    left, right = window
    if causal:
        right = 0
    if left >= seqlen_k:
        left = -1
    if right >= seqlen_k:
        right = -1
    is_causal = left < 0 and right == 0
    windowed = not is_causal and (left >= 0 or right >= 0)
    mask = "causal" if is_causal else ("window_causal" if windowed and right == 0 else "window" if windowed else None)
    alibi_kind = None if alibi is None else ("alibi_per_batch" if alibi.dim() == 2 else "alibi")
    key = (softcap > 0, alibi_kind, mask)
    resolved = _combined_cache.get(key)
    if resolved is None:
        # Parts in flash-attn's order: softcap on the scores, then the ALiBi bias, then the mask.
        parts = []
        if softcap > 0:
            parts.append(_variants.softcap())
        if alibi_kind:
            parts.append(_variants.alibi(alibi_kind == "alibi_per_batch"))
        if mask == "causal":
            parts.append(_variants.causal())
        elif mask == "window":
            parts.append(_variants.sliding_window())
        elif mask == "window_causal":
            # sliding_window_causal is both(window(left, -1), causal): the same keys as window (left, 0).
            parts.append(_variants.sliding_window_causal())
        if not parts:
            combined = _variants.full()
        else:
            combined = parts[0]
            for part in parts[1:]:
                combined = both(combined, part, f"{combined.name}_{part.name}")
        # Built-ins are composed the same way and keep their names (and their ahead-of-time kernels).
        resolved = resolve_variant(combined.name if combined.name in _BUILTINS else combined)
        _combined_cache[key] = resolved
    values = {"cap": softcap, "left": left, "right": -1 if mask == "window_causal" else right}
    return resolved, values


# Argument checks ----------------------------------------------------------------------------------------------

def _check_tensor(name: str, t, dims: int, layout: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimensions {layout}, got shape {tuple(t.shape)}")
    fp8.refuse_e5m2(name, t)
    if t.dtype not in _DTYPE_CODES:
        raise ValueError(f"{name} must be torch.float16, torch.bfloat16 or torch.float8_e4m3fn, got {t.dtype}")
    if not t.is_cuda:
        raise ValueError(f"{name} must be a CUDA tensor, got device {t.device}")
    return t


def _kernel_ready(t: torch.Tensor) -> torch.Tensor:
    """A layout kernels read: contiguous last dim, other strides multiples of 8 elements (16-byte loads). The
    address is checked in _launch (data_ptr() cannot be traced by torch.compile). e4m3: multiples of 16."""
    strides = t.stride()
    if strides[-1] != 1:
        return t.contiguous()
    multiple = 16 if fp8.is_e4m3(t) else 8
    for stride in strides[:-1]:
        if stride % multiple:
            return t.contiguous()
    return t


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """`t` at a 16-byte aligned address (a view at an odd offset is copied; PyTorch's allocations are aligned)."""
    return t.clone() if t.data_ptr() % 16 else t


def _head_dims(d: int, dv: int) -> Tuple[int, int]:
    """The head dims kernels run: (d, dv) when supported, else both padded to the next supported size."""
    if (d == dv and d in _SUPPORTED_HEAD_DIM_SET) or (d, dv) in SUPPORTED_HEAD_DIM_PAIRS:
        return d, dv
    if d != dv:
        raise ValueError(f"head dims: q/k have {d} and v {dv}; they must be equal, or 192/128")
    if d <= 0 or d > 256:
        raise ValueError(f"head dim: {d} is not supported; accepted: 1-256 (run as {SUPPORTED_HEAD_DIMS}, "
                         "smaller ones zero-padded)")
    padded = next(h for h in SUPPORTED_HEAD_DIMS if h >= d)
    return padded, padded


def _pad_last(t: torch.Tensor, size: int) -> torch.Tensor:
    return t if t.shape[-1] == size else torch.nn.functional.pad(t, (0, size - t.shape[-1]))


def _check_inputs(decl: Variant, inputs, device, counts: Dict[str, int],
                  dtypes: Dict[str, torch.dtype] = _INPUT_DTYPES) -> List[torch.Tensor]:
    """The call's input arrays in declaration order, checked: tensors on `device` of the declared kind's dtype
    (`dtypes`: kind -> dtype); for built-ins also the element count (`counts`)."""
    declared = decl.inputs
    if inputs is None:
        inputs = {}
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - set(declared))
        if unknown:
            raise ValueError(f"inputs: variant '{decl.name}' has no input(s) {', '.join(unknown)}; declared: "
                             f"{', '.join(declared) or 'none'}")
        missing = [n for n in declared if n not in inputs]
        if missing:
            raise ValueError(f"inputs: variant '{decl.name}' reads {', '.join(missing)}; pass them")
        ordered = [inputs[n] for n in declared]
    else:
        ordered = list(inputs)
        if len(ordered) != len(declared):
            raise ValueError(f"inputs: variant '{decl.name}' takes {len(declared)} array(s) "
                             f"({', '.join(declared) or 'none'}), got {len(ordered)}")
    out = []
    for (name, kind), t in zip(declared.items(), ordered):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"inputs['{name}'] must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtypes[kind]:
            raise ValueError(f"inputs['{name}'] must be {dtypes[kind]}, got {t.dtype}")
        if t.device != device:
            raise ValueError(f"inputs['{name}'] must be on {device} (with q), got {t.device}")
        if name in counts and t.numel() != counts[name]:
            raise ValueError(f"inputs['{name}'] has {t.numel()} elements; variant '{decl.name}' reads "
                             f"{counts[name]} here")
        out.append(t.contiguous())
    return out


def _builtin_input_counts(name: str, batch: int, heads_q: int, keys: int) -> Dict[str, int]:
    """What the built-in variants read (examples/variants/Variants.h); keys: B·Sk dense, total_k varlen."""
    base = name.split("#")[0]
    if base.startswith("alibi_per_batch"):
        return {"slopes": batch * heads_q}
    counts = {}
    if "alibi" in base:
        counts["slopes"] = heads_q
    if base.startswith("sinks"):
        counts["sinks"] = heads_q
    if base == "document_mask":
        counts["doc_start"] = keys
    return counts


def _call_input_counts(name: str, batch: int, heads_q: int, keys: int, varlen: bool, placed) -> Dict[str, int]:
    """_builtin_input_counts of a call; `placed`: a block's (heads_q_global, seqlen_k_global, cu_seqlens_k_global),
    whose hooks read the arrays at global heads and keys, so that they are the larger problem's (under varlen its
    total keys are on the device: the key-indexed arrays' sizes are not checked here)."""
    if placed is not None:
        heads_global, seqlen_k_global, cu_k_global = placed
        if isinstance(heads_global, int):
            heads_q = heads_global
        if varlen and cu_k_global is not None:
            keys = None
        elif not varlen and isinstance(seqlen_k_global, int):
            keys = batch * seqlen_k_global
    return {n: count for n, count in _builtin_input_counts(name, batch, heads_q, keys).items() if count is not None}


# Schedules ------------------------------------------------------------------------------------------------------

_ID_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:#-")
# The bytes of each schedule name a call named, held for the process: call structs (and their templates) point
# into them.
_schedule_names: Dict[str, bytes] = {}


def _schedule_option(schedule, strict) -> Tuple[Optional[bytes], int]:
    """A call's schedule= and strict=, checked: the schedule's name as the C ABI takes it (None: the runtime's
    choice) and the strict flag as 0 or 1."""
    if type(strict) not in (bool, int) or strict not in (0, 1):
        raise TypeError(f"strict must be True or False, got {strict!r}")
    if schedule is None:
        return None, int(strict)
    if not isinstance(schedule, str):
        raise TypeError(f"schedule must be a schedule name such as 'fa3', or None (the fastest schedule with a kernel "
                        f"for the call), got {type(schedule).__name__}")
    name = _schedule_names.get(schedule)
    if name is None:
        if not schedule or len(schedule) > 200 or not set(schedule) <= _ID_CHARACTERS:
            raise ValueError(f"schedule: {schedule!r} is not a schedule name (letters, digits and _.:#-, such as "
                             "'fa2' or 'fa3'), or None (the fastest schedule with a kernel for the call)")
        name = _schedule_names.setdefault(schedule, schedule.encode())
    return name, int(strict)


# The launch -----------------------------------------------------------------------------------------------------

_library = None
_runtime = None


def _first_library():
    global _library, _forward_call
    _library = _lib.library()
    _forward_call = _library.lib.flashtile_forward_call
    return _library


def _first_runtime():
    global _runtime
    _runtime = (_library or _first_library()).runtime()
    _extension.start(_activate_fast_path)
    return _runtime


# The C++ call path (_fastpath.cpp, flashtile/_extension.py) once loaded: flash_attn_func's and attention()'s warm
# calls go through it; None while calls take the ctypes path.
_fast = None


def _activate_fast_path(module, path: str) -> None:
    """Makes `module` the warm calls' path. The Python path's filed call shapes are dropped: each is filed again,
    in both, by its next (checked) call."""
    global _fast
    forward_call = ctypes.cast(_library.lib.flashtile_forward_call, ctypes.c_void_p).value
    module.init(forward_call, _runtime, _lib.POINTERS_OFFSET, _CALL_SIZE, _current_stream,
                lambda: _library.error("flashtile forward"))
    _prepared.clear()
    _fast = module


# The raw handle of a device's current stream: PyTorch's own accessor (what Triton's launcher uses) where present,
# as it costs a fraction of building a torch.cuda.Stream object on every call.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(index: int) -> int:
    return torch.cuda.current_stream(index).cuda_stream


if _raw_stream is not None:
    _current_stream = _raw_stream  # noqa: F811  (one call less on every launch)


# The current device's index: torch.cuda.current_device() without its lazy-initialization check (a CUDA tensor in
# hand means CUDA is initialized).
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _call_fields(q, k, v, out, cu_seqlens_q, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                 variant_id: bytes, params: Sequence[float], num_inputs: int, schedule: Optional[bytes] = None,
                 strict: int = 0) -> "_lib.Call":
    """The flashtile_call of a launch without its pointers and stream (what one call shape shares)."""
    call = _lib.Call()
    call.size = _CALL_SIZE
    call.variant = variant_id
    call.schedule = schedule
    call.strict_schedule = strict
    call.dtype = _DTYPE_CODES[q.dtype]
    # Sizes past a C int are errors here: ctypes would keep their low 32 bits.
    _lib.set_ints(call, head_dim=q.shape[-1], head_dim_v=v.shape[-1])
    if cu_seqlens_q is not None:
        _lib.set_ints(call, batch=cu_seqlens_q.shape[0] - 1, seqlen_q=q.shape[0], seqlen_k=k.shape[0],
                      max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, heads_q=q.shape[1], heads_kv=k.shape[1])
        call.q_stride[1:], call.k_stride[1:] = q.stride(), k.stride()
        call.v_stride[1:], call.o_stride[1:] = v.stride(), out.stride()
    else:
        _lib.set_ints(call, batch=q.shape[0], seqlen_q=q.shape[1], heads_q=q.shape[2], seqlen_k=k.shape[1],
                      heads_kv=k.shape[2])
        call.q_stride[:], call.k_stride[:] = q.stride(), k.stride()
        call.v_stride[:], call.o_stride[:] = v.stride(), out.stride()
    call.softmax_scale = softmax_scale
    if len(params) > _lib.MAX_PARAMS or num_inputs > _lib.MAX_INPUTS:
        raise ValueError(f"a variant takes at most {_lib.MAX_PARAMS} numbers and {_lib.MAX_INPUTS} input arrays; "
                         f"got {len(params)} and {num_inputs}")
    call.num_params, call.num_inputs = len(params), num_inputs
    call.params[:len(params)] = params
    return call


# The calls' fields without pointers, by everything they are made of (a template is a pure function of its key),
# with the variant bytes the template's variant pointer points into. Bounded like _prepared.
_templates: Dict[tuple, Tuple[bytes, bytes]] = {}


def _call_for(q, k, v, out, cu_seqlens_q, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
              variant_id: bytes, params: Sequence[float], num_inputs: int, schedule: Optional[bytes] = None,
              strict: int = 0):
    """_call_fields' struct, copied from a template when this call shape was seen before; and the variant bytes the
    struct points into, for the caller to hold while the call runs (the schedule's are held for the process)."""
    key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype,
           None if cu_seqlens_q is None else cu_seqlens_q.shape[0], max_seqlen_q, max_seqlen_k, softmax_scale,
           variant_id, tuple(params), num_inputs, schedule, strict)
    cached = _templates.get(key)
    if cached is not None:
        return _call_from(cached[0]), cached[1]
    call = _call_fields(q, k, v, out, cu_seqlens_q, max_seqlen_q, max_seqlen_k, softmax_scale, variant_id, params,
                        num_inputs, schedule, strict)
    if len(_templates) >= _PREPARED_LIMIT:
        _templates.clear()
    _templates[key] = (bytes(call), variant_id)
    return call, variant_id


def _outputs(q, v, varlen: bool):
    """O and LSE of a call, from PyTorch's allocator."""
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=fp8.output_dtype(q.dtype), device=q.device)
    if varlen:
        lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    else:
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    return out, lse


def _on_device(index: int, entry, *args) -> int:
    """entry(*args) with device `index` current on this thread (the runtime launches on the calling thread's current
    device): a context switch only when it is not current already."""
    if index != _current_device():
        with torch.cuda.device(index):
            return entry(*args)
    return entry(*args)


def _filled_call(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                 softmax_scale: float, variant_id: bytes, params: Sequence[float], inputs: Sequence[torch.Tensor],
                 schedule: Optional[bytes], strict: int, descales=None, positions=None):
    """The flashtile_call of a launch, pointers and stream included (`descales`: an e4m3 call's q, k, v descales,
    each None or a checked tensor; `positions`: a block's _lib.Positions, or None); the variant bytes it points into
    (hold them while it is used); whether q, k and v were aligned as given (else copies are launched); q's device
    index."""
    q_ptr, k_ptr, v_ptr = q.data_ptr(), k.data_ptr(), v.data_ptr()
    aligned = not (q_ptr | k_ptr | v_ptr) % 16
    if not aligned:
        q, k, v = _aligned(q), _aligned(k), _aligned(v)
        q_ptr, k_ptr, v_ptr = q.data_ptr(), k.data_ptr(), v.data_ptr()
    # No keys (seqlen_k or total_k 0): k and v may be null (PyTorch's empty tensors); the kernels read no key.
    call, variant_id = _call_for(q, k, v, out, cu_seqlens_q, max_seqlen_q, max_seqlen_k, softmax_scale, variant_id,
                                 params, len(inputs), schedule, strict)
    if inputs:
        _lib.INPUTS[len(inputs)].pack_into(call, _lib.INPUTS_OFFSET, *[t.data_ptr() for t in inputs])
    index = q.get_device()
    stream = _current_stream(index)
    varlen = cu_seqlens_q is not None
    cu_q, cu_k = (cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()) if varlen else (0, 0)
    _lib.POINTERS.pack_into(call, _lib.POINTERS_OFFSET, q_ptr, k_ptr, v_ptr, out.data_ptr(), lse.data_ptr(), cu_q,
                            cu_k, stream)
    if descales is not None:
        call.q_descale, call.k_descale, call.v_descale = (None if d is None else d.data_ptr() for d in descales)
    if positions is not None:
        call.positions = ctypes.addressof(positions)
    return call, variant_id, aligned, index


def _launch(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
            variant_id: bytes, params: Sequence[float], inputs: Sequence[torch.Tensor], remember=None,
            schedule: Optional[bytes] = None, strict: int = 0, descales=None, positions=_positions.PLAIN):
    """Allocates O and LSE and launches on the current stream of q's device. Inputs (and an e4m3 call's
    `descales`) are checked already; `positions`: the ops' five position arguments (_positions.check).
    `remember(call bytes, variant id bytes, out, lse, device index)`: files this call shape for a warm path (the
    caller's tensors were launched as given: aligned, no inputs, dense)."""
    lib = _library or _first_library()
    runtime = _runtime or _first_runtime()
    varlen = cu_seqlens_q is not None
    out, lse = _outputs(q, v, varlen)
    if q.numel() == 0 or out.numel() == 0:
        return out, lse
    block, held = _positions.struct(*positions)
    call, variant_id, aligned, index = _filled_call(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                    max_seqlen_k, softmax_scale, variant_id, params, inputs, schedule,
                                                    strict, descales, block)
    # an e4m3 call's transposed V, fa1's K/V-step state
    workspace = _capture_workspace(lib, runtime, call, index, q.device, "forward")
    rc = _on_device(index, lib.lib.flashtile_forward_call, runtime, ctypes.addressof(call))
    del held  # the position arrays were read by the launch (their memory is the stream's, as every input's)
    if rc != 0:
        raise lib.error("flashtile forward")
    if (remember is not None and workspace is None and aligned and not inputs and not varlen and descales is None
            and block is None):
        call.q = call.k = call.v = call.o = call.lse = call.stream = None
        remember(bytes(call), variant_id, out, lse, index)
    return out, lse


_EXPLAIN_BYTES = 4096  # more than an explanation takes (the C ABI says so if not)


def _explain_launch(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                    softmax_scale: float, variant_id: bytes, params: Sequence[float], inputs: Sequence[torch.Tensor],
                    schedule: Optional[bytes], strict: int, arch: Optional[str]) -> Dict[str, object]:
    """What _launch would run, from flashtile_explain: the kernel is found (or compiled) but not launched."""
    lib = _library or _first_library()
    runtime = _runtime or _first_runtime()
    out, lse = _outputs(q, v, cu_seqlens_q is not None)
    call, variant_id, _, index = _filled_call(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                              max_seqlen_k, softmax_scale, variant_id, params, inputs, schedule,
                                              strict)
    text = ctypes.create_string_buffer(_EXPLAIN_BYTES)
    target = None if arch is None else _lib.c_string("arch", arch)
    explain_args = (runtime, ctypes.addressof(call), target, text, _EXPLAIN_BYTES)
    rc = (_on_device(index, lib.lib.flashtile_explain, *explain_args) if arch is None
          else lib.lib.flashtile_explain(*explain_args))
    if rc != 0:
        raise lib.error("flashtile explain")
    fields = dict(line.split("=", 1) for line in text.value.decode().splitlines())
    return {"schedule": fields["schedule"], "entry": fields["entry"], "source": fields["source"],
            "order": fields["order"].split(",") if fields["order"] else [], "forced_by": fields["forced_by"] or None,
            "fell_back": fields["fell_back"] == "1", "reason": fields["reason"]}


# flash_attn_func's warm path -------------------------------------------------------------------------------------

class _Prepared:
    """A call shape flash_attn_func checked and launched once: everything it derived from the tensors' shapes,
    strides, dtypes and device and from the flags, as the fields of a flashtile_call without pointers."""

    __slots__ = ("template", "variant_id", "out_shape", "lse_shape", "device_index")

    def __init__(self, template: bytes, variant_id: bytes, out_shape, lse_shape, device_index: int):
        self.template, self.out_shape, self.lse_shape, self.device_index = template, out_shape, lse_shape, device_index
        self.variant_id = variant_id  # the bytes the template's variant pointer points into


# Keyed by _dense_key(...). Bounded: a program that cycles through more shapes than this starts afresh.
_prepared: Dict[tuple, _Prepared] = {}
_PREPARED_LIMIT = 1024


def _dense_key(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict) -> tuple:
    # Everything flash_attn_func's checks and its choice of variant, numbers, layouts and schedule read. Values that
    # compare equal (True and 1, (3, 0) as ints or NumPy ints) mean the same to those checks, so they may share an
    # entry.
    return (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
            k.device, v.device, dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict)


def _plain_flags(dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict) -> bool:
    """Whether a key of these flags may be filed: built-in Python numbers and strings only (a tensor flag hashes by
    identity)."""
    numbers = (int, float)
    return (type(causal) is bool and type(dropout_p) in numbers and type(softcap) in numbers
            and (softmax_scale is None or type(softmax_scale) in numbers) and type(window_size) is tuple
            and len(window_size) == 2 and type(window_size[0]) is int and type(window_size[1]) is int
            and (schedule is None or type(schedule) is str) and type(strict) is bool)


def _file_prepared(key, call: bytes, variant_id: bytes, out, lse, index: int) -> None:
    if len(_prepared) >= _PREPARED_LIMIT:
        _prepared.clear()
    _prepared[key] = _Prepared(call, variant_id, tuple(out.shape), tuple(lse.shape), index)


def _attention_key(q, k, v, variant, params, softmax_scale, schedule, strict) -> Optional[tuple]:
    """The Python warm path's key of a dense attention() call without inputs (as _dense_key's), or None where the
    call has none: a variant is a built-in's name, or a registered Variant by identity and id (a changed Variant
    drops its id); params are None or a dict of int and float values, kept with their types."""
    if type(variant) is str:
        which = variant
    elif isinstance(variant, Variant) and variant._id is not None:
        which = (variant, variant._id)
    else:
        return None
    if params is None:
        numbers = None
    elif type(params) is dict and all(type(n) is str and type(x) in (int, float) for n, x in params.items()):
        numbers = tuple(sorted((n, type(x), x) for n, x in params.items()))
    else:
        return None
    if not _plain_flags(0.0, softmax_scale, False, (-1, -1), 0.0, schedule, strict):
        return None
    return ("attention", q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
            q.device, k.device, v.device, which, numbers, softmax_scale, schedule, strict)


def _dense_filer(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict):
    """_launch's `remember` for a flash_attn_func call: files the call shape for the Python warm path and, when it
    is active, the C++ one."""
    key = _dense_key(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict)

    def remember(call: bytes, variant_id: bytes, out, lse, index: int) -> None:
        _file_prepared(key, call, variant_id, out, lse, index)
        if _fast is not None:
            _fast.file_dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict, call,
                             variant_id, out, lse, index)

    return remember


def _launch_prepared(prepared: _Prepared, q, k, v):
    """The launch of a call shape checked before: new pointers and stream only. None when the call needs the
    checked path after all (an unaligned view, another current device)."""
    q_ptr, k_ptr, v_ptr = q.data_ptr(), k.data_ptr(), v.data_ptr()
    index = prepared.device_index
    if (q_ptr | k_ptr | v_ptr) % 16 or index != _current_device():
        return None
    out = q.new_empty(prepared.out_shape)
    lse = q.new_empty(prepared.lse_shape, dtype=torch.float32)
    call = _call_from(prepared.template)
    _pack_pointers(call, _POINTERS_OFFSET, q_ptr, k_ptr, v_ptr, out.data_ptr(), lse.data_ptr(), 0, 0,
                   _current_stream(index))
    if _forward_call(_runtime, _addressof(call)) != 0:
        raise _library.error("flashtile forward")
    return out, lse


_CALL_SIZE = ctypes.sizeof(_lib.Call)
_call_from = _lib.Call.from_buffer_copy
_pack_pointers = _lib.POINTERS.pack_into
_POINTERS_OFFSET = _lib.POINTERS_OFFSET
_addressof = ctypes.addressof
_forward_call = None  # bound with the library on first use (_first_library)
_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_is_compiling = torch.compiler.is_compiling
# Active torch dispatch modes (0: none); the stand-in torch of the host tests has no dispatcher.
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)


@torch.library.custom_op("flashtile::fwd", mutates_args=(), device_types="cuda")
def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
            cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
            variant: str, params: List[float], inputs: List[torch.Tensor], schedule: Optional[str], strict: bool,
            deterministic: bool, positions: Optional[List[int]], q_offsets: Optional[torch.Tensor],
            k_offsets: Optional[torch.Tensor], cu_seqlens_q_global: Optional[torch.Tensor],
            cu_seqlens_k_global: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    # No defaults: torch's dispatcher drops trailing arguments equal to their defaults, and the backward's
    # gradients must match the arguments the call passed one for one.
    """Attention forward: (O, LSE). Dense: q (B, Sq, Hq, D), LSE (B, Hq, Sq); varlen: q (total_q, Hq, D),
    LSE (Hq, total_q). `variant` is a built-in name or a registered id; `schedule` a schedule's name or None (the
    runtime's choice); `deterministic` is the backward's (flash-attn's flag); arguments are checked by the
    callers. A block of a larger problem: `positions` is [q_offset, k_offset, seqlen_q_global, seqlen_k_global,
    head_offset, heads_q_global, heads_kv_global] and the four int32 device arrays its varlen offsets (None: a plain
    call; flashtile._positions.check makes them)."""
    return _launch(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, variant.encode(),
                   params, inputs, None, _schedule_option(schedule, strict)[0], int(strict),
                   positions=(positions, q_offsets, k_offsets, cu_seqlens_q_global, cu_seqlens_k_global))


@_fwd_op.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, variant, params,
              inputs, schedule, strict, deterministic, positions, q_offsets, k_offsets, cu_seqlens_q_global,
              cu_seqlens_k_global):
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    if cu_seqlens_q is not None:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


def _capture_workspace(lib, runtime, call, index: int, device, kind: str) -> Optional[torch.Tensor]:
    """Under CUDA graph capture the runtime cannot allocate its own scratch memory: the call's (`kind`: forward or
    backward; `call` its C struct, whose workspace fields this sets) comes from torch's allocator (the capture's
    pool), sized by the runtime (flashtile_<kind>_workspace_size), and lives as long as the graph needs it. None
    outside capture or where the call needs none."""
    if not torch.cuda.is_current_stream_capturing():
        return None
    needed = ctypes.c_ulonglong(0)
    if _on_device(index, getattr(lib.lib, f"flashtile_{kind}_workspace_size"), runtime, ctypes.addressof(call),
                  ctypes.byref(needed)) != 0:
        raise lib.error(f"flashtile {kind} workspace size")
    if not needed.value:
        return None
    workspace = torch.empty(needed.value, dtype=torch.uint8, device=device)
    call.workspace, call.workspace_bytes = workspace.data_ptr(), needed.value
    return workspace


def _backward_launch(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                     softmax_scale: float, variant: str, params: Sequence[float], inputs: Sequence[torch.Tensor],
                     wanted: Sequence[bool], schedule: Optional[str], strict: bool, deterministic: bool,
                     positions=_positions.PLAIN):
    """dQ, dK, dV and the wanted inputs' gradients (an empty tensor for the others) of the forward call that gave
    `out` and `lse`, on the current stream of q's device (flashtile_backward_call); `positions` places a block's
    gradients as its forward (_launch)."""
    lib = _library or _first_library()
    runtime = _runtime or _first_runtime()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    grads = [torch.zeros_like(t, dtype=torch.float32) if want else t.new_empty((0,), dtype=torch.float32)
             for t, want in zip(inputs, wanted)]
    if q.numel() == 0 or k.numel() == 0:
        # No query rows: no key is used (dK = dV = 0); no keys: O = 0 for every row (dQ = 0).
        return dq.zero_(), dk.zero_(), dv.zero_(), grads
    grad_out = _aligned(_kernel_ready(grad_out))
    schedule_bytes = _schedule_option(schedule, strict)[0]
    block, held = _positions.struct(*positions)
    forward, variant_id, _, index = _filled_call(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                 max_seqlen_k, softmax_scale, variant.encode(), params, inputs,
                                                 schedule_bytes, int(strict), None, block)
    call = _lib.BwdCall()
    call.size = ctypes.sizeof(_lib.BwdCall)
    call.forward = forward
    call.d_o, call.d_q, call.d_k, call.d_v = grad_out.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    for i, (grad, want) in enumerate(zip(grads, wanted)):
        call.input_grads[i] = grad.data_ptr() if want else None
    varlen = cu_seqlens_q is not None
    for field, t in (("d_o_stride", grad_out), ("d_q_stride", dq), ("d_k_stride", dk), ("d_v_stride", dv)):
        getattr(call, field)[1 if varlen else 0:] = t.stride()
    call.deterministic = int(bool(deterministic))
    workspace = _capture_workspace(lib, runtime, call, index, q.device, "backward")
    rc = _on_device(index, lib.lib.flashtile_backward_call, runtime, ctypes.addressof(call))
    if rc != 0:
        raise lib.error("flashtile backward")
    del variant_id, workspace, held  # held until the call is queued (the graph's pool keeps the workspace's memory)
    return dq, dk, dv, grads


@torch.library.custom_op("flashtile::bwd", mutates_args=(), device_types="cuda")
def _bwd_op(grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
            lse: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
            max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float, variant: str, params: List[float],
            inputs: List[torch.Tensor], wanted: List[bool], schedule: Optional[str] = None, strict: bool = False,
            deterministic: bool = False, positions: Optional[List[int]] = None,
            q_offsets: Optional[torch.Tensor] = None, k_offsets: Optional[torch.Tensor] = None,
            cu_seqlens_q_global: Optional[torch.Tensor] = None, cu_seqlens_k_global: Optional[torch.Tensor] = None
            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    """Attention backward: (dQ, dK, dV, input gradients) of the forward call that gave `out` and `lse`; an input's
    gradient is an empty tensor where `wanted` says no. A block's positions as the forward op's (out and lse are
    then the larger problem's for the block's rows, as flash-attn's backward takes them)."""
    return _backward_launch(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            softmax_scale, variant, params, inputs, wanted, schedule, strict, deterministic,
                            (positions, q_offsets, k_offsets, cu_seqlens_q_global, cu_seqlens_k_global))


@_bwd_op.register_fake
def _bwd_fake(grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
              variant, params, inputs, wanted, schedule=None, strict=False, deterministic=False, positions=None,
              q_offsets=None, k_offsets=None, cu_seqlens_q_global=None, cu_seqlens_k_global=None):
    grads = [torch.empty_like(t, dtype=torch.float32) if want else t.new_empty((0,), dtype=torch.float32)
             for t, want in zip(inputs, wanted)]
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), grads


def _save_forward(ctx, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, variant, params, arrays, schedule, strict,
                  deterministic, positions, position_arrays):
    """What a forward call saves for its backward (the custom op's autograd and the eager Function alike)."""
    # flash-attn's LSE is a result, not a differentiable output: its gradient is not propagated (as flash-attn).
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, *position_arrays, *arrays)
    ctx.call = (max_q, max_k, scale, variant, params, schedule, strict, deterministic, positions)
    # Gradients of the variant's fp32 arrays (ALiBi slopes, sinks, a bias) where autograd asks for them.
    ctx.wanted = [t.dtype == torch.float32 and t.requires_grad for t in arrays]


def _saved_backward(ctx, grad_out, launch):
    """dQ, dK, dV and the variant arrays' gradients (None where not wanted) of the call _save_forward saved, by
    `launch` (torch.ops.flashtile.bwd's arguments)."""
    q, k, v, out, lse, cu_q, cu_k, q_offsets, k_offsets, cu_q_global, cu_k_global, *arrays = ctx.saved_tensors
    max_q, max_k, scale, variant, params, schedule, strict, deterministic, positions = ctx.call
    dq, dk, dv, grads = launch(grad_out, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, variant, params,
                               list(arrays), list(ctx.wanted), schedule, strict, deterministic, positions, q_offsets,
                               k_offsets, cu_q_global, cu_k_global)
    return dq, dk, dv, [grad if want else None for grad, want in zip(grads, ctx.wanted)]


def _fwd_setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, scale, variant, params, arrays, schedule, strict, deterministic, positions,
     *position_arrays) = inputs
    _save_forward(ctx, q, k, v, *output, cu_q, cu_k, max_q, max_k, scale, variant, params, arrays, schedule, strict,
                  deterministic, positions, position_arrays)


def _fwd_backward(ctx, grad_out, grad_lse):
    dq, dk, dv, input_grads = _saved_backward(ctx, grad_out, torch.ops.flashtile.bwd)
    # One entry per input in the structure torch flattened the call's arguments to: a list of floats is one leaf,
    # an empty list an empty list. The variant's numbers get no gradient, nor the positions.
    params = ctx.call[4]
    return (dq, dk, dv, None, None, None, None, None, None, [] if not params else None, input_grads, None, None, None,
            None, None, None, None, None)


_fwd_op.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


def _backward_direct(grad_out, *args):
    """_backward_launch with torch.ops.flashtile.bwd's arguments (its last five: the positions)."""
    return _backward_launch(grad_out, *args[:17], tuple(args[17:]))


class _EagerAttention(torch.autograd.Function):
    """flashtile::fwd and its registered backward for eager calls: the same launches (_launch, then
    _backward_launch), the same saved tensors and gradients (_save_forward, _saved_backward), without torch.library's
    custom-op dispatch around each (its Python machinery — argument flattening, the autograd wrapper, the aliasing
    checks — took ~400 of the ~600 µs of host time a backward call cost: bench/NOTES.md v45). Under torch.compile the
    custom ops run (no graph break)."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, max_q, max_k, scale, variant, variant_bytes, params, schedule, strict,
                deterministic, positions, q_offsets, k_offsets, cu_q_global, cu_k_global, *arrays):
        position_arrays = (q_offsets, k_offsets, cu_q_global, cu_k_global)
        out, lse = _launch(q, k, v, cu_q, cu_k, max_q, max_k, scale, variant_bytes, params, list(arrays), None,
                           _schedule_option(schedule, strict)[0], int(strict), positions=(positions, *position_arrays))
        _save_forward(ctx, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, variant, params, arrays, schedule,
                      strict, deterministic, positions, position_arrays)
        # LSE's gradient is never read, so autograd need not make one of zeros (a fill kernel and its host time).
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        if grad_out is None:  # not materialized (set_materialize_grads(False)): out's gradient is zero
            grad_out = torch.zeros_like(ctx.saved_tensors[3])
        dq, dk, dv, input_grads = _saved_backward(ctx, grad_out, _backward_direct)
        return (dq, dk, dv) + (None,) * 16 + tuple(input_grads)


def _plain_eager(q, k, v, inputs) -> bool:
    """Plain tensors and no torch dispatch mode active (FakeTensorMode, FlopCounterMode, a user's mode): the eager
    autograd Function may launch directly. Otherwise the custom ops run, which the modes and tensor subclasses see."""
    return (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor and all(type(t) is _Tensor for t in inputs)
            and not _dispatch_modes())


def _launches_directly(q, k, v, inputs) -> bool:
    """Whether an entry point that makes its own autograd graph (flash_attn_compat's) may launch without the custom
    ops: not under torch.compile, plain tensors, no dispatch mode."""
    return not _is_compiling() and _plain_eager(q, k, v, inputs)


def _needs_grad(q, k, v, inputs) -> bool:
    return _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                or any(t.requires_grad for t in inputs))


def _run(q, k, v, cu_q, cu_k, max_q, max_k, scale, resolved: _Resolved, params, inputs, remember=None,
         schedule: Optional[bytes] = None, strict: int = 0, deterministic: bool = False, descales=None,
         positions=_positions.PLAIN):
    # The custom op under torch.compile (no graph break) and when autograd must see the call (its backward is
    # registered); the direct call otherwise, for the shortest eager path. e4m3 calls have their own op, whose
    # backward refuses (flashtile.fp8).
    if fp8.is_e4m3(q):
        if _is_compiling() or _needs_grad(q, k, v, inputs):
            return torch.ops.flashtile.fwd_fp8(q, k, v, cu_q, cu_k, max_q, max_k, scale, resolved.id, params, inputs,
                                               schedule.decode() if schedule else None, bool(strict),
                                               *(descales or (None, None, None)))
        return _launch(q, k, v, cu_q, cu_k, max_q, max_k, scale, resolved.id_bytes, params, inputs, None, schedule,
                       strict, descales)
    compiling = _is_compiling()
    needs_grad = not compiling and _needs_grad(q, k, v, inputs)
    if compiling or (needs_grad and not _plain_eager(q, k, v, inputs)):
        return torch.ops.flashtile.fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, resolved.id, params, inputs,
                                       schedule.decode() if schedule else None, bool(strict), bool(deterministic),
                                       *positions)
    if needs_grad:
        return _EagerAttention.apply(q, k, v, cu_q, cu_k, max_q, max_k, scale, resolved.id, resolved.id_bytes,
                                     list(params), schedule.decode() if schedule else None, bool(strict),
                                     bool(deterministic), *positions, *inputs)
    return _launch(q, k, v, cu_q, cu_k, max_q, max_k, scale, resolved.id_bytes, params, inputs, remember, schedule,
                   strict, positions=positions)


# Public calls ---------------------------------------------------------------------------------------------------

def _check_common(q, k, v, dropout_p, softmax_scale, return_attn_probs) -> None:
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"q, k, v must have one dtype (torch.float16, torch.bfloat16 or torch.float8_e4m3fn for "
                         f"all three), got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if dropout_p != 0.0:
        raise NotImplementedError(f"dropout_p={dropout_p}: flashtile has no dropout yet; pass dropout_p=0.0 "
                                  "(flash-attn's evaluation setting)")
    if softmax_scale is not None and (not math.isfinite(float(softmax_scale)) or float(softmax_scale) == 0.0):
        # 0 would reach the kernels as "the default scale" (the C ABI's convention), not as uniform attention.
        raise ValueError(f"softmax_scale must be finite and non-zero, or None (1/sqrt(headdim)), got {softmax_scale}")


def _scale(softmax_scale, head_dim: int) -> float:
    return float(softmax_scale) if softmax_scale is not None else head_dim ** -0.5


def _check_flags(window_size, softcap, alibi_slopes, batch, heads_q, device):
    # No try/except or generator here: torch.compile traces this function (fullgraph). Integers come as Python,
    # NumPy or 0-d tensor values (flash-attn's tests pass torch.randint(0, seqlen_k, (2,))).
    if not hasattr(window_size, "__len__") or len(window_size) != 2 or not hasattr(window_size[0], "__index__") or not hasattr(window_size[1], "__index__"):
        raise ValueError(f"window_size must be a pair of ints (left, right), got {window_size!r}")
    left, right = operator.index(window_size[0]), operator.index(window_size[1])
    if left < -1 or right < -1:
        raise ValueError(f"window_size: sizes must be >= -1 (-1: unbounded), got ({left}, {right})")
    if not math.isfinite(float(softcap)) or softcap < 0:
        raise ValueError(f"softcap must be >= 0 and finite (0: off), got {softcap}")
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32:
            raise ValueError("alibi_slopes must be a torch.float32 tensor of shape (nheads,) or (batch, nheads)")
        if tuple(alibi_slopes.shape) not in ((heads_q,), (batch, heads_q)):
            raise ValueError(f"alibi_slopes must have shape ({heads_q},) or ({batch}, {heads_q}), got "
                             f"{tuple(alibi_slopes.shape)}")
        if alibi_slopes.device != device:
            raise ValueError(f"alibi_slopes must be on {device} (with q), got {alibi_slopes.device}")
    return left, right


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, schedule=None, strict=False,
                    q_descale=None, k_descale=None, v_descale=None):
    """flash-attn 2.x's flash_attn_func, differentiable.

    q: (batch, seqlen_q, nheads, headdim); k, v: (batch, seqlen_k, nheads_k, headdim), nheads % nheads_k == 0
    (GQA/MQA). Causal and windows align to the bottom-right corner. Returns out (batch, seqlen_q, nheads, headdim),
    or with return_attn_probs=True (out, softmax_lse (batch, nheads, seqlen_q) fp32, None) as flash-attn does
    without dropout. dropout_p > 0 raises NotImplementedError. The backward pass gives dq, dk, dv (and the gradient
    of alibi_slopes when it requires grad); deterministic=True makes them bitwise reproducible (accumulations in a
    fixed order), the default accumulates with atomics in arrival order. softmax_lse is not differentiable.
    schedule=/strict=: the schedule to run instead of the fastest with a kernel for the call, and whether a
    missing kernel is an error rather than a fallback (docs/python.md, "Schedules"; flashtile.explain says which).
    FP8 (docs/fp8.md): q, k, v in torch.float8_e4m3fn give a torch.bfloat16 out; q_descale, k_descale, v_descale
    (flash-attn 3's) are None or fp32 (batch, nheads_k) tensors; such a call has no backward.
    """
    descales = (q_descale, k_descale, v_descale)
    if q_descale is not None or k_descale is not None or v_descale is not None:
        return _flash_attn_func_checked(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                        return_attn_probs, schedule, strict, deterministic, descales)
    # The warm path: a call whose tensors' shapes, strides, dtypes and devices and whose flags equal those of a call
    # checked and launched before passes the same checks and takes the same variant, numbers and layouts; only its
    # pointers (alignment), the current device and autograd are looked at again. Anything else is checked in full.
    # Under torch.compile the first test is a constant: the checked path alone is traced. The C++ call path, where
    # it is built, does the same lookup and launch without Python (NotImplemented: not a call shape it has filed).
    if not _is_compiling():
        if _fast is not None:
            launched = _fast.dense(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                   schedule, strict, return_attn_probs)
            if launched is not NotImplemented:
                return launched
        if alibi_slopes is None and type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor:
            try:
                prepared = _prepared.get(_dense_key(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                                                    schedule, strict))
            except TypeError:  # an unhashable flag (window_size as a list): the checked path
                prepared = None
            if prepared is not None and not (_grad_enabled() and (q.requires_grad or k.requires_grad
                                                                  or v.requires_grad)):
                launched = _launch_prepared(prepared, q, k, v)
                if launched is not None:
                    return (launched[0], launched[1], None) if return_attn_probs else launched[0]
    return _flash_attn_func_checked(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                    return_attn_probs, schedule, strict, deterministic)


def _flash_attn_func_checked(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                             return_attn_probs, schedule=None, strict=False, deterministic=False,
                             descales=(None, None, None)):
    """flash_attn_func with every check; files the call shape for the warm path where it can serve it (not an e4m3
    call's: its descales are per call)."""
    remember = None
    if (not _is_compiling() and alibi_slopes is None and type(q) is _Tensor and type(k) is _Tensor
            and type(v) is _Tensor and _plain_flags(dropout_p, softmax_scale, causal, window_size, softcap, schedule,
                                                    strict)):
        remember = _dense_filer(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, schedule, strict)
    name, strict_flag = _schedule_option(schedule, strict)
    launch, as_given = _dense_call(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                   return_attn_probs)
    checked = fp8.check_descales(launch[0], launch[0].shape[0], launch[1].shape[2], descales)
    dv = launch[-1]
    out, lse = _run(*launch[:-1], remember if as_given else None, name, strict_flag, deterministic, checked)
    if out.shape[-1] != dv:
        out = out[..., :dv]
    return (out, lse, None) if return_attn_probs else out


def _dense_call(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, return_attn_probs):
    """flash_attn_func's checks, and what its launch takes: (q, k, v as the kernels read them, cu_seqlens_q/k,
    max_seqlen_q/k, scale, variant, numbers, inputs, head dim of V as given); whether q, k, v are the caller's
    (neither padded nor copied)."""
    q = _check_tensor("q", q, 4, "(batch, seqlen_q, nheads, headdim)")
    k = _check_tensor("k", k, 4, "(batch, seqlen_k, nheads_k, headdim)")
    v = _check_tensor("v", v, 4, "(batch, seqlen_k, nheads_k, headdim_v)")
    _check_common(q, k, v, dropout_p, softmax_scale, return_attn_probs)
    batch, seqlen_q, heads_q, d = q.shape
    k_batch, seqlen_k, heads_kv, k_d = k.shape
    v_batch, v_seqlen, v_heads, dv = v.shape
    if k_batch != batch or v_batch != batch:
        raise ValueError(f"k and v must have batch {batch} (q's), got {k_batch} and {v_batch}")
    if v_seqlen != seqlen_k or v_heads != heads_kv or k_d != d:
        raise ValueError(f"k must be (batch, seqlen_k, nheads_k, {d}) and v (batch, seqlen_k, nheads_k, headdim_v); "
                         f"got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"nheads ({heads_q}) must be a multiple of nheads_k ({heads_kv})")
    if alibi_slopes is None and not softcap and window_size == (-1, -1):  # the common call: no flags to check
        window = window_size
    else:
        window = _check_flags(window_size, softcap, alibi_slopes, batch, heads_q, q.device)
    resolved, values = _flash_attn_variant(bool(causal), window, float(softcap), alibi_slopes, seqlen_k)
    params = [float(values[n]) for n in resolved.param_names]
    inputs = [] if alibi_slopes is None else [alibi_slopes.contiguous()]
    pd, pdv = _head_dims(d, dv)
    scale = float(softmax_scale) if softmax_scale is not None else d ** -0.5
    as_given = pd == d and pdv == dv
    if not as_given:
        q, k, v = _pad_last(q, pd), _pad_last(k, pd), _pad_last(v, pdv)
    qr, kr, vr = _kernel_ready(q), _kernel_ready(k), _kernel_ready(v)
    as_given = as_given and qr is q and kr is k and vr is v
    return (qr, kr, vr, None, None, 0, 0, scale, resolved, params, inputs, dv), as_given


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, schedule=None,
                           strict=False, q_descale=None, k_descale=None, v_descale=None):
    """flash-attn 2.x's flash_attn_varlen_func, differentiable (as flash_attn_func, `deterministic` included).

    q: (total_q, nheads, headdim); k, v: (total_k, nheads_k, headdim); cu_seqlens_q/k: int32 (batch + 1,) on q's
    device; masks align to each sequence's own lengths. Returns out (total_q, nheads, headdim), or with
    return_attn_probs=True (out, softmax_lse (nheads, total_q) fp32, None). block_table (paged KV) is not
    supported yet. Empty key sequences (total_k 0: k and v may be empty) give out 0 and softmax_lse -inf.
    schedule=/strict=: the schedule to run instead of the fastest with a kernel for the call, and whether a
    missing kernel is an error rather than a fallback (docs/python.md, "Schedules"; flashtile.explain says which).
    FP8 as flash_attn_func's: e4m3 q, k, v, descales of shape (batch, nheads_k), a bf16 out, no backward.
    """
    name, strict_flag = _schedule_option(schedule, strict)
    launch = _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                          causal, window_size, softcap, alibi_slopes, return_attn_probs, block_table)
    checked = fp8.check_descales(launch[0], launch[3].shape[0] - 1, launch[1].shape[1],
                                 (q_descale, k_descale, v_descale))
    dv = launch[-1]
    out, lse = _run(*launch[:-1], None, name, strict_flag, deterministic, checked)
    if out.shape[-1] != dv:
        out = out[..., :dv]
    return (out, lse, None) if return_attn_probs else out


def _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                 window_size, softcap, alibi_slopes, return_attn_probs, block_table):
    """flash_attn_varlen_func's checks, and what its launch takes (as _dense_call's)."""
    q = _check_tensor("q", q, 3, "(total_q, nheads, headdim)")
    k = _check_tensor("k", k, 3, "(total_k, nheads_k, headdim)")
    v = _check_tensor("v", v, 3, "(total_k, nheads_k, headdim_v)")
    _check_common(q, k, v, dropout_p, softmax_scale, return_attn_probs)
    if block_table is not None:
        raise NotImplementedError("block_table (paged KV cache) is not supported by flashtile yet")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.shape[0] < 1:
            raise ValueError(f"{name} must be an int32 tensor of shape (batch + 1,)")
        if cu.device != q.device:
            raise ValueError(f"{name} must be on {q.device} (with q), got {cu.device}")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must both have batch + 1 entries, got "
                         f"{cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}")
    max_seqlen_q, max_seqlen_k = int(max_seqlen_q), int(max_seqlen_k)
    if max_seqlen_q < 0 or max_seqlen_k < 0:
        raise ValueError(f"max_seqlen_q and max_seqlen_k must be >= 0, got {max_seqlen_q} and {max_seqlen_k}")
    total_k, heads_kv, d = k.shape
    heads_q, dv = q.shape[1], v.shape[2]
    if q.shape[2] != d or tuple(v.shape[:2]) != (total_k, heads_kv):
        raise ValueError(f"k must be (total_k, nheads_k, {q.shape[2]}) and v (total_k, nheads_k, headdim_v); got "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"nheads ({heads_q}) must be a multiple of nheads_k ({heads_kv})")
    batch = cu_seqlens_q.shape[0] - 1
    window = _check_flags(window_size, softcap, alibi_slopes, batch, heads_q, q.device)
    resolved, values = _flash_attn_variant(bool(causal), window, float(softcap), alibi_slopes, max_seqlen_k)
    params = [float(values[n]) for n in resolved.param_names]
    inputs = [] if alibi_slopes is None else [alibi_slopes.contiguous()]
    pd, pdv = _head_dims(d, dv)
    scale = _scale(softmax_scale, d)
    qp, kp, vp = (_kernel_ready(_pad_last(t, size)) for t, size in ((q, pd), (k, pd), (v, pdv)))
    return (qp, kp, vp, cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), max_seqlen_q, max_seqlen_k, scale,
            resolved, params, inputs, dv)


def attention(q, k, v, variant: VariantLike = "none", *, params=None, inputs=None, softmax_scale=None,
              cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, return_lse=False,
              schedule=None, strict=False, deterministic=False, q_offset=0, k_offset=0, head_offset=0,
              seqlen_q_global=None, seqlen_k_global=None, heads_q_global=None, heads_kv_global=None,
              cu_seqlens_q_global=None, cu_seqlens_k_global=None):
    """Attention with any variant: a built-in name ("causal", "sliding_window", ...) or a flashtile.Variant.

    Layouts are flash_attn_func's (dense) or, with cu_seqlens_q/k, flash_attn_varlen_func's. `params`: the
    variant's numbers by name (missing ones take the declared values) or in declaration order; `inputs`: its
    arrays by name or in order (CUDA tensors of the declared dtype; the hooks' indices define their shapes).
    Returns out, or (out, lse) with return_lse=True. A new Variant is compiled on first use and cached on disk.
    Differentiable in q, k, v and the variant's fp32 inputs (lse is not); deterministic=True: bitwise reproducible
    gradients.
    schedule=/strict=: the schedule to run instead of the fastest with a kernel for the call, and whether a
    missing kernel is an error rather than a fallback (docs/python.md, "Schedules"; flashtile.explain says which).
    A block of a larger problem (a sequence split across GPUs, docs/parallel.md): reference_attention's keywords.
    Query row i is q_offset + i, key j k_offset + j, query head h head_offset + h of a problem whose sizes the hooks
    see: seqlen_q_global / seqlen_k_global, heads_q_global / heads_kv_global (None: the call's own). Varlen: q_offset
    and k_offset per sequence (an int for all, or batch values: ints or an int32 tensor), the larger problem's
    sequences cu_seqlens_q_global / cu_seqlens_k_global. The call runs kernels compiled with position offsets; the
    backward places the gradients alike (and takes out and lse of the larger problem's rows, as flash-attn's).
    """
    placed = not (_positions._is_zero(q_offset) and _positions._is_zero(k_offset) and _positions._is_zero(head_offset)
                  and seqlen_q_global is None and seqlen_k_global is None and heads_q_global is None
                  and heads_kv_global is None and cu_seqlens_q_global is None and cu_seqlens_k_global is None)
    # The warm paths, as flash_attn_func's: the C++ one where it is built, else the Python one.
    plain = (not _is_compiling() and inputs is None and cu_seqlens_q is None and cu_seqlens_k is None
             and type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor and not placed)
    if _fast is not None and plain:
        launched = _fast.attention(q, k, v, variant, params, softmax_scale, schedule, strict, inputs, cu_seqlens_q,
                                   cu_seqlens_k, max_seqlen_q, max_seqlen_k, return_lse)
        if launched is not NotImplemented:
            return launched
    elif plain and not (_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        key = _attention_key(q, k, v, variant, params, softmax_scale, schedule, strict)
        prepared = None if key is None else _prepared.get(key)
        launched = None if prepared is None else _launch_prepared(prepared, q, k, v)
        if launched is not None:
            return launched if return_lse else launched[0]
    name, strict_flag = _schedule_option(schedule, strict)
    launch = _attention_call(q, k, v, variant, params, inputs, softmax_scale, cu_seqlens_q, cu_seqlens_k,
                             max_seqlen_q, max_seqlen_k,
                             (heads_q_global, seqlen_k_global, cu_seqlens_k_global) if placed else None)
    dv = launch[-1]
    positions = _positions.PLAIN
    if placed:
        if fp8.is_e4m3(q):
            raise NotImplementedError("q_offset, k_offset and the other position keywords are not supported for "
                                      "float8_e4m3fn calls (blocks of a larger problem run in float16 or bfloat16)")
        varlen = launch[3] is not None
        positions = _positions.check(q.device, varlen, launch[3].shape[0] - 1 if varlen else q.shape[0],
                                     q_offset, k_offset, head_offset, seqlen_q_global, seqlen_k_global, heads_q_global,
                                     heads_kv_global, cu_seqlens_q_global, cu_seqlens_k_global)
    remember = None
    if plain and launch[0] is q and launch[1] is k and launch[2] is v:
        key = _attention_key(q, k, v, variant, params, softmax_scale, schedule, strict)  # the Variant registered now

        def remember(call: bytes, variant_id: bytes, out, lse, index: int) -> None:
            if key is not None:
                _file_prepared(key, call, variant_id, out, lse, index)
            if _fast is not None:
                _fast.file_attention(q, k, v, variant, params, softmax_scale, schedule, strict, call, variant_id,
                                     out, lse, index)
    out, lse = _run(*launch[:-1], remember, name, strict_flag, deterministic, positions=positions)
    if out.shape[-1] != dv:
        out = out[..., :dv]
    return (out, lse) if return_lse else out


def _attention_call(q, k, v, variant, params, inputs, softmax_scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                    max_seqlen_k, placed=None):
    """attention()'s checks, and what its launch takes (as _dense_call's). `placed`: a block of a larger problem's
    (heads_q_global, seqlen_k_global, cu_seqlens_k_global), whose hooks index the inputs at global positions, so
    that a built-in's arrays are the larger problem's (slopes of every query head, doc_start of every key)."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    dims = 3 if varlen else 4
    q = _check_tensor("q", q, dims, "(total_q, nheads, headdim)" if varlen else "(batch, seqlen_q, nheads, headdim)")
    k = _check_tensor("k", k, dims, "(total_k, nheads_k, headdim)" if varlen else "(batch, seqlen_k, nheads_k, headdim)")
    v = _check_tensor("v", v, dims, "(total_k, nheads_k, headdim_v)" if varlen else "(batch, seqlen_k, nheads_k, headdim_v)")
    _check_common(q, k, v, 0.0, softmax_scale, False)
    if k.shape[-1] != q.shape[-1] or tuple(v.shape[:-1]) != tuple(k.shape[:-1]) or (
            not varlen and k.shape[0] != q.shape[0]):
        raise ValueError(f"shapes: k must match q's batch and head dim, and v k's rows and heads; got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    resolved = resolve_variant(variant)
    values = resolved.decl.check_params(params)
    if varlen:
        if cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None:
            raise ValueError("varlen: pass cu_seqlens_q, cu_seqlens_k, max_seqlen_q and max_seqlen_k together")
        for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
            if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.device != q.device:
                raise ValueError(f"{name} must be an int32 tensor of shape (batch + 1,) on {q.device}")
        batch, keys, heads_q = cu_seqlens_q.shape[0] - 1, k.shape[0], q.shape[1]
        cu_seqlens_q, cu_seqlens_k = cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()
        max_q, max_k = int(max_seqlen_q), int(max_seqlen_k)
    else:
        batch, keys, heads_q = q.shape[0], k.shape[0] * k.shape[1], q.shape[2]
        max_q = max_k = 0
    counts = _call_input_counts(resolved.id, batch, heads_q, keys, varlen, placed) if isinstance(variant, str) else {}
    arrays = _check_inputs(resolved.decl, inputs, q.device, counts)
    d, dv = q.shape[-1], v.shape[-1]
    pd, pdv = _head_dims(d, dv)
    qp, kp, vp = (_kernel_ready(_pad_last(t, size)) for t, size in ((q, pd), (k, pd), (v, pdv)))
    return (qp, kp, vp, cu_seqlens_q, cu_seqlens_k, max_q, max_k, _scale(softmax_scale, d), resolved, values, arrays,
            dv)


def explain(q, k, v, variant: Optional[VariantLike] = None, *, causal=False, window_size=(-1, -1), softcap=0.0,
            alibi_slopes=None, softmax_scale=None, params=None, inputs=None, cu_seqlens_q=None, cu_seqlens_k=None,
            max_seqlen_q=None, max_seqlen_k=None, schedule=None, strict=False, arch=None) -> Dict[str, object]:
    """Which kernel a call with these arguments runs, and why, without running it.

    The arguments are flash_attn_func's (flash_attn_varlen_func's with cu_seqlens_q/k and max_seqlen_q/k), or, with
    `variant`, attention()'s (params, inputs); schedule= and strict= as theirs. `arch`: None for q's GPU, or
    "sm_80", "sm_90a", "sm_100a" to ask what a GPU of that target would run. Returns a dict: schedule, entry (the
    kernel's name), source ("aot": an ahead-of-time library, "jit": compiled in process), order (the schedules tried,
    best first), forced_by (what named the schedule: "the call", "setSchedule", "FLASHTILE_SCHEDULE"; None when
    nothing did), fell_back (an earlier schedule of `order` has no kernel for the call) and reason (one line: why).
    The kernel is found as the call finds it (the JIT compiles what the caches lack, so the call is then warm); a
    call that would fail raises the same error here.
    """
    name, strict_flag = _schedule_option(schedule, strict)
    if arch is not None and not isinstance(arch, str):
        raise TypeError(f"arch must be None (q's GPU) or a target such as 'sm_90a', got {type(arch).__name__}")
    if variant is not None:
        if causal or softcap or alibi_slopes is not None or tuple(window_size) != (-1, -1):
            raise ValueError("explain: pass a variant (attention's call) or flash-attn's flags (causal, window_size, "
                             "softcap, alibi_slopes), not both")
        launch = _attention_call(q, k, v, variant, params, inputs, softmax_scale, cu_seqlens_q, cu_seqlens_k,
                                 max_seqlen_q, max_seqlen_k)
    elif params is not None or inputs is not None:
        raise ValueError("explain: params and inputs are a variant's; pass variant= too")
    elif cu_seqlens_q is not None or cu_seqlens_k is not None:
        if max_seqlen_q is None or max_seqlen_k is None:
            raise ValueError("explain: varlen calls pass cu_seqlens_q, cu_seqlens_k, max_seqlen_q and max_seqlen_k")
        launch = _varlen_call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, 0.0, softmax_scale,
                              causal, window_size, softcap, alibi_slopes, False, None)
    else:
        launch = _dense_call(q, k, v, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes, False)[0]
    qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved, values, arrays, _ = launch
    return _explain_launch(qp, kp, vp, cu_q, cu_k, max_q, max_k, scale, resolved.id_bytes, values, arrays, name,
                           strict_flag, arch)

