"""flashtile.parallel and flashtile.flash_attn_compat on a GPU machine (pytest; skipped without CUDA).

1. Ring and Ulysses attention with 2 and 4 ranks sharing one GPU over gloo (flashtile's kernels as the local op)
   against one GPU's flashtile, by FlashAttention's error rule, forward and backward: with ref the fp64 reference
   of the whole problem, max|parallel - ref| <= 2 * max|one GPU - ref| + atol (3x for softcap and gradients); some
   of them also under torch.compile(fullgraph=True).
2. ring-flash-attn itself (when installed: pip install ring-flash-attn) through flash_attn_compat.install(), over
   NCCL on every GPU of the machine (one rank a GPU, one rank where there is one GPU), against flashtile's
   flash_attn_func on the whole problem by the same rule.
"""

import importlib.util
import os
import sys
import traceback

import pytest
import torch

# The multi-process helpers of tests/python (run_ranks, failures, import_ring_flash_attn), shared with its CPU tests.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gloo_ranks import failures, import_ring_flash_attn, run_ranks  # noqa: E402

ATOL = 1e-4
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _rule(got, lowp, ref, factor):
    """FlashAttention's rule; returns (ok, detail)."""
    err = (got.double() - ref).abs().max().item()
    base = (lowp.double() - ref).abs().max().item()
    return err <= factor * base + ATOL, f"max|got - ref| {err:.3e}, bound {factor} * {base:.3e} + {ATOL}"


