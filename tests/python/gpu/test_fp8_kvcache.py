"""flash_attn_with_kvcache over an e4m3 KV cache on the GPU (docs/fp8.md, "An e4m3 KV cache"): the decode schedule's
KV-cache kernels with k_cache/v_cache torch.float8_e4m3fn and q, k, v bf16 or f16, against flash-attn hopper's FP8
rule. The cache holds e4m3 values of a standard normal spread over e4m3's range with non-trivial descales per (batch,
K/V head); the reference runs on the dequantized cache (cache · descale) in fp32, the low-precision reference on it in
q's dtype, and

    max|out - ref_fp32| <= 2 * max|ref_lowp - ref_fp32| + atol

(3x with softcap), atol flash-attn's fp32 noise term plus 1e-5. Appended k/v are checked in the cache afterwards:
each new value (rotated first where rotary embedding is asked) is e4m3(value / descale), rounded to nearest and
saturated at ±448, byte for byte. Cases: contiguous and paged caches (shuffled block tables, pages of 16 to 256),
MHA/GQA/MQA, cache lengths 0/1/odd/full, causal and not, rotary, window/softcap/ALiBi, forced splits and the split
heuristic on a long cache, head dims 64, 128, 256; the errors of bad descales. Skipped without a GPU or a PyTorch
with float8_e4m3fn. Run on the GPU machine: pytest tests/python/gpu/test_fp8_kvcache.py
(bench/device/pending-check.sh, part fp8kv).
"""

import itertools

import pytest
import torch

import flashtile
from reference import attention_ref
from test_kvcache import rotary_tables, rotate

E4M3 = getattr(torch, "float8_e4m3fn", None)
E4M3_MAX = 448.0
HEADS = 8

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(E4M3 is None, reason="needs a PyTorch with torch.float8_e4m3fn"),
]


def to_e4m3(x):
    """x (fp32) to e4m3 as the append kernel rounds: nearest, ties to even, saturating at ±448 (torch's cast gives
    NaN past the largest finite value, so clamp first)."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def gather_paged(pool, table):
    """The pages of each sequence, in order: (B, pages x page_size, Hkv, D). Indexing runs on the bytes (uint8), which
    every PyTorch indexes; float8 indexing is not implemented everywhere."""
    batch, pages = table.shape
    rows = pool.view(torch.uint8)[table.flatten().long()]
    return rows.view(batch, pages * pool.shape[1], *pool.shape[2:]).view(pool.dtype)


def dequantize(x8, descale):
    """(B, S, Hkv, D) e4m3 with (B, Hkv) descales -> fp32."""
    return x8.float() * descale[:, None, :, None]


def check_fp8_cache(out, q, k, v, factor, **flags):
    """The FP8 rule on one sequence: q (1, Sq, Hq, D) of q's dtype, k/v (1, Sk, Hkv, D) dequantized fp32."""
    ref, _ = attention_ref(q.float(), k, v, **flags)
    lowp, _ = attention_ref(q, k.to(q.dtype), v.to(q.dtype), upcast=False, reorder_ops=True, **flags)
    atol = 2 * (ref + 0.3 - 0.3 - ref).abs().max().item() + 1e-5
    err = (out.float() - ref).abs().max().item()
    err_lowp = (lowp.float() - ref).abs().max().item()
    assert out.dtype == q.dtype
    assert err <= factor * err_lowp + atol, f"max |out - ref| = {err:.3e} > {factor} x {err_lowp:.3e} + {atol:.1e}"
    return err, err_lowp


