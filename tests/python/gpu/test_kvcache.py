"""flash_attn_with_kvcache on the GPU against an fp32 PyTorch reference with FlashAttention's rule: contiguous and
paged caches (shuffled block tables), appended k/v (the cache contents checked after the call), MHA/GQA/MQA,
cache_seqlens 0/1/odd/full, causal and not, rotary embedding, cache_batch_idx, ALiBi/window/softcap, forced splits
and the returned LSE. Run on a GPU machine: bench/device/python-check.sh."""

import itertools

import pytest
import torch

import flashtile
from reference import check_lse, check_output

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BATCH, HEADS = 4, 8


def rotate(x, cos, sin, positions, interleaved):
    """x (Sx, H, D) rotated at `positions` (Sx,) in fp32 and rounded back to x's dtype, as flash-attn's reference."""
    rotary_dim = 2 * cos.shape[1]
    c, s = cos[positions].float()[:, None, :], sin[positions].float()[:, None, :]
    xf = x.float()
    head, tail = xf[..., :rotary_dim], xf[..., rotary_dim:]
    if interleaved:
        a, b = head[..., 0::2], head[..., 1::2]
        turned = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:
        a, b = head[..., :rotary_dim // 2], head[..., rotary_dim // 2:]
        turned = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    return torch.cat((turned, tail), dim=-1).to(x.dtype)


def rotary_tables(seqlen_ro, rotary_dim, dtype):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, device="cuda", dtype=torch.float32) / rotary_dim))
    angles = torch.outer(torch.arange(seqlen_ro, device="cuda", dtype=torch.float32), inv_freq)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def paged_copy(cache, page_size, generator):
    """A pool holding `cache` (B, S, H, D) in shuffled pages, its block table and a spare page per sequence."""
    batch, seqlen = cache.shape[:2]
    pages_per_seq = seqlen // page_size
    num_pages = batch * pages_per_seq + batch
    order = torch.randperm(num_pages, generator=generator)[:batch * pages_per_seq]
    table = order.view(batch, pages_per_seq).to(torch.int32).cuda()
    pool = torch.randn(num_pages, page_size, *cache.shape[2:], dtype=cache.dtype, device="cuda")
    pool[table.flatten().long()] = cache.view(batch * pages_per_seq, page_size, *cache.shape[2:])
    return pool, table


def gather_paged(pool, table):
    batch, pages = table.shape
    return pool[table.flatten().long()].view(batch, pages * pool.shape[1], *pool.shape[2:])


