"""FP8 (e4m3) attention calls: flash-attn 3's q_descale, k_descale, v_descale, checked, and the custom op that runs
an e4m3 forward (docs/fp8.md). Q, K and V are torch.float8_e4m3fn; the output is torch.bfloat16, the LSE fp32. A
descale is None (= 1) or an fp32 tensor of shape (batch, nheads_k) on q's device: q_descale·k_descale joins the
softmax scale of each (batch, K/V head), v_descale multiplies the output. There is no backward (as in flash-attn
3): autograd raises where it would need one. torch.float8_e5m2 is refused by name."""

from typing import List, Optional, Tuple

import torch

# None on a PyTorch without FP8 dtypes: every call is then a 16-bit one.
E4M3 = getattr(torch, "float8_e4m3fn", None)
E5M2 = getattr(torch, "float8_e5m2", None)
DESCALE_NAMES = ("q_descale", "k_descale", "v_descale")


def is_e4m3(t) -> bool:
    return E4M3 is not None and t.dtype == E4M3


def output_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of O for inputs of `dtype`: bf16 for e4m3 (as flash-attn 3), else the inputs'."""
    return torch.bfloat16 if E4M3 is not None and dtype == E4M3 else dtype


def check_descales(q, batch: int, heads_kv: int, descales) -> Optional[Tuple[Optional[torch.Tensor], ...]]:
    """(q_descale, k_descale, v_descale) checked against q's dtype and device and the call's (batch, nheads_k):
    None when all three are None; each given one contiguous."""
    if all(d is None for d in descales):
        return None
    if not is_e4m3(q):
        given = ", ".join(n for n, d in zip(DESCALE_NAMES, descales) if d is not None)
        raise ValueError(f"{given}: descales apply to torch.float8_e4m3fn inputs only; q is {q.dtype} (pass None, "
                         "or e4m3 q, k, v)")
    return tuple(None if d is None else _checked_descale(name, d, batch, heads_kv, q.device)
                 for name, d in zip(DESCALE_NAMES, descales))


def _checked_descale(name: str, d, batch: int, heads_kv: int, device):
    """One descale: a torch.float32 tensor of shape (batch, nheads_k) on `device`, returned contiguous."""
    if not isinstance(d, torch.Tensor):
        raise TypeError(f"{name} must be None or a torch.float32 tensor of shape ({batch}, {heads_kv}) "
                        f"(batch, nheads_k), got {type(d).__name__}")
    if d.dtype != torch.float32:
        raise ValueError(f"{name} must be torch.float32 (fp32 descales, as flash-attn 3), got {d.dtype}")
    if tuple(d.shape) != (batch, heads_kv):
        raise ValueError(f"{name} must have shape ({batch}, {heads_kv}) (batch, nheads_k), got {tuple(d.shape)}")
    if d.device != device:
        raise ValueError(f"{name} must be on {device} (with q), got {d.device}")
    return d.contiguous()


def refuse_e5m2(name: str, t) -> None:
    if E5M2 is not None and t.dtype == E5M2:
        raise ValueError(f"{name}: torch.float8_e5m2 is not supported: FP8 attention takes torch.float8_e4m3fn (as "
                         "flash-attn 3); accepted: torch.float16, torch.bfloat16, torch.float8_e4m3fn")


def refuse_e4m3_query(name: str, t) -> None:
    """flash_attn_with_kvcache reads q (and k, v, the rotary tables) in 16 bits; only the caches may be e4m3."""
    if is_e4m3(t):
        raise ValueError(f"{name}: torch.float8_e4m3fn {name} is not supported by flash_attn_with_kvcache (its kernels "
                         "read q, k and v in 16 bits); accepted: torch.float16, torch.bfloat16 — the caches k_cache "
                         "and v_cache may be torch.float8_e4m3fn, with k_descale and v_descale")


def check_cache_descales(q, cache_e4m3: bool, batch: int, heads_kv: int, q_descale, k_descale, v_descale):
    """flash_attn_with_kvcache's descales (flash-attn 3's names): q_descale is refused (q is 16-bit); k_descale and
    v_descale, each None (= 1) or fp32 (batch, nheads_k) on q's device, go with e4m3 caches only. Returns the two,
    contiguous."""
    if q_descale is not None:
        raise ValueError("q_descale: flash_attn_with_kvcache takes q in torch.float16 or torch.bfloat16, so there is "
                         "nothing to descale; pass None (k_descale and v_descale descale an e4m3 cache)")
    if not cache_e4m3:
        given = ", ".join(n for n, d in (("k_descale", k_descale), ("v_descale", v_descale)) if d is not None)
        if given:
            raise ValueError(f"{given}: descales apply to torch.float8_e4m3fn caches only; k_cache is "
                             f"{q.dtype} (pass None, or e4m3 k_cache and v_cache)")
        return None, None
    return tuple(None if d is None else _checked_descale(name, d, batch, heads_kv, q.device)
                 for name, d in (("k_descale", k_descale), ("v_descale", v_descale)))


BACKWARD_ERROR = ("flashtile: the backward of an FP8 (torch.float8_e4m3fn) attention call is not supported: FP8 "
                  "attention is forward-only, as in flash-attn 3; run the call in torch.bfloat16 or torch.float16 to "
                  "differentiate it")


@torch.library.custom_op("flashtile::fwd_fp8", mutates_args=(), device_types="cuda")
def _fwd_fp8_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
                cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                variant: str, params: List[float], inputs: List[torch.Tensor], schedule: Optional[str], strict: bool,
                q_descale: Optional[torch.Tensor], k_descale: Optional[torch.Tensor],
                v_descale: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """An e4m3 attention forward: (O in bf16, LSE); arguments as flashtile::fwd's, checked by the callers."""
    from . import interface

    return interface._launch(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                             variant.encode(), params, inputs, None, interface._schedule_option(schedule, strict)[0],
                             int(strict), (q_descale, k_descale, v_descale))


@_fwd_fp8_op.register_fake
def _fwd_fp8_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, variant, params,
                  inputs, schedule, strict, q_descale, k_descale, v_descale):
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],), dtype=torch.bfloat16)
    if cu_seqlens_q is not None:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


def _fwd_fp8_setup_context(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1])


def _fwd_fp8_backward(ctx, grad_out, grad_lse):
    raise RuntimeError(BACKWARD_ERROR)


_fwd_fp8_op.register_autograd(_fwd_fp8_backward, setup_context=_fwd_fp8_setup_context)
