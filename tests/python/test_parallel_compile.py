"""flashtile.parallel under torch.compile(fullgraph=True) on the CPU: ring and Ulysses attention over gloo with 2
ranks, the fp64 reference as the local op. A graph break is an error under fullgraph; each compiled graph must hold
the parallel forward op (so the call did not run its eager path), and the compiled call's output, lse and gradients
(q, k, v and the variant's f32 inputs, through AOTAutograd's backward graph) must equal the eager call's bitwise:
one plan from one set of checks. torch.library.opcheck checks the ops' registration (schema, fake shapes, autograd)
on every rank. The backend is aot_eager (dynamo and AOTAutograd without a C++ toolchain); the GPU test
(tests/python/gpu/test_parallel_gpu.py) compiles with inductor."""

import datetime
import traceback
import unittest

from gloo_ranks import run_ranks

try:
    import torch
    import torch.distributed as dist
except ImportError:  # the rest of tests/python runs without PyTorch
    torch = dist = None

import flashtile
from flashtile import dsl

try:  # torch.compile imports filelock and networkx
    import filelock  # noqa: F401
    import networkx  # noqa: F401
    CAN_COMPILE = torch is not None
except ImportError:
    CAN_COMPILE = False


def relative_bias():
    """A user variant whose score and mask read positions."""
    return (flashtile.Variant("relative_bias_compiled")
            .score(lambda s, c, p: s + 0.25 * dsl.to_float(c.kv - c.q_aligned()))
            .mask(lambda c, p: c.kv <= c.q_aligned() + 1))


# (mode, variant, layout, varlen, params, input maker, return_lse, deterministic)
def cases():
    def slopes(heads, keys, g):
        return {"slopes": (torch.rand(heads, generator=g, dtype=torch.float64) - 0.5).requires_grad_()}

    def sinks(heads, keys, g):
        return {"sinks": (torch.rand(heads, generator=g, dtype=torch.float64) - 0.5).requires_grad_()}

    def documents(heads, keys, g):
        return {"doc_start": torch.tensor([i - i % 3 for i in range(keys)], dtype=torch.int32)}

    none = lambda heads, keys, g: {}  # noqa: E731
    return [
        ("ring", "causal", "zigzag", False, None, none, True, False),
        ("ring", "alibi_causal", "zigzag", False, None, slopes, False, False),
        ("ring", "sliding_window", "contiguous", False, {"left": 3, "right": 2}, none, True, False),
        ("ring", "document_mask", "zigzag", True, None, documents, True, False),
        ("ring", "sinks_causal", "zigzag", False, None, sinks, False, True),
        ("ring", "user", "contiguous", False, None, none, False, False),
        ("ulysses", "causal", "zigzag", False, None, none, True, False),
        ("ulysses", "alibi", "contiguous", False, None, slopes, False, False),
        ("ulysses", "causal", "contiguous", True, None, none, True, False),
    ]


def problem(world, varlen, seed):
    g = torch.Generator().manual_seed(seed)
    heads_q, heads_kv, d, dv = 4, 2, 4, 3
    if varlen:
        cu = torch.tensor([0, 4 * world, 6 * world], dtype=torch.int32)
        lead = (6 * world,)
    else:
        cu, lead = None, (2, 4 * world)
    make = lambda h, n: torch.randn(lead + (h, n), generator=g, dtype=torch.float64)  # noqa: E731
    return make(heads_q, d), make(heads_kv, d), make(heads_kv, dv), make(heads_q, dv), cu, g


class Recorder:
    """A torch.compile backend: aot_eager, noting the ops of each graph dynamo hands it."""

    def __init__(self):
        self.targets = []

    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func

        self.targets += [str(node.target) for node in gm.graph.nodes if node.op == "call_function"]
        return aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g.forward))(gm, example_inputs)


