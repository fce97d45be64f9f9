"""flash-attention's forward tests (tests/test_flash_attn.py: test_flash_attn_output and
test_flash_attn_varlen_output), written anew against flashtile's package: the same parametrization of dtypes,
MHA/MQA/GQA, ALiBi, local windows, causal, head dims, sequence lengths and softcap, without dropout (flashtile has
none) and without the backward pass. Run on a GPU machine: pytest tests/python/gpu (bench/device/python-check.sh).
"""

import pytest
import torch

import flashtile
from reference import check_lse, check_output

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = [torch.float16, torch.bfloat16]
HEAD_DIMS = [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
SEQLENS = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024), (1023, 1024),
           (1024, 1023), (2048, 2048)]
VARLEN_HEAD_DIMS = [32, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
VARLEN_SEQLENS = [(1, 147)] + SEQLENS


def heads_for(mha_type, softcap):
    nheads = 6 if softcap == 0.0 else 4
    return nheads, {"mha": nheads, "mqa": 1, "gqa": 2}[mha_type]


def random_window(local, seqlen_k):
    return tuple(torch.randint(0, seqlen_k, (2,)).tolist()) if local else (-1, -1)


@pytest.mark.parametrize("softcap", [0.0, 50.0])
@pytest.mark.parametrize("seqlen_q,seqlen_k", SEQLENS)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("mha_type", ["mha", "mqa", "gqa"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attn_output(seqlen_q, seqlen_k, d, causal, local, alibi, mha_type, dtype, softcap):
    device = "cuda"
    torch.random.manual_seed(0)
    batch_size = 4
    nheads, nheads_k = heads_for(mha_type, softcap)
    window_size = random_window(local, seqlen_k)
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=device, dtype=dtype)
    k = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype)
    v = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype)
    alibi_slopes = torch.rand(batch_size, nheads, device=device, dtype=torch.float32) * 0.3 if alibi else None
    out, lse, probs = flashtile.flash_attn_func(q, k, v, 0.0, causal=causal, window_size=window_size,
                                                softcap=softcap, alibi_slopes=alibi_slopes, return_attn_probs=True)
    assert probs is None
    assert out.shape == q.shape and lse.shape == (batch_size, nheads, seqlen_q)
    flags = dict(causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes)
    ref_lse = check_output(out, q, k, v, factor=3.0 if softcap else 2.0, **flags)
    check_lse(lse, ref_lse)


def random_lengths(max_seqlen, batch_size, device):
    """Random lengths in [max_seqlen - 20, max_seqlen] (at least 1), as flash-attn's random padding masks."""
    low = max(1, max_seqlen - 20)
    return torch.randint(low, max_seqlen + 1, (batch_size,), device="cpu").tolist()


def pack(x, lengths):
    return torch.cat([x[b, :n] for b, n in enumerate(lengths)], dim=0)


def cu_seqlens(lengths, device):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths).cumsum(0)
    return cu.to(device)


@pytest.mark.parametrize("softcap", [0.0, 50.0])
@pytest.mark.parametrize("seqlen_q,seqlen_k", VARLEN_SEQLENS)
@pytest.mark.parametrize("d", VARLEN_HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("mha_type", ["mha", "mqa", "gqa"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attn_varlen_output(seqlen_q, seqlen_k, d, causal, local, alibi, mha_type, dtype, softcap):
    device = "cuda"
    torch.random.manual_seed(0)
    batch_size = 4
    nheads, nheads_k = heads_for(mha_type, softcap)
    window_size = random_window(local, seqlen_k)
    q = torch.randn(batch_size, seqlen_q, nheads, d, device=device, dtype=dtype)
    k = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype)
    v = torch.randn(batch_size, seqlen_k, nheads_k, d, device=device, dtype=dtype)
    lengths_q = random_lengths(seqlen_q, batch_size, device)
    lengths_k = random_lengths(seqlen_k, batch_size, device)
    alibi_slopes = torch.rand(batch_size, nheads, device=device, dtype=torch.float32) * 0.3 if alibi else None
    out, lse, _ = flashtile.flash_attn_varlen_func(
        pack(q, lengths_q), pack(k, lengths_k), pack(v, lengths_k), cu_seqlens(lengths_q, device),
        cu_seqlens(lengths_k, device), max(lengths_q), max(lengths_k), 0.0, causal=causal, window_size=window_size,
        softcap=softcap, alibi_slopes=alibi_slopes, return_attn_probs=True)
    assert out.shape == (sum(lengths_q), nheads, d) and lse.shape == (nheads, sum(lengths_q))
    start = 0
    for b, (n_q, n_k) in enumerate(zip(lengths_q, lengths_k)):
        # Each sequence is its own problem: masks align to its own lengths.
        slopes = alibi_slopes[b:b + 1] if alibi else None
        flags = dict(causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=slopes)
        ref_lse = check_output(out[start:start + n_q][None], q[b:b + 1, :n_q], k[b:b + 1, :n_k], v[b:b + 1, :n_k],
                               factor=3.0 if softcap else 2.0, **flags)
        check_lse(lse[:, start:start + n_q][None], ref_lse)
        start += n_q