def run_case(dtype=torch.bfloat16, d=128, heads_kv=2, seqlen_q=1, seqlen_new=1, new_kv=True, causal=False,
             paged=False, page_size=64, capacity=512, lengths=None, rotary_dim=0, interleaved=True, batch_idx=False,
             window_size=(-1, -1), softcap=0.0, alibi=False, num_splits=0, int_seqlens=None):
    generator = torch.Generator().manual_seed(0)
    torch.random.manual_seed(0)
    seqlen_new = seqlen_new if new_kv else 0
    if lengths is None:  # cached keys a sequence: none, one, an odd count, a full cache
        lengths = [0, 1, 37, capacity - seqlen_new]
    batch = len(lengths)
    q = torch.randn(batch, seqlen_q, HEADS, d, device="cuda", dtype=dtype)
    cache_rows = batch + 2 if batch_idx else batch
    k_cache = torch.randn(cache_rows, capacity, heads_kv, d, device="cuda", dtype=dtype)
    v_cache = torch.randn(cache_rows, capacity, heads_kv, d, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_new, heads_kv, d, device="cuda", dtype=dtype) if new_kv else None
    v = torch.randn(batch, seqlen_new, heads_kv, d, device="cuda", dtype=dtype) if new_kv else None
    rows = torch.randperm(cache_rows, generator=generator)[:batch] if batch_idx else torch.arange(batch)
    cache_seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    if int_seqlens is not None:
        cache_seqlens = int_seqlens
        lengths = [int_seqlens] * batch
    cos = sin = None
    if rotary_dim:
        cos, sin = rotary_tables(capacity, rotary_dim, dtype)
    alibi_slopes = torch.rand(batch, HEADS, device="cuda", dtype=torch.float32) * 0.3 if alibi else None

    # The reference: each sequence's keys after the append (rotated where asked), its queries (rotated likewise).
    k_expected, v_expected = k_cache[rows.cuda()].clone(), v_cache[rows.cuda()].clone()
    q_ref = q.clone()
    local = window_size != (-1, -1)
    for b, held in enumerate(lengths):
        if new_kv:
            new_positions = torch.arange(held, held + seqlen_new, device="cuda")
            kb = rotate(k[b], cos, sin, new_positions, interleaved) if rotary_dim else k[b]
            k_expected[b, held:held + seqlen_new] = kb
            v_expected[b, held:held + seqlen_new] = v[b]
        if rotary_dim:
            offsets = torch.arange(seqlen_q, device="cuda") if (causal or local) else torch.zeros(
                seqlen_q, dtype=torch.long, device="cuda")
            q_ref[b] = rotate(q[b], cos, sin, held + offsets, interleaved)

    if paged:
        k_call, table = paged_copy(k_cache[:batch], page_size, generator)
        v_call = torch.randn_like(k_call)
        v_call[table.flatten().long()] = v_cache[:batch].view(-1, page_size, heads_kv, d)
    else:
        k_call, v_call, table = k_cache, v_cache, None
    out, lse = flashtile.flash_attn_with_kvcache(
        q, k_call, v_call, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=cache_seqlens,
        cache_batch_idx=rows.to(torch.int32).cuda() if batch_idx else None, block_table=table, causal=causal,
        window_size=window_size, softcap=softcap, rotary_interleaved=interleaved, alibi_slopes=alibi_slopes,
        num_splits=num_splits, return_softmax_lse=True)
    torch.cuda.synchronize()
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (batch, HEADS, seqlen_q) and lse.dtype == torch.float32

    # The cache holds the new keys (rotated) and values afterwards, and nothing else changed.
    if paged:
        k_after, v_after = gather_paged(k_call, table), gather_paged(v_call, table)
    else:
        k_after, v_after = k_call[rows.cuda()], v_call[rows.cuda()]
    if rotary_dim:
        tol = 2 ** -7 if dtype == torch.bfloat16 else 2 ** -10  # one rounding of the rotated value apart at most
        torch.testing.assert_close(k_after, k_expected, rtol=tol, atol=tol)
    else:
        assert torch.equal(k_after, k_expected), "k_cache after the call differs from the expected cache"
    assert torch.equal(v_after, v_expected), "v_cache after the call differs from the expected cache"

    flags = dict(causal=causal, window_size=window_size, softcap=softcap)
    for b, held in enumerate(lengths):
        keys = held + seqlen_new
        slopes = alibi_slopes[b:b + 1] if alibi else None
        ref_lse = check_output(out[b:b + 1], q_ref[b:b + 1], k_expected[b:b + 1, :keys], v_expected[b:b + 1, :keys],
                               factor=3.0 if softcap else 2.0, alibi_slopes=slopes, **flags)
        check_lse(lse[b:b + 1], ref_lse)


@pytest.mark.parametrize("dtype,paged,new_kv,causal,mha_type,seqlen_q", list(itertools.product(
    [torch.bfloat16, torch.float16], [False, True], [False, True], [False, True], ["mha", "gqa", "mqa"], [1, 4])))
def test_kvcache(dtype, paged, new_kv, causal, mha_type, seqlen_q):
    heads_kv = {"mha": HEADS, "gqa": 2, "mqa": 1}[mha_type]
    run_case(dtype=dtype, paged=paged, new_kv=new_kv, causal=causal, heads_kv=heads_kv, seqlen_q=seqlen_q,
             seqlen_new=seqlen_q)


@pytest.mark.parametrize("d", [64, 256])
@pytest.mark.parametrize("paged,page_size", [(False, 0), (True, 16), (True, 256)])
def test_head_dims_and_page_sizes(d, paged, page_size):
    run_case(d=d, paged=paged, page_size=page_size or 64, causal=True, seqlen_q=2, seqlen_new=2)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rotary_dim", [64, 128])
