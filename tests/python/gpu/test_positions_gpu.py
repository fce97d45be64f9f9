"""Blocks of a larger problem on the GPU kernels (pytest; skipped without CUDA): flashtile.attention with position
offsets (q_offset, k_offset, head_offset, the larger problem's sizes; varlen: per sequence) against
flashtile.reference_attention with the same offsets, forward and backward, by FlashAttention's error rule as the
existing GPU tests use it: with ref the fp64 reference on the bf16 inputs and ref_lowp the same attention computed in
bf16 by PyTorch (scores, softmax and P in bf16, as tests/python/gpu/reference.py's upcast=False), max|kernel - ref| <=
2 max|ref_lowp - ref| + atol (3x for gradients).

It validates the path from the keywords to the kernels' FlashtilePositions (the runtime, the C ABI, the torch ops) for
causal, sliding_window, alibi and document_mask, and the backward's three kernels receiving the same positions.
test_dropped_offsets_are_caught is the negative control: the same comparison fails when a block runs at local
positions. test_ring_with_kernel_offsets_runs_what_needs_them runs ring attention over gloo with
Kernel(offsets=True) for the variants the default refuses (docs/parallel.md).
"""

import os
import sys
import traceback

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gloo_ranks import failures, run_ranks  # noqa: E402

ATOL = 1e-4
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# The whole problem: 2 sequences of 512 queries and keys, 8 query heads over 4 K/V heads, head dim 64.
BATCH, SEQLEN, HEADS_Q, HEADS_KV, D = 2, 512, 8, 4, 64
DOC = 96  # document_mask: documents of 96 keys
RING_SEQLEN = 256  # the ring test's whole problem (2 to 4 ranks' shards of it)