def run_case(dtype=torch.bfloat16, d=128, heads_kv=2, seqlen_q=1, seqlen_new=1, new_kv=True, causal=False,
             paged=False, page_size=64, capacity=512, lengths=None, rotary_dim=0, interleaved=True, window_size=(-1, -1),
             softcap=0.0, alibi=False, num_splits=0, descales=True):
    generator = torch.Generator().manual_seed(0)
    torch.random.manual_seed(0)
    seqlen_new = seqlen_new if new_kv else 0
    if lengths is None:
        lengths = [0, 1, 37, capacity - seqlen_new]
    batch = len(lengths)
    q = torch.randn(batch, seqlen_q, HEADS, d, device="cuda", dtype=dtype)
    # The cache: e4m3 values over e4m3's range (a quantizer's output), descales that make them of order one.
    k8 = to_e4m3(64 * torch.randn(batch, capacity, heads_kv, d, device="cuda"))
    v8 = to_e4m3(64 * torch.randn(batch, capacity, heads_kv, d, device="cuda"))
    kd = torch.empty(batch, heads_kv, device="cuda").uniform_(0.5, 2.0) / 64 if descales else None
    vd = torch.empty(batch, heads_kv, device="cuda").uniform_(0.5, 2.0) / 64 if descales else None
    ones = torch.ones(batch, heads_kv, device="cuda")
    k = torch.randn(batch, seqlen_new, heads_kv, d, device="cuda", dtype=dtype) if new_kv else None
    v = torch.randn(batch, seqlen_new, heads_kv, d, device="cuda", dtype=dtype) if new_kv else None
    cache_seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    cos = sin = None
    if rotary_dim:
        cos, sin = rotary_tables(capacity, rotary_dim, dtype)
    alibi_slopes = torch.rand(batch, HEADS, device="cuda", dtype=torch.float32) * 0.3 if alibi else None

    # The expected cache after the call: the new rows (rotated where asked) quantized with the descales.
    k_expected, v_expected = k8.clone(), v8.clone()
    q_ref = q.clone()
    local = window_size != (-1, -1)
    kdiv, vdiv = (kd if descales else ones), (vd if descales else ones)
    for b, held in enumerate(lengths):
        if new_kv:
            positions = torch.arange(held, held + seqlen_new, device="cuda")
            kb = rotate(k[b], cos, sin, positions, interleaved) if rotary_dim else k[b]
            k_expected[b, held:held + seqlen_new] = to_e4m3(kb.float() / kdiv[b][None, :, None])
            v_expected[b, held:held + seqlen_new] = to_e4m3(v[b].float() / vdiv[b][None, :, None])
        if rotary_dim:
            offsets = torch.arange(seqlen_q, device="cuda") if (causal or local) else torch.zeros(
                seqlen_q, dtype=torch.long, device="cuda")
            q_ref[b] = rotate(q[b], cos, sin, held + offsets, interleaved)

    if paged:
        pages_per_seq = capacity // page_size
        num_pages = batch * pages_per_seq + batch
        order = torch.randperm(num_pages, generator=generator)[:batch * pages_per_seq]
        table = order.view(batch, pages_per_seq).to(torch.int32).cuda()
        k_call = to_e4m3(torch.randn(num_pages, page_size, heads_kv, d, device="cuda"))
        v_call = to_e4m3(torch.randn(num_pages, page_size, heads_kv, d, device="cuda"))
        k_call.view(torch.uint8)[table.flatten().long()] = k8.view(torch.uint8).view(-1, page_size, heads_kv, d)
        v_call.view(torch.uint8)[table.flatten().long()] = v8.view(torch.uint8).view(-1, page_size, heads_kv, d)
    else:
        k_call, v_call, table = k8.clone(), v8.clone(), None
    out, lse = flashtile.flash_attn_with_kvcache(
        q, k_call, v_call, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=cache_seqlens, block_table=table,
        causal=causal, window_size=window_size, softcap=softcap, rotary_interleaved=interleaved,
        alibi_slopes=alibi_slopes, num_splits=num_splits, return_softmax_lse=True, k_descale=kd, v_descale=vd)
    torch.cuda.synchronize()
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (batch, HEADS, seqlen_q) and lse.dtype == torch.float32

    k_after, v_after = (gather_paged(k_call, table), gather_paged(v_call, table)) if paged else (k_call, v_call)
    if rotary_dim:
        # The rotated key is rounded to q's dtype first (as the 16-bit path stores it), then quantized: one e4m3
        # step apart at most where the two roundings of the rotation differ.
        diff = (dequantize(k_after, kdiv) - dequantize(k_expected, kdiv)).abs()
        assert diff.max().item() <= (2 ** -3) * dequantize(k_expected, kdiv).abs().max().item()
    else:
        assert torch.equal(k_after.view(torch.uint8), k_expected.view(torch.uint8)), "k_cache after the call differs"
    assert torch.equal(v_after.view(torch.uint8), v_expected.view(torch.uint8)), "v_cache after the call differs"

    flags = dict(causal=causal, window_size=window_size, softcap=softcap)
    k_deq, v_deq = dequantize(k_after, kdiv), dequantize(v_after, vdiv)
    for b, held in enumerate(lengths):
        keys = held + seqlen_new
        slopes = alibi_slopes[b:b + 1] if alibi else None
        check_fp8_cache(out[b:b + 1], q_ref[b:b + 1], k_deq[b:b + 1, :keys], v_deq[b:b + 1, :keys],
                        3.0 if softcap else 2.0, alibi_slopes=slopes, **flags)


