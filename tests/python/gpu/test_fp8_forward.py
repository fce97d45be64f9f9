"""The FP8 (e4m3) forward on the GPU (docs/fp8.md): fa3's e4m3 kernel on sm_90a (wgmma m64nNk32, V transposed by the
launch plan's prepass, P rounded to e4m3 in registers) against flash-attn hopper's FP8 rule. Inputs are quantized per
(batch, K/V head) with non-trivial descales; the reference runs on the dequantized inputs in fp32, the low-precision
reference on them in bf16 with P rounded to e4m3 before P·V, and

    max|out - ref_fp32| <= factor * max|ref_lowp - ref_fp32| + atol

with factor 2 (3 for softcap, as the 16-bit tests), atol flash-attn's fp32 noise term plus 1e-5. Variants: none,
causal, sliding window, softcap; MHA, GQA, MQA; dense and varlen; head dims 64, 128, 256. Skipped without a GPU of
compute capability 9.0 (the kernel is sm_90a's) or a PyTorch without float8_e4m3fn. Run on the GPU machine:
pytest tests/python/gpu/test_fp8_forward.py (bench/device/python-check.sh runs the whole folder).
"""

import pytest
import torch

import flashtile
from reference import attention_ref, check_lse

E4M3 = getattr(torch, "float8_e4m3fn", None)
E4M3_MAX = 448.0

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(E4M3 is None, reason="needs a PyTorch with torch.float8_e4m3fn"),
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="the e4m3 kernel is fa3's on sm_90a"),
]

HEAD_DIMS = [64, 128, 256]
SEQLENS = [(113, 203), (128, 217), (256, 512), (512, 256), (1023, 1024), (2048, 2048)]
VARIANTS = ["none", "causal", "window", "softcap"]


def flags_for(variant):
    return {"none": {}, "causal": {"causal": True}, "window": {"window_size": (77, 33)},
            "softcap": {"softcap": 30.0}}[variant]


def heads_for(mha_type):
    return {"mha": (4, 4), "gqa": (6, 2), "mqa": (4, 1)}[mha_type]


def quantize(x, heads_kv, spread):
    """x (B, S, H, D) fp32 -> (x8 e4m3, descale (B, heads_kv) fp32): one scale per (batch, K/V head) over its query
    heads' rows, so that the group's largest magnitude maps near e4m3's largest finite value; `spread` (B, H) scales
    the inputs first, so the descales differ per (batch, head)."""
    batch, _, heads, _ = x.shape
    x = x * spread[:, None, :, None]
    group = heads // heads_kv
    amax = x.abs().reshape(batch, x.shape[1], heads_kv, group, x.shape[3]).amax(dim=(1, 3, 4))
    descale = (amax / (0.9 * E4M3_MAX)).clamp_min(1e-6).float()
    per_head = descale.repeat_interleave(group, dim=1)[:, None, :, None]
    return (x / per_head).to(E4M3), descale


def dequantize(x8, descale):
    group = x8.shape[2] // descale.shape[1]
    return x8.float() * descale.repeat_interleave(group, dim=1)[:, None, :, None]


def fp8_inputs(batch, seqlen_q, seqlen_k, heads_q, heads_kv, d, device):
    q = torch.randn(batch, seqlen_q, heads_q, d, device=device)
    k = torch.randn(batch, seqlen_k, heads_kv, d, device=device)
    v = torch.randn(batch, seqlen_k, heads_kv, d, device=device)
    (q8, qd), (k8, kd), (v8, vd) = (
        quantize(x, heads_kv, torch.empty(batch, x.shape[2], device=device).uniform_(0.25, 4.0)) for x in (q, k, v))
    return q8, k8, v8, qd, kd, vd


def check_fp8(out, q, k, v, flags):
    """flash-attn hopper's FP8 rule on dequantized fp32 inputs (B, S, H, D); returns the fp32 LSE."""
    factor = 3.0 if flags.get("softcap", 0.0) > 0 else 2.0
    ref, ref_lse = attention_ref(q, k, v, **flags)
    lowp, _ = attention_ref(q.bfloat16(), k.bfloat16(), v.bfloat16(), upcast=False, reorder_ops=True,
                            intermediate_dtype=E4M3, **flags)
    atol = 2 * (ref + 0.3 - 0.3 - ref).abs().max().item() + 1e-5
    err = (out.float() - ref).abs().max().item()
    err_lowp = (lowp.float() - ref).abs().max().item()
    assert out.dtype == torch.bfloat16
    assert not torch.isnan(out).any(), "out has NaN"
    assert err <= factor * err_lowp + atol, f"max error {err} > {factor} x {err_lowp} + {atol} (low-precision ref)"
    return ref_lse