def compare(case, world):
    """(ok, detail) for one case: compiled against eager."""
    from flashtile import parallel

    mode, name, layout, varlen, params, make_inputs, return_lse, deterministic = case
    variant = relative_bias() if name == "user" else name
    q, k, v, dout, cu, g = problem(world, varlen, 3)
    keys = k.shape[0] if varlen else k.shape[0] * k.shape[1]
    inputs = make_inputs(q.shape[-2], keys, g)
    attention = parallel.ring_attention if mode == "ring" else parallel.ulysses_attention

    def mine(t):
        return parallel.shard(t, layout=layout, cu_seqlens=cu)

    def run(fn):
        ql, kl, vl = (mine(t).requires_grad_() for t in (q, k, v))
        arrays = {n: t.detach().clone().requires_grad_() if t.is_floating_point() else t for n, t in inputs.items()}
        result = fn(ql, kl, vl, arrays)
        out, lse = result if return_lse else (result, None)
        leaves = [ql, kl, vl] + [t for t in arrays.values() if t.is_floating_point()]
        grads = torch.autograd.grad((out * mine(dout)).sum(), leaves)
        return [out, lse] + list(grads) if return_lse else [out] + list(grads)

    def call(ql, kl, vl, arrays):
        return attention(ql, kl, vl, variant, params=params, inputs=arrays, layout=layout, cu_seqlens=cu,
                         return_lse=return_lse, local="reference", deterministic=deterministic)

    eager = run(call)
    torch._dynamo.reset()
    backend = Recorder()
    compiled = run(torch.compile(call, backend=backend, fullgraph=True))
    if not any(t.startswith("flashtile_parallel.forward") for t in backend.targets):
        return False, f"the compiled graph holds no flashtile_parallel.forward: {backend.targets}"
    worst = max(float((a - b).detach().abs().max()) if a.numel() else 0.0 for a, b in zip(eager, compiled))
    same = all(torch.equal(a, b) for a, b in zip(eager, compiled))
    return same, f"largest difference compiled - eager: {worst:.3e} over {len(eager)} tensors"


def opcheck(world):
    """torch.library.opcheck of both ops (ring, Ulysses with lse, varlen ring with an f32 array)."""
    from flashtile import parallel
    from flashtile.parallel import _ops

    results = []
    for mode, varlen, name, arrays in (("ring", False, "causal", []), ("ulysses", False, "causal", []),
                                       ("ring", True, "alibi", ["slopes"])):
        q, k, v, dout, cu, g = problem(world, varlen, 5)
        local = [parallel.shard(t, cu_seqlens=cu) for t in (q, k, v)]  # the contiguous layout
        tensors = [torch.rand(4, generator=g, dtype=torch.float64) for _ in arrays]
        number = _ops._register(mode, name, None, tuple(arrays) or None, None, "contiguous", None, "reference",
                                False, None, False, True)
        args = (*[t.requires_grad_() for t in local], tensors, cu, number)
        torch.library.opcheck(torch.ops.flashtile_parallel.forward.default, args)
        # The backward op on the forward's results (out, lse and what Ulysses saves).
        with torch.no_grad():
            out, lse, saved = torch.ops.flashtile_parallel.forward(*args)
        dout = torch.randn(out.shape, generator=g, dtype=out.dtype)
        q, k, v = (t.detach() for t in local)
        torch.library.opcheck(torch.ops.flashtile_parallel.backward.default,
                              (dout, q, k, v, out, lse, saved, tensors, cu, number))
        results.append(((mode, varlen, name), True, "opcheck passed (forward and backward)"))
    return results


def _worker(rank, world, init_file, queue):
    results = []
    try:
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        for case in cases():
            try:
                results.append((case[:4], compare(case, world)))
            except Exception:  # noqa: BLE001 - reported to the parent, which fails the case
                results.append((case[:4], (False, traceback.format_exc())))
        try:
            results += [(("opcheck",) + c, (ok, detail)) for c, ok, detail in opcheck(world)]
        except Exception:  # noqa: BLE001
            results.append((("opcheck",), (False, traceback.format_exc())))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        results.append((("setup",), (False, traceback.format_exc())))
    queue.put((rank, results))


@unittest.skipIf(not CAN_COMPILE or not dist.is_available() or not dist.is_gloo_available(),
                 "PyTorch with torch.distributed (gloo) and torch.compile's filelock and networkx are not installed")
class CompiledOverGloo(unittest.TestCase):
    def test_two_ranks(self):
        reports = run_ranks(_worker, 2, timeout=600)
        self.assertEqual(sorted(reports), [0, 1])
        for rank, results in sorted(reports.items()):
            self.assertEqual(len(results), len(cases()) + 3, results)
            for case, (ok, detail) in results:
                with self.subTest(rank=rank, case=case):
                    self.assertTrue(ok, detail)


if __name__ == "__main__":
    unittest.main()