def test_rotary(interleaved, causal, rotary_dim):
    run_case(rotary_dim=rotary_dim, interleaved=interleaved, causal=causal, seqlen_q=3, seqlen_new=3, paged=causal)


def test_cache_batch_idx():
    run_case(batch_idx=True, causal=True, seqlen_q=2, seqlen_new=2)


def test_int_cache_seqlens():
    run_case(int_seqlens=100, causal=True, seqlen_q=4, seqlen_new=4, paged=True)


@pytest.mark.parametrize("flags", [dict(window_size=(48, 0)), dict(window_size=(32, -1), causal=True),
                                   dict(softcap=30.0), dict(alibi=True, causal=True)],
                         ids=["window", "window_causal", "softcap", "alibi"])
def test_variants(flags):
    run_case(seqlen_q=4, seqlen_new=4, **flags)


@pytest.mark.parametrize("num_splits", [1, 3, 16])
def test_forced_splits(num_splits):
    run_case(num_splits=num_splits, lengths=[0, 1, 1001, 2047], capacity=2048, causal=True, heads_kv=1)


def test_long_cache_split_by_the_heuristic():
    run_case(lengths=[32767], capacity=32768, heads_kv=2, paged=True, page_size=256)


def decode_inputs(seqlen_q=1, capacity=1024):
    torch.random.manual_seed(0)
    q = torch.randn(BATCH, seqlen_q, HEADS, 128, device="cuda", dtype=torch.bfloat16)
    k_cache = torch.randn(BATCH, capacity, 2, 128, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    k, v = (torch.randn(BATCH, seqlen_q, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    cache_seqlens = torch.tensor([5, 300, 0, capacity - seqlen_q], dtype=torch.int32, device="cuda")
    return q, k_cache, v_cache, k, v, cache_seqlens


def test_compile_fullgraph():
    q, k_cache, v_cache, k, v, cache_seqlens = decode_inputs(seqlen_q=2)

    def f(q, k_cache, v_cache, k, v, cache_seqlens):
        return flashtile.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, causal=True,
                                                 return_softmax_lse=True)

    eager_k, eager_v = k_cache.clone(), v_cache.clone()
    expected, expected_lse = f(q, eager_k, eager_v, k, v, cache_seqlens)
    torch._dynamo.reset()
    out, lse = torch.compile(f, fullgraph=True)(q, k_cache, v_cache, k, v, cache_seqlens)  # a graph break fails
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    torch.testing.assert_close(lse, expected_lse, atol=0, rtol=0)
    assert torch.equal(k_cache, eager_k) and torch.equal(v_cache, eager_v), "the compiled call must append in place"


def test_cuda_graph_capture_and_replay():
    q, k_cache, v_cache, k, v, cache_seqlens = decode_inputs()
    start_k, start_v = k_cache.clone(), v_cache.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up: compiles and loads the kernels
        flashtile.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, num_splits=1)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing call inside raises
    try:
        with torch.cuda.graph(graph):
            static_out = flashtile.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                                                           num_splits=1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for step in range(2):  # a decode step: new query, key and value at the next position
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        cache_seqlens.copy_(torch.tensor([6 + step, 301 + step, 1 + step, 1020 + step], dtype=torch.int32))
        k_ref, v_ref = k_cache.clone(), v_cache.clone()
        graph.replay()
        torch.cuda.synchronize()
        expected = flashtile.flash_attn_with_kvcache(q, k_ref, v_ref, k, v, cache_seqlens=cache_seqlens, num_splits=1)
        torch.testing.assert_close(static_out, expected, atol=0, rtol=0)
        assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
    assert not torch.equal(k_cache, start_k), "the replays must have appended keys"


def test_opcheck():
    q, k_cache, v_cache, k, v, cache_seqlens = decode_inputs(seqlen_q=2)
    torch.library.opcheck(torch.ops.flashtile.fwd_kvcache.default,
                          (q, k_cache, v_cache, k, v, None, None, cache_seqlens, -1, None, None, 0.125, "causal", [],
                           [], True, 0))