@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mha_type", ["mha", "gqa", "mqa"])
def test_fp8_output(seqlen_q, seqlen_k, d, variant, mha_type):
    torch.manual_seed(seqlen_q * 7 + seqlen_k + d)
    heads_q, heads_kv = heads_for(mha_type)
    q8, k8, v8, qd, kd, vd = fp8_inputs(2, seqlen_q, seqlen_k, heads_q, heads_kv, d, "cuda")
    flags = flags_for(variant)
    out, lse, _ = flashtile.flash_attn_func(q8, k8, v8, return_attn_probs=True, schedule="fa3", strict=True,
                                            q_descale=qd, k_descale=kd, v_descale=vd, **flags)
    ref_lse = check_fp8(out, dequantize(q8, qd), dequantize(k8, kd), dequantize(v8, vd), flags)
    check_lse(lse, ref_lse)


@pytest.mark.parametrize("d", [64, 128])
def test_fp8_without_descales_is_descale_one(d):
    """Descales left out mean 1: the same call with all-ones descales gives the same bits."""
    torch.manual_seed(d)
    q8, k8, v8, _, _, _ = fp8_inputs(2, 300, 500, 4, 2, d, "cuda")
    ones = torch.ones(2, 2, device="cuda")
    out = flashtile.flash_attn_func(q8, k8, v8, causal=True, schedule="fa3", strict=True)
    out_ones = flashtile.flash_attn_func(q8, k8, v8, causal=True, schedule="fa3", strict=True, q_descale=ones,
                                         k_descale=ones, v_descale=ones)
    assert torch.equal(out, out_ones)
    check_fp8(out, q8.float(), k8.float(), v8.float(), {"causal": True})


@pytest.mark.parametrize("d", [64, 128])
def test_fp8_under_cuda_graph_capture(d):
    """An e4m3 call captured in a CUDA graph (its transposed V in a workspace from the capture's pool, sized by
    flashtile_forward_workspace_size) replays to the eager call's bits, with new inputs copied into the same tensors."""
    torch.manual_seed(d + 1)
    q8, k8, v8, qd, kd, vd = fp8_inputs(2, 256, 384, 4, 2, d, "cuda")

    def call():
        return flashtile.flash_attn_func(q8, k8, v8, causal=True, schedule="fa3", strict=True, q_descale=qd,
                                         k_descale=kd, v_descale=vd)

    eager = call()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # warm-up outside the capture (kernel built and loaded)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
    fresh = fp8_inputs(2, 256, 384, 4, 2, d, "cuda")
    for dst, src in zip((q8, k8, v8, qd, kd, vd), fresh):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, call())


def pack(x, lengths):
    return torch.cat([x[b, :n] for b, n in enumerate(lengths)])


def cu_seqlens(lengths, device):
    return torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32, device=device)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mha_type", ["mha", "gqa"])
def test_fp8_varlen_output(d, variant, mha_type):
    """Sequences of different lengths packed (flash_attn_varlen_func), one descale per (sequence, K/V head); each
    sequence checked against its own reference. Lengths cross and miss the K/V tiles' boundaries, so the Vᵀ prepass's
    per-sequence images and their zero padding are exercised."""
    torch.manual_seed(d + len(variant))
    heads_q, heads_kv = heads_for(mha_type)
    lengths_q, lengths_k = [1, 300, 129, 777], [5, 250, 641, 224]
    batch = len(lengths_q)
    q8, k8, v8, qd, kd, vd = fp8_inputs(batch, max(lengths_q), max(lengths_k), heads_q, heads_kv, d, "cuda")
    flags = flags_for(variant)
    out, lse, _ = flashtile.flash_attn_varlen_func(
        pack(q8.view(torch.uint8), lengths_q).view(E4M3), pack(k8.view(torch.uint8), lengths_k).view(E4M3),
        pack(v8.view(torch.uint8), lengths_k).view(E4M3), cu_seqlens(lengths_q, "cuda"),
        cu_seqlens(lengths_k, "cuda"), max(lengths_q), max(lengths_k), return_attn_probs=True, schedule="fa3",
        strict=True, q_descale=qd, k_descale=kd, v_descale=vd, **flags)
    start = 0
    for b, (nq, nk) in enumerate(zip(lengths_q, lengths_k)):
        qb, kb, vb = (dequantize(x8[b:b + 1, :n], s[b:b + 1])
                      for x8, s, n in ((q8, qd, nq), (k8, kd, nk), (v8, vd, nk)))
        ref_lse = check_fp8(out[start:start + nq][None], qb, kb, vb, flags)
        check_lse(lse[:, start:start + nq][None], ref_lse)
        start += nq

