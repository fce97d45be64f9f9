"""Reference attention for the GPU tests, in PyTorch: flash-attn 2.x's semantics, fp32 or the inputs' precision."""

import math

import torch


def attention_ref(q, k, v, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, upcast=True,
                  reorder_ops=False, softmax_scale=None, intermediate_dtype=None):
    """q (B, Sq, Hq, D), k/v (B, Sk, Hkv, D): (out, lse). upcast=False keeps the inputs' precision for the
    scores and probabilities (the "low precision" reference of FlashAttention's error rule); reorder_ops scales K
    instead of Q (another rounding order); intermediate_dtype rounds the probabilities to that dtype before P·V
    (torch.float8_e4m3fn: the low-precision reference of an FP8 call, as flash-attn's hopper tests). Causal and
    windows align to the bottom-right corner; a row that sees no key gives O = 0, LSE = -inf."""
    dtype = q.dtype
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    batch, seqlen_q, heads_q, d = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(heads_q // heads_kv, dim=2)
    v = v.repeat_interleave(heads_q // heads_kv, dim=2)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
    if not reorder_ops:
        scores = torch.einsum("bthd,bshd->bhts", q * scale, k)
    else:
        scores = torch.einsum("bthd,bshd->bhts", q, k * scale)
    scores = scores.float() if upcast else scores
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    row = torch.arange(seqlen_q, device=q.device)[:, None] + seqlen_k - seqlen_q
    col = torch.arange(seqlen_k, device=q.device)[None, :]
    if alibi_slopes is not None:
        slopes = alibi_slopes if alibi_slopes.dim() == 2 else alibi_slopes[None, :].expand(batch, -1)
        bias = -slopes[:, :, None, None].float() * (row - col).abs().float()
        scores = scores + bias.to(scores.dtype)
    left, right = window_size
    if causal:
        right = 0
    masked = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool, device=q.device)
    if left >= 0:
        masked |= col < row - left
    if right >= 0:
        masked |= col > row + right
    scores = scores.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(scores.float(), dim=-1)
    attn = torch.softmax(scores, dim=-1)
    attn = attn.masked_fill(masked.all(dim=-1, keepdim=True), 0.0)
    if intermediate_dtype is not None:
        attn = attn.to(intermediate_dtype).to(attn.dtype)
    out = torch.einsum("bhts,bshd->bthd", attn.to(v.dtype), v)
    return out.to(dtype), lse


def check_output(out, q, k, v, factor=2.0, **flags):
    """FlashAttention's rule: max|out - ref_fp32| <= factor · max|ref_lowp - ref_fp32| (+ a tiny atol)."""
    ref, ref_lse = attention_ref(q, k, v, **flags)
    lowp, _ = attention_ref(q, k, v, upcast=False, reorder_ops=True, **flags)
    err = (out.float() - ref.float()).abs().max().item()
    err_lowp = (lowp.float() - ref.float()).abs().max().item()
    assert err <= factor * err_lowp + 1e-5, f"max error {err} > {factor} x {err_lowp} (low-precision reference)"
    return ref_lse


def check_lse(lse, ref_lse, atol=1e-3):
    """LSE (B, H, Sq) against the fp32 reference; rows with no key are -inf in both."""
    both_inf = torch.isneginf(lse) & torch.isneginf(ref_lse)
    diff = torch.where(both_inf, torch.zeros_like(lse), (lse - ref_lse).abs())
    assert not torch.isnan(diff).any(), "LSE has NaN"
    assert diff.max().item() <= atol * max(1.0, ref_lse[torch.isfinite(ref_lse)].abs().max().item() if
                                          torch.isfinite(ref_lse).any() else 1.0), f"LSE error {diff.max().item()}"