INPUTS = {"sinks_causal": lambda h, n: {"sinks": torch.linspace(-1.0, 1.0, h)},
          "document_mask": lambda h, n: {"doc_start": torch.tensor([(i // 96) * 96 for i in range(n)],
                                                                    dtype=torch.int32)}}
PARAMS = {"softcap_causal": {"cap": 8.0}, "sliding_window": {"left": 64, "right": 0}}


def _parallel_case(mode, variant, layout, seed=0, compiled=False):
    """On this rank: (name, ok, detail) for out, dq, dk, dv against one GPU and the fp64 reference; `compiled`: the
    call under torch.compile(fullgraph=True) (inductor; a graph break fails)."""
    import torch.distributed as dist

    import flashtile
    from flashtile import parallel

    g = torch.Generator().manual_seed(seed)
    batch, seqlen, heads_q, heads_kv, d = 1, 256, 8, 4, 64  # heads divide 2 and 4 ranks (Ulysses)
    q, k, v = (torch.randn(batch, seqlen, h, d, generator=g) for h in (heads_q, heads_kv, heads_kv))
    dout = torch.randn(batch, seqlen, heads_q, d, generator=g)
    inputs = INPUTS.get(variant, lambda h, n: {})(heads_q, batch * seqlen)
    params = PARAMS.get(variant)
    factor = 3.0 if "softcap" in variant else 2.0
    # fp64 reference of the whole problem, on the CPU.
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref_inputs = {n: t.double() if t.is_floating_point() else t for n, t in inputs.items()}
    ref = flashtile.reference_attention(q64, k64, v64, variant, params=params, inputs=ref_inputs)
    ref_grads = torch.autograd.grad((ref * dout.double()).sum(), (q64, k64, v64))
    # One GPU.
    dev = torch.device("cuda", 0)
    on_gpu = {n: t.to(dev) for n, t in inputs.items()}
    qg, kg, vg = (t.to(dev, torch.bfloat16).requires_grad_() for t in (q, k, v))
    one = flashtile.attention(qg, kg, vg, variant, params=params, inputs=on_gpu)
    one_grads = torch.autograd.grad((one.float() * dout.to(dev)).sum(), (qg, kg, vg))
    # This rank's rows, in parallel.
    mine = lambda t, dim=1: parallel.shard(t, layout=layout, dim=dim)  # noqa: E731
    ql, kl, vl = (mine(t.detach()).requires_grad_() for t in (qg, kg, vg))
    fn = parallel.ring_attention if mode == "ring" else parallel.ulysses_attention
    call = lambda ql, kl, vl: fn(ql, kl, vl, variant, params=params, inputs=on_gpu, layout=layout)  # noqa: E731
    if compiled:
        torch._dynamo.reset()
        call = torch.compile(call, fullgraph=True)
    out = call(ql, kl, vl)
    grads = torch.autograd.grad((out.float() * mine(dout.to(dev))).sum(), (ql, kl, vl))
    results = [("out", *_rule(out.cpu(), mine(one.detach()).cpu(), mine(ref.detach()), factor))]
    for name, got, low, want in zip(("dq", "dk", "dv"), grads, one_grads, ref_grads):
        results.append((name, *_rule(got.cpu(), mine(low).cpu(), mine(want), max(factor, 3.0))))
    dist.barrier()
    return results


PARALLEL_CASES = [("ring", v, layout) for v in ("none", "causal", "softcap_causal", "sinks_causal")
                  for layout in ("contiguous", "zigzag")] + \
                 [("ulysses", v, "contiguous") for v in ("causal", "sliding_window", "document_mask")]


def _parallel_worker(rank, world, init_file, queue, cases):
    import torch.distributed as dist

    out = []
    try:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
        torch.cuda.set_device(0)
        for case in cases:
            try:
                out.append((case, _parallel_case(*case)))
            except Exception:  # noqa: BLE001
                out.append((case, traceback.format_exc()))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        out.append(("setup", traceback.format_exc()))
    queue.put((rank, out))


@needs_cuda
@pytest.mark.parametrize("world", [2, 4])
def test_ranks_sharing_one_gpu_match_one_gpu(world):
    reports = run_ranks(_parallel_worker, world, (PARALLEL_CASES,), timeout=900)
    problems = failures(reports)
    assert not problems, "\n".join(problems)


# Under torch.compile: one case a mode, and a variant whose blocks need position offsets.
COMPILED_CASES = [("ring", "causal", "zigzag", 0, True), ("ring", "sliding_window", "contiguous", 0, True),
                  ("ulysses", "causal", "contiguous", 0, True)]


@needs_cuda
def test_compiled_ranks_sharing_one_gpu_match_one_gpu():
    reports = run_ranks(_parallel_worker, 2, (COMPILED_CASES,), timeout=900)
    problems = failures(reports)
    assert not problems, "\n".join(problems)


@needs_cuda
def test_what_needs_offsets_is_refused_on_the_kernels():
    from flashtile.parallel import Kernel
    from flashtile.parallel._hooks import Hooks
    from flashtile.interface import resolve_variant

    for name in ("sliding_window", "alibi", "document_mask"):
        with pytest.raises(NotImplementedError, match=f"variant '{name}' cannot run ring attention"):
            Kernel(offsets=False).check("ring", Hooks(resolve_variant(name).decl), 2, True)


def _ring_flash_attn_worker(rank, world, init_file, queue, seed):
    import torch.distributed as dist

    out = []
    try:
        from flashtile import flash_attn_compat

        flash_attn_compat.install(force=True)  # before ring_flash_attn imports flash_attn
        ring_flash_attn = import_ring_flash_attn()
        from ring_flash_attn import ring_flash_attn as ring_module

        import flashtile
        from reference import attention_ref

        assert ring_module._flash_attn_forward is flash_attn_compat._flash_attn_forward
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank, world_size=world)
        dev = torch.device("cuda", rank)
        g = torch.Generator().manual_seed(seed)
        batch, seqlen, heads, d = 1, 128 * world * 2, 4, 128
        q, k, v, dout = (torch.randn(batch, seqlen, heads, d, generator=g) for _ in range(4))
        for fn_name, causal, chunks in (("ring_flash_attn_func", False, world), ("ring_flash_attn_func", True, world),
                                        ("zigzag_ring_flash_attn_func", True, 2 * world)):
            ids = [rank, 2 * world - 1 - rank] if chunks == 2 * world else [rank]
            mine = lambda t: torch.cat([t.chunk(chunks, dim=1)[i] for i in ids], dim=1)  # noqa: E731
            qa, ka, va = (t.to(dev, torch.bfloat16).requires_grad_() for t in (q, k, v))
            whole = flashtile.flash_attn_func(qa, ka, va, causal=causal)
            whole_grads = torch.autograd.grad((whole.float() * dout.to(dev)).sum(), (qa, ka, va))
            qr, kr, vr = (t.to(dev).requires_grad_() for t in (q, k, v))
            ref = attention_ref(qr, kr, vr, causal=causal)[0]
            ref_grads = torch.autograd.grad((ref * dout.to(dev)).sum(), (qr, kr, vr))
            ql, kl, vl = (mine(t.detach()).requires_grad_() for t in (qa, ka, va))
            got = getattr(ring_flash_attn, fn_name)(ql, kl, vl, causal=causal)
            grads = torch.autograd.grad((got.float() * mine(dout.to(dev))).sum(), (ql, kl, vl))
            results = [("out", *_rule(got, mine(whole.detach()), mine(ref.detach()).double(), 2.0))]
            for name, a, b, c in zip(("dq", "dk", "dv"), grads, whole_grads, ref_grads):
                results.append((name, *_rule(a, mine(b), mine(c).double(), 3.0)))
            out.append(((fn_name, causal), results))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        out.append(("setup", traceback.format_exc()))
    queue.put((rank, out))


@needs_cuda
@pytest.mark.skipif(importlib.util.find_spec("ring_flash_attn") is None,
                    reason="ring-flash-attn is not installed (pip install ring-flash-attn)")
def test_ring_flash_attn_runs_on_flashtile():
    world = min(torch.cuda.device_count(), 4)
    reports = run_ranks(_ring_flash_attn_worker, world, (0,), timeout=900)
    problems = failures(reports)
    assert not problems, "\n".join(problems)