@pytest.mark.parametrize("dtype,paged,new_kv,causal,mha_type,seqlen_q", list(itertools.product(
    [torch.bfloat16, torch.float16], [False, True], [False, True], [False, True], ["mha", "gqa", "mqa"], [1, 4])))
def test_fp8_kvcache(dtype, paged, new_kv, causal, mha_type, seqlen_q):
    heads_kv = {"mha": HEADS, "gqa": 2, "mqa": 1}[mha_type]
    run_case(dtype=dtype, paged=paged, new_kv=new_kv, causal=causal, heads_kv=heads_kv, seqlen_q=seqlen_q,
             seqlen_new=seqlen_q)


@pytest.mark.parametrize("d", [64, 256])
@pytest.mark.parametrize("paged,page_size", [(False, 0), (True, 16), (True, 256)])
def test_head_dims_and_page_sizes(d, paged, page_size):
    run_case(d=d, paged=paged, page_size=page_size or 64, causal=True, seqlen_q=2, seqlen_new=2)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_rotary(interleaved, causal):
    run_case(rotary_dim=64, interleaved=interleaved, causal=causal, seqlen_q=3, seqlen_new=3, paged=causal)


@pytest.mark.parametrize("flags", [dict(window_size=(48, 0)), dict(softcap=30.0), dict(alibi=True, causal=True)],
                         ids=["window", "softcap", "alibi"])
def test_variants(flags):
    run_case(seqlen_q=4, seqlen_new=4, **flags)


@pytest.mark.parametrize("num_splits", [1, 3, 16])
def test_forced_splits(num_splits):
    run_case(num_splits=num_splits, lengths=[0, 1, 1001, 2047], capacity=2048, causal=True, heads_kv=1)


def test_long_paged_cache_split_by_the_heuristic():
    run_case(lengths=[32767, 20000], capacity=32768, heads_kv=2, paged=True, page_size=256)


def test_without_descales():
    run_case(descales=False, causal=True, seqlen_q=2, seqlen_new=2, paged=True)


def test_the_rule_can_fail():
    """Negative control: the same call with the descales left out is far outside the rule."""
    torch.random.manual_seed(1)
    q = torch.randn(2, 1, HEADS, 128, device="cuda", dtype=torch.bfloat16)
    k8 = to_e4m3(64 * torch.randn(2, 256, 2, 128, device="cuda"))
    v8 = to_e4m3(64 * torch.randn(2, 256, 2, 128, device="cuda"))
    kd = torch.full((2, 2), 1 / 64, device="cuda")
    vd = torch.full((2, 2), 1 / 64, device="cuda")
    out = flashtile.flash_attn_with_kvcache(q, k8, v8, k_descale=kd, v_descale=vd)
    with pytest.raises(AssertionError):
        check_fp8_cache(out[:1], q[:1], dequantize(k8, kd)[:1] * 2, dequantize(v8, vd)[:1], 2.0)
    check_fp8_cache(out[:1], q[:1], dequantize(k8, kd)[:1], dequantize(v8, vd)[:1], 2.0)


def test_explain_names_the_e4m3_cache_kernel():
    q = torch.randn(2, 1, HEADS, 128, device="cuda", dtype=torch.bfloat16)
    k8 = to_e4m3(torch.randn(2, 256, 2, 128, device="cuda"))
    choice = flashtile.explain_kvcache(q, k8, k8.clone(), k_descale=torch.ones(2, 2, device="cuda"))
    assert choice["schedule"] == "decode"
    assert choice["entry"].endswith("_kvcache_e4m3"), choice["entry"]


def test_bad_descales_are_named():
    q = torch.randn(2, 1, HEADS, 128, device="cuda", dtype=torch.bfloat16)
    k8 = to_e4m3(torch.randn(2, 256, 2, 128, device="cuda"))
    with pytest.raises(ValueError, match=r"k_descale must have shape \(2, 2\)"):
        flashtile.flash_attn_with_kvcache(q, k8, k8.clone(), k_descale=torch.ones(2, 8, device="cuda"))
    with pytest.raises(ValueError, match="v_descale must be torch.float32"):
        flashtile.flash_attn_with_kvcache(q, k8, k8.clone(), v_descale=torch.ones(2, 2, device="cuda").half())
    with pytest.raises(ValueError, match="k_descale must be on"):
        flashtile.flash_attn_with_kvcache(q, k8, k8.clone(), k_descale=torch.ones(2, 2))
    with pytest.raises(ValueError, match="q_descale: flash_attn_with_kvcache takes q in"):
        flashtile.flash_attn_with_kvcache(q, k8, k8.clone(), q_descale=torch.ones(2, 2, device="cuda"))