def _inputs(variant, device, seqlen=SEQLEN):
    """The whole problem's input arrays (a block's hooks read them at global positions)."""
    if variant == "alibi":
        return {"slopes": torch.linspace(0.05, 0.4, HEADS_Q, device=device)}
    if variant == "document_mask":
        starts = torch.tensor([(i // DOC) * DOC for i in range(seqlen)], dtype=torch.int32)
        return {"doc_start": starts.repeat(BATCH, 1).to(device)}
    return {}


def _local_inputs(variant, inputs, keys, heads):
    """The arrays of a block run at local positions (the negative control): its heads' slopes, its keys' starts."""
    if variant == "alibi":
        return {"slopes": inputs["slopes"][heads[0]:heads[1]].contiguous()}
    if variant == "document_mask":
        return {"doc_start": inputs["doc_start"][:, keys[0]:keys[1]].contiguous()}
    return inputs


PARAMS = {"sliding_window": {"left": 96, "right": 32}}
VARIANTS = ("causal", "sliding_window", "alibi", "document_mask")


def _rule(got, lowp, ref, factor):
    err = (got.double() - ref).abs().max().item()
    base = (lowp.double() - ref).abs().max().item()
    return err <= factor * base + ATOL, f"max|got - ref| {err:.3e}, bound {factor} * {base:.3e} + {ATOL}"


def _whole(seed=0, seqlen=SEQLEN):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(BATCH, seqlen, HEADS_Q, D, generator=g)
    k, v = (torch.randn(BATCH, seqlen, HEADS_KV, D, generator=g) for _ in range(2))
    dout = torch.randn(BATCH, seqlen, HEADS_Q, D, generator=g)
    return q, k, v, dout


# (rows, keys, heads): a block of query rows, key rows and query heads (K/V heads follow, in whole groups).
BLOCKS = [((128, 256), (0, 384), (0, 8)),     # queries in the middle, keys from the start
          ((384, 512), (128, 512), (4, 8)),   # last rows, keys past 0, the second half of the heads
          ((0, 128), (256, 512), (0, 4))]     # a causal block above the diagonal: every row sees no key


def _lowp(q, k, v, dout, variant, place, inputs, batch_index=None):
    """The block's attention computed in bf16 by PyTorch at the block's global positions (flash-attn's low-precision
    reference: q, k, v bf16 on the GPU, scores and softmax in bf16): (out, dq, dk, dv). q (B, Sq, Hq, D) of the
    block; `batch_index` names the whole problem's sequence of a one-sequence block (varlen), else 0..B-1."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    rows, keys, heads = q.shape[1], k.shape[1], q.shape[2]
    group = heads // k.shape[2]
    i = (place.get("q_offset", 0) + torch.arange(rows, device=q.device))[:, None]
    j = (place.get("k_offset", 0) + torch.arange(keys, device=q.device))[None, :]
    h = place.get("head_offset", 0) + torch.arange(heads, device=q.device)
    kk, vv = k.repeat_interleave(group, dim=2), v.repeat_interleave(group, dim=2)
    scores = torch.einsum("bthd,bshd->bhts", q, kk * (q.shape[-1] ** -0.5))
    masked = torch.zeros(q.shape[0], 1, rows, keys, dtype=torch.bool, device=q.device)
    if variant == "causal":
        masked |= (j > i)[None, None]
    elif variant == "sliding_window":
        masked |= ((j < i - PARAMS[variant]["left"]) | (j > i + PARAMS[variant]["right"]))[None, None]
    elif variant == "alibi":
        scores = scores - (inputs["slopes"][h][:, None, None] * (i - j).abs()).to(scores.dtype)[None]
    elif variant == "document_mask":
        b = torch.arange(q.shape[0]) if batch_index is None else torch.tensor([batch_index])
        start = inputs["doc_start"].view(-1, SEQLEN)[b][:, i[:, 0]]  # (B, rows): each row's document start
        masked |= ((j[None] > i[None]) | (j[None] < start[:, :, None]))[:, None]
    scores = scores.masked_fill(masked, float("-inf"))
    attn = torch.softmax(scores, dim=-1).masked_fill(masked.all(dim=-1, keepdim=True), 0.0)
    out = torch.einsum("bhts,bshd->bthd", attn.to(v.dtype), vv)
    grads = torch.autograd.grad((out.float() * dout).sum(), (q, k, v))
    return (out.detach(), *grads)


def _reference(q, k, v, dout, variant, place, inputs, **varlen):
    """The fp64 reference on the bf16 inputs, with the block's placement: (out, lse, dq, dk, dv) on the CPU."""
    import flashtile

    q64, k64, v64 = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    cpu_inputs = {n: t.cpu().double() if t.is_floating_point() else t.cpu() for n, t in inputs.items()}
    out, lse = flashtile.reference_attention(q64, k64, v64, variant, params=PARAMS.get(variant), inputs=cpu_inputs,
                                             return_lse=True, **varlen, **place)
    grads = torch.autograd.grad((out * dout.cpu().double()).sum(), (q64, k64, v64))
    return (out.detach(), lse, *grads)


def _compare(kernel, lowp, ref):
    """(name, ok, detail) of out, dq, dk, dv by the rule, and of lse (-inf rows alike, finite ones within 1e-3)."""
    results = []
    for n, name in enumerate(("out", "dq", "dk", "dv")):
        results.append((name, *_rule(kernel[n].cpu(), lowp[n].cpu(), ref[n if n == 0 else n + 1],
                                     2.0 if n == 0 else 3.0)))
    lse, ref_lse = kernel[4].cpu().double(), ref[1]
    finite = torch.isfinite(ref_lse)
    same_inf = bool((torch.isfinite(lse) == finite).all())
    err = (lse[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    largest = ref_lse[finite].abs().max().item() if finite.any() else 0.0  # a block above the diagonal: none
    results.append(("lse", same_inf and err <= 1e-3 * max(1.0, largest),
                    f"max|lse - ref| {err:.3e}, -inf rows alike: {same_inf}"))
    return results


def _block_case(variant, rows, keys, heads, drop_offsets=False):
    """(name, ok, detail) for the kernels' out, dq, dk, dv and lse of one block of the whole problem."""
    import flashtile

    dev = torch.device("cuda", 0)
    q, k, v, dout = (t.to(dev, torch.bfloat16) for t in _whole())
    group = HEADS_Q // HEADS_KV
    (r0, r1), (k0, k1), (h0, h1) = rows, keys, heads
    qb, kb, vb = (t.contiguous() for t in (q[:, r0:r1, h0:h1], k[:, k0:k1, h0 // group:h1 // group],
                                           v[:, k0:k1, h0 // group:h1 // group]))
    db = dout[:, r0:r1, h0:h1].float()
    inputs = _inputs(variant, dev)
    place = dict(q_offset=r0, k_offset=k0, head_offset=h0, seqlen_q_global=SEQLEN, seqlen_k_global=SEQLEN,
                 heads_q_global=HEADS_Q, heads_kv_global=HEADS_KV)
    qg, kg, vg = (t.detach().requires_grad_() for t in (qb, kb, vb))
    out, lse = flashtile.attention(qg, kg, vg, variant, params=PARAMS.get(variant), return_lse=True,
                                   **(dict(inputs=_local_inputs(variant, inputs, keys, heads)) if drop_offsets
                                      else dict(inputs=inputs, **place)))
    grads = torch.autograd.grad((out.float() * db).sum(), (qg, kg, vg))
    return _compare((out, *grads, lse), _lowp(qb, kb, vb, db, variant, place, inputs),
                    _reference(qb, kb, vb, db, variant, place, inputs))


CASES = [(v, *block) for v in VARIANTS for block in BLOCKS]


@needs_cuda
@pytest.mark.parametrize("variant,rows,keys,heads", CASES)
def test_a_block_with_offsets_matches_the_reference_at_the_same_offsets(variant, rows, keys, heads):
    problems = [f"{name}: {detail}" for name, ok, detail in _block_case(variant, rows, keys, heads) if not ok]
    assert not problems, f"{variant} rows {rows} keys {keys} heads {heads}: " + "; ".join(problems)


@needs_cuda
def test_dropped_offsets_are_caught():
    # Negative control: the same comparison fails when the kernels run the block at local positions.
    for variant in ("causal", "alibi"):
        # Rows 128..255 against keys 0..383: at local positions the bottom-right alignment moves the diagonal, and
        # the heads 4..7 read other ALiBi slopes.
        results = _block_case(variant, (128, 256), (0, 384), (4, 8), drop_offsets=True)
        assert not all(ok for _, ok, _ in results), f"{variant}: the block without offsets passed: {results}"


@needs_cuda
@pytest.mark.parametrize("variant", ["causal", "sliding_window"])
def test_varlen_blocks_place_each_sequence(variant):
    import flashtile

    dev = torch.device("cuda", 0)
    g = torch.Generator().manual_seed(1)
    whole_lengths, rows, keys = [300, 200], [(100, 300), (0, 120)], [(0, 300), (40, 200)]
    cu_global = torch.tensor([0, 300, 500], dtype=torch.int32)
    seqs = [[torch.randn(n, h, D, generator=g).to(dev, torch.bfloat16) for h in (HEADS_Q, HEADS_KV, HEADS_KV, HEADS_Q)]
            for n in whole_lengths]
    parts = [(qs[r0:r1], ks[k0:k1], vs[k0:k1], ds[r0:r1].float())
             for (qs, ks, vs, ds), (r0, r1), (k0, k1) in zip(seqs, rows, keys)]
    q, k, v, dout = (torch.cat([p[n] for p in parts]) for n in range(4))
    cu_q = torch.tensor([0, 200, 320], dtype=torch.int32)
    cu_k = torch.tensor([0, 300, 460], dtype=torch.int32)
    q_offsets, k_offsets = [r[0] for r in rows], [kk[0] for kk in keys]
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    out, lse = flashtile.attention(qg, kg, vg, variant, params=PARAMS.get(variant), cu_seqlens_q=cu_q.to(dev),
                                   cu_seqlens_k=cu_k.to(dev), max_seqlen_q=200, max_seqlen_k=300, return_lse=True,
                                   q_offset=torch.tensor(q_offsets, dtype=torch.int32), k_offset=k_offsets,
                                   cu_seqlens_q_global=cu_global, cu_seqlens_k_global=cu_global)
    grads = torch.autograd.grad((out.float() * dout).sum(), (qg, kg, vg))
    # The low-precision reference sequence by sequence (each a dense block of its own sequence).
    lowp = [_lowp(p[0][None], p[1][None], p[2][None], p[3][None], variant,
                  dict(q_offset=q_offsets[b], k_offset=k_offsets[b]), {}, b) for b, p in enumerate(parts)]
    lowp = [torch.cat([x[n][0] for x in lowp]) for n in range(4)]
    ref = _reference(q, k, v, dout, variant, dict(q_offset=q_offsets, k_offset=k_offsets,
                                                  cu_seqlens_q_global=cu_global, cu_seqlens_k_global=cu_global),
                     {}, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    problems = [f"{name}: {detail}" for name, ok, detail in _compare((out, *grads, lse), lowp, ref) if not ok]
    assert not problems, f"varlen {variant}: " + "; ".join(problems)


def _ring_worker(rank, world, init_file, queue, cases):
    import torch.distributed as dist

    import flashtile
    from flashtile import parallel

    out = []
    try:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        for variant, layout in cases:
            try:
                # 256 rows: the fp64 reference of the whole problem stays within FLASHTILE_REFERENCE_MAX_WORK.
                q, k, v, dout = _whole(seqlen=RING_SEQLEN)
                inputs = _inputs(variant, dev, RING_SEQLEN)
                params = PARAMS.get(variant)
                ref_inputs = {n: t.cpu().double() if t.is_floating_point() else t.cpu() for n, t in inputs.items()}
                q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
                ref = flashtile.reference_attention(q64, k64, v64, variant, params=params, inputs=ref_inputs)
                ref_grads = torch.autograd.grad((ref * dout.double()).sum(), (q64, k64, v64))
                qg, kg, vg = (t.to(dev, torch.bfloat16).requires_grad_() for t in (q, k, v))
                one = flashtile.attention(qg, kg, vg, variant, params=params, inputs=inputs)
                one_grads = torch.autograd.grad((one.float() * dout.to(dev)).sum(), (qg, kg, vg))
                mine = lambda t: parallel.shard(t, layout=layout, dim=1)  # noqa: E731
                ql, kl, vl = (mine(t.detach()).requires_grad_() for t in (qg, kg, vg))
                got = parallel.ring_attention(ql, kl, vl, variant, params=params, inputs=inputs, layout=layout,
                                              local=parallel.Kernel(offsets=True))
                grads = torch.autograd.grad((got.float() * mine(dout.to(dev))).sum(), (ql, kl, vl))
                results = [("out", *_rule(got.cpu(), mine(one.detach()).cpu(), mine(ref.detach()), 2.0))]
                for name, a, b, c in zip(("dq", "dk", "dv"), grads, one_grads, ref_grads):
                    results.append((name, *_rule(a.cpu(), mine(b).cpu(), mine(c), 3.0)))
                out.append(((variant, layout), results))
            except Exception:  # noqa: BLE001
                out.append(((variant, layout), traceback.format_exc()))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        out.append(("setup", traceback.format_exc()))
    queue.put((rank, out))


@needs_cuda
@pytest.mark.parametrize("world", [2, 4])
def test_ring_with_kernel_offsets_runs_what_needs_them(world):
    cases = [(v, layout) for v in ("sliding_window", "alibi", "document_mask") for layout in ("contiguous", "zigzag")]
    problems = failures(run_ranks(_ring_worker, world, (cases,), timeout=900))
    assert not problems, "\n".join(problems)
