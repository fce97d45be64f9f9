"""flashtile.parallel on CPU: ring (contiguous and zigzag) and Ulysses attention over gloo with 2, 3 and 4 processes,
the fp64 reference as the local op. Every rank's output, lse and gradients (of q, k, v and the variant's f32
inputs) must equal one process's reference attention of the whole problem, for every built-in variant, user
variants that read positions and heads, GQA and varlen. A local op with a planted offset bug must fail the same
comparison, and the GPU kernels' local op must refuse, by name, what it cannot place without position offsets."""

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

TOLERANCE = 1e-9  # fp64 throughout: only the order of additions differs from one process's reference
BATCH, HEAD_DIM, HEAD_DIM_V = 2, 4, 3

PARAMS = {"sliding_window": {"left": 3, "right": 2}, "sliding_window_causal": {"left": 3},
          "softcap": {"cap": 2.0}, "softcap_causal": {"cap": 2.0}}


def relative_lookahead():
    """A user variant reading positions everywhere: a relative bias, a mask two keys past the diagonal, a range."""
    return (flashtile.Variant("relative_lookahead")
            .score(lambda s, c, p: s + 0.25 * dsl.to_float(c.kv - c.q_aligned()))
            .mask(lambda c, p: c.kv <= c.q_aligned() + 2)
            .kv_range(lambda q, p: dsl.Range.up_to(q.last_aligned() + 3)))


def head_band():
    """A user variant whose mask and range read the head: head h sees the 2(h + 1) keys before the diagonal."""
    return (flashtile.Variant("head_band")
            .mask(lambda c, p: (c.kv <= c.q_aligned()) & (c.kv >= c.q_aligned() - (c.h + 1) * 2))
            .kv_range(lambda q, p: dsl.Range(q.first_aligned() - (q.h + 1) * 2, q.last_aligned() + 1)))


USER_VARIANTS = {"relative_lookahead": relative_lookahead, "head_band": head_band}


def variant_of(name):
    return USER_VARIANTS[name]() if name in USER_VARIANTS else name


def inputs_of(name, heads_q, seqlens, generator):
    """The whole problem's arrays of a variant (f32 ones float64 and requiring grad)."""
    def floats(n):
        return (torch.rand(n, generator=generator, dtype=torch.float64) - 0.5).requires_grad_()

    if name == "alibi_per_batch":
        return {"slopes": floats(len(seqlens) * heads_q)}
    if name.startswith("alibi"):
        return {"slopes": floats(heads_q)}
    if name.startswith("sinks"):
        return {"sinks": floats(heads_q)}
    if name == "document_mask":  # documents of 1 to 5 tokens, each sequence's own
        starts = []
        for n in seqlens:
            start = 0
            while start < n:
                length = int(torch.randint(1, 6, (1,), generator=generator))
                starts += [start] * min(length, n - start)
                start += length
        return {"doc_start": torch.tensor(starts, dtype=torch.int32)}
    return {}


def problem(world, varlen, heads, seed):
    g = torch.Generator().manual_seed(seed)
    heads_q, heads_kv = heads
    if varlen:
        seqlens = [4 * world, 2 * world]
        cu = torch.tensor([0, seqlens[0], sum(seqlens)], dtype=torch.int32)
        lead = (sum(seqlens),)
    else:
        seqlens, cu = [4 * world] * BATCH, None
        lead = (BATCH, 4 * world)
    q = torch.randn(lead + (heads_q, HEAD_DIM), generator=g, dtype=torch.float64)
    k = torch.randn(lead + (heads_kv, HEAD_DIM), generator=g, dtype=torch.float64)
    v = torch.randn(lead + (heads_kv, HEAD_DIM_V), generator=g, dtype=torch.float64)
    dout = torch.randn(lead + (heads_q, HEAD_DIM_V), generator=g, dtype=torch.float64)
    return q, k, v, dout, cu, seqlens, g


def worst(a, b):
    both_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    return float(torch.where(both_inf, torch.zeros_like(a), (a - b).abs()).max()) if a.numel() else 0.0


def compare(mode, name, layout, varlen, heads, local=None, seed=0, deterministic=False):
    """The largest difference between this rank's results and its rows of one process's reference."""
    from flashtile import parallel

    world = dist.get_world_size()
    q, k, v, dout, cu, seqlens, g = problem(world, varlen, heads, seed)
    variant, params = variant_of(name), PARAMS.get(name)
    inputs = inputs_of(name, heads[0], seqlens, g)
    for t in (q, k, v):
        t.requires_grad_()
    leaves = [q, k, v] + [t for t in inputs.values() if t.is_floating_point()]
    out, lse = flashtile.reference_attention(q, k, v, variant, params=params, inputs=inputs, return_lse=True,
                                             cu_seqlens_q=cu, cu_seqlens_k=cu)
    expected = torch.autograd.grad((out * dout).sum(), leaves)

    def mine(t, dim=None):
        return parallel.shard(t.detach(), layout=layout, cu_seqlens=cu, dim=dim)

    ql, kl, vl = (mine(t).requires_grad_() for t in (q, k, v))
    local_inputs = {n: t.detach().clone().requires_grad_() if t.is_floating_point() else t for n, t in inputs.items()}
    attention = parallel.ring_attention if mode == "ring" else parallel.ulysses_attention
    out_l, lse_l = attention(ql, kl, vl, variant, params=params, inputs=local_inputs, layout=layout, cu_seqlens=cu,
                             return_lse=True, local=local or "reference", deterministic=deterministic)
    got = torch.autograd.grad((out_l * mine(dout)).sum(), [ql, kl, vl] + [t for t in local_inputs.values()
                                                                         if t.is_floating_point()])
    errors = {"out": worst(out_l, mine(out)), "lse": worst(lse_l, mine(lse, 1 if varlen else 2))}
    for what, a, b in zip(("dq", "dk", "dv"), got[:3], expected[:3]):
        errors[what] = worst(a, mine(b))
    for (n, _), a, b in zip([(n, t) for n, t in inputs.items() if t.is_floating_point()], got[3:], expected[3:]):
        errors["d" + n] = worst(a, b)
    return max(errors.values()), errors, got


# What each world size runs: (mode, variant, layout, varlen, (heads_q, heads_kv)).
def cases(world):
    builtins = flashtile.builtin_variants()
    user = list(USER_VARIANTS)
    heads = (4, 2) if world == 2 else (8, 4)
    if world == 2:
        out = [("ring", n, layout, False, heads) for n in builtins + user for layout in ("contiguous", "zigzag")]
        out += [("ulysses", n, "zigzag", False, heads) for n in builtins + user]
        varlen = ["causal", "sliding_window", "alibi_per_batch", "sinks_causal", "document_mask"] + user
        out += [("ring", n, "zigzag", True, heads) for n in varlen]
        out += [("ulysses", n, "contiguous", True, heads) for n in varlen]
        out += [("ulysses", n, "zigzag", True, heads) for n in ("causal", "document_mask")]
        return out
    if world == 3:  # an odd ring: both layouts, varlen, Ulysses over 6 query and 3 K/V heads
        heads = (6, 3)
        chosen = ["causal", "sliding_window_causal", "sinks", "document_mask", "head_band"]
        return [("ring", n, layout, varlen, heads) for n in chosen for layout in ("contiguous", "zigzag")
                for varlen in (False, True)] + [("ulysses", n, "zigzag", False, heads) for n in chosen]
    chosen = ["none", "causal", "sliding_window", "alibi_causal", "sinks_causal", "document_mask"] + user
    return [("ring", n, "zigzag", False, heads) for n in chosen] + [("ulysses", n, "contiguous", False, heads)
                                                                     for n in chosen] + \
        [("ring", "document_mask", "zigzag", True, heads), ("ring", "none", "contiguous", True, heads)]


class OffByOne:
    """A local op with a planted bug: every key block but the first is placed one key early."""

    def __init__(self):
        from flashtile.parallel import Reference

        self.inner = Reference()

    def check(self, *args):
        self.inner.check(*args)

    def _shifted(self, block):
        from flashtile.parallel import Block

        placement = dict(block.placement)
        shift = placement["k_offset"]
        placement["k_offset"] = [x - 1 if x else x for x in shift] if isinstance(shift, list) else max(shift - 1, 0)
        return Block(block.variant, placement, block.cu_q, block.cu_k, block.aligned)

    def forward(self, q, k, v, block, settings):
        return self.inner.forward(q, k, v, self._shifted(block), settings)

    def backward(self, dout, q, k, v, out, lse, block, settings):
        return self.inner.backward(dout, q, k, v, out, lse, self._shifted(block), settings)


def round_trip(layout, varlen):
    """unshard(shard(x)) == x: the largest difference."""
    from flashtile import parallel

    q, _, _, _, cu, _, _ = problem(dist.get_world_size(), varlen, (4, 2), 1)
    mine = parallel.shard(q, layout=layout, cu_seqlens=cu)
    return float((parallel.unshard(mine, layout=layout, cu_seqlens=cu) - q).abs().max())


def _bad(mode, shape_q=(2, 8, 4, 4), shape_kv=(2, 8, 2, 4), **kwargs):
    from flashtile import parallel

    q, k = torch.zeros(shape_q, dtype=torch.float64), torch.zeros(shape_kv, dtype=torch.float64)
    return (parallel.ring_attention if mode == "ring" else parallel.ulysses_attention)(q, k, k, **kwargs)


# Bad calls, refused before any communication with an error naming the argument (on two ranks).
BAD_CALLS = [
    ("heads_kv \\(1\\) must both be divisible by the world size \\(2\\)",
     lambda: _bad("ulysses", shape_kv=(2, 8, 1, 4))),
    ("the zigzag layout splits each rank's 3 rows into 2 chunks",
     lambda: _bad("ring", (2, 3, 4, 4), (2, 3, 2, 4), layout="zigzag")),
    ("layout must be one of 'contiguous', 'zigzag'", lambda: _bad("ring", layout="striped")),
    ("sequence 1 has 6 tokens; the zigzag layout over 2 ranks splits each sequence into 4 equal chunks",
     lambda: _bad("ring", (7, 4, 4), (7, 2, 4), layout="zigzag",
                  cu_seqlens=torch.tensor([0, 8, 14], dtype=torch.int32))),
    ("local='kernel' runs flashtile's GPU kernels", lambda: _bad("ring", local="kernel")),
    ("inputs\\['slopes'\\] has 2 elements; variant 'alibi' reads 4",
     lambda: _bad("ring", variant="alibi", inputs={"slopes": torch.zeros(2, dtype=torch.float64)})),
]


def refused(text, call):
    """0 when `call` raises an error matching `text`, else 1."""
    import re

    try:
        call()
    except (ValueError, NotImplementedError, TypeError) as e:
        return 0.0 if re.search(text, str(e)) else 1.0
    return 1.0


class WithoutOffsets:
    """The GPU kernels' local op as far as placement goes (they take no offsets yet): Kernel's check, and every
    block run with its local positions and heads only. What the check lets through must still be exact."""

    def __init__(self, checked=True):
        from flashtile.parallel import Kernel, Reference

        self.kernel, self.inner, self.checked = Kernel(offsets=False), Reference(), checked

    def check(self, *args):
        if self.checked:
            self.kernel.check(*args)

    def _local(self, block):
        from flashtile.parallel import Block

        if self.checked:
            self.kernel._checked(block)
        return Block(block.variant, {}, block.cu_q, block.cu_k, block.aligned)

    def forward(self, q, k, v, block, settings):
        return self.inner.forward(q, k, v, self._local(block), settings)

    def backward(self, dout, q, k, v, out, lse, block, settings):
        return self.inner.backward(dout, q, k, v, out, lse, self._local(block), settings)


# What the kernels' local op runs exactly without offsets (Kernel.check lets these through).
KERNEL_RING = ["none", "softcap", "sinks", "causal", "causal_top_left", "softcap_causal", "sinks_causal"]
KERNEL_ULYSSES = ["causal", "sliding_window", "document_mask", "softcap_causal", "relative_lookahead"]


class Counting:
    """The reference, counting the forward blocks it computes and those that run without the variant's mask."""

    def __init__(self):
        from flashtile.parallel import Reference

        self.inner, self.blocks, self.unmasked = Reference(), 0, 0

    def check(self, *args):
        self.inner.check(*args)

    def forward(self, q, k, v, block, settings):
        self.blocks += 1
        self.unmasked += not block.variant.hooks().get("mask")
        return self.inner.forward(q, k, v, block, settings)

    def backward(self, *args):
        return self.inner.backward(*args)


def _worker(rank, world, init_file, queue):
    results = []
    try:
        # A rank that fails inside a collective leaves the others waiting: bounded, not gloo's half hour.
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        for case in cases(world):
            try:
                results.append((case, compare(*case)[:2]))
            except Exception:  # noqa: BLE001 - reported to the parent, which fails the case
                results.append((case, traceback.format_exc()))
        if world == 2:
            # The comparison fails for a local op with an offset bug (ring: every key block after the first is
            # one key off), so it would catch such a bug in ring_attention itself.
            for layout in ("contiguous", "zigzag"):
                case = ("planted-bug", "causal", layout, False, (4, 2))
                results.append((case, compare("ring", "causal", layout, False, (4, 2), local=OffByOne())[:2]))
            # deterministic=True: two backwards are bitwise equal.
            first = compare("ring", "alibi_causal", "zigzag", False, (4, 2), deterministic=True)[2]
            second = compare("ring", "alibi_causal", "zigzag", False, (4, 2), deterministic=True)[2]
            same = all(torch.equal(a, b) for a, b in zip(first, second))
            results.append((("deterministic", "alibi_causal", "zigzag", False, (4, 2)), (0.0 if same else 1.0, {})))
            results += [(("round-trip",) + c, (round_trip(*c), {})) for c in
                        (("contiguous", False), ("zigzag", False), ("zigzag", True))]
            results += [(("refused", text), (refused(text, call), {})) for text, call in BAD_CALLS]
            # The kernels' path without offsets: exact for what its check lets through, wrong without the check.
            for name in KERNEL_RING:
                for layout, varlen in (("contiguous", False), ("zigzag", False), ("zigzag", True)):
                    case = ("ring", name, layout, varlen, (4, 2))
                    results.append((("without-offsets",) + case, compare(*case, local=WithoutOffsets())[:2]))
            for name in KERNEL_ULYSSES:
                case = ("ulysses", name, "zigzag", False, (4, 2))
                results.append((("without-offsets",) + case, compare(*case, local=WithoutOffsets())[:2]))
            for name in ("sliding_window", "alibi", "document_mask"):
                case = ("ring", name, "zigzag", False, (4, 2))
                results.append((("planted-bug", "unchecked") + case,
                                compare(*case, local=WithoutOffsets(checked=False))[:2]))
                results.append((("refused", name), (refused("cannot run ring attention on flashtile's GPU kernels",
                                                            lambda: compare(*case, local=WithoutOffsets())), {})))
            # Causal blocks above the diagonal are skipped and those below run unmasked; zigzag balances the ranks.
            for layout in ("contiguous", "zigzag"):
                counting = Counting()
                error = compare("ring", "causal", layout, False, (4, 2), local=counting)[0]
                results.append((("blocks", "causal", layout), (error, {"blocks": counting.blocks,
                                                                       "unmasked": counting.unmasked})))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        results.append((("setup",), traceback.format_exc()))
    queue.put((rank, results))


@unittest.skipIf(torch is None or not dist.is_available() or not dist.is_gloo_available(),
                 "PyTorch with torch.distributed (gloo) is not installed")
class OverGloo(unittest.TestCase):
    """One run per world size: every rank runs every case and reports; each case is then a subtest."""

    def run_world(self, world):
        reports = run_ranks(_worker, world)
        self.assertEqual(sorted(reports), list(range(world)))
        return reports

    def check_reports(self, reports):
        for rank, results in sorted(reports.items()):
            for case, result in results:
                with self.subTest(rank=rank, case=case):
                    self.assertNotIsInstance(result, str, result)
                    error, errors = result
                    if case[0] == "planted-bug":
                        self.assertGreater(error, 1e-3, f"a planted offset bug went unnoticed: {errors}")
                    else:
                        self.assertLess(error, TOLERANCE, errors)

    def test_two_ranks(self):
        reports = self.run_world(2)
        self.check_reports(reports)
        ran = {case for _, results in reports.items() for case, _ in results}
        self.assertTrue(any(c[0] == "planted-bug" for c in ran) and any(c[3] for c in ran if len(c) > 3))
        blocks = {(rank, case[2]): result[1] for rank, results in reports.items() for case, result in results
                  if case[0] == "blocks"}
        # Contiguous: rank 0 has its diagonal block, rank 1 its diagonal one and rank 0's keys whole (unmasked).
        self.assertEqual([blocks[(r, "contiguous")] for r in (0, 1)],
                         [{"blocks": 1, "unmasked": 0}, {"blocks": 2, "unmasked": 1}])
        # Zigzag (chunks 0 and 3 on rank 0, 1 and 2 on rank 1): 5 of 8 blocks each, 3 of them unmasked.
        self.assertEqual([blocks[(r, "zigzag")] for r in (0, 1)], [{"blocks": 5, "unmasked": 3}] * 2)

    def test_three_ranks(self):
        self.check_reports(self.run_world(3))

    def test_four_ranks(self):
        self.check_reports(self.run_world(4))


@unittest.skipIf(torch is None, "PyTorch is not installed")
class KernelPath(unittest.TestCase):
    """By default the GPU kernels' local op gives the blocks no position offsets (that path awaits a GPU run): it
    refuses, by name, what would need them; Kernel(offsets=True) lets them through (test_positions.py)."""

    def check(self, mode, variant, world=2, same_lengths=True):
        from flashtile.parallel import Kernel
        from flashtile.parallel._hooks import Hooks
        from flashtile.interface import resolve_variant

        Kernel(offsets=False).check(mode, Hooks(resolve_variant(variant).decl), world, same_lengths)

    def test_exact_without_offsets(self):
        for name in ("none", "softcap", "sinks", "causal", "causal_top_left", "softcap_causal", "sinks_causal"):
            with self.subTest(name):
                self.check("ring", name)
        for name in ("causal", "sliding_window", "document_mask", "softcap"):
            with self.subTest(name):
                self.check("ulysses", name)
        self.check("ulysses", "alibi", world=1)  # one rank: the whole problem

    def test_refused_by_name(self):
        for mode, name, why in (("ring", "sliding_window", "not a causal mask"),
                                ("ring", "alibi", "score or sink hook reads"),
                                ("ring", "document_mask", "not a causal mask"),
                                ("ring", relative_lookahead(), "score or sink hook reads"),
                                ("ulysses", "alibi", "read the query head"),
                                ("ulysses", head_band(), "read the query head")):
            label = name if isinstance(name, str) else name.name
            with self.subTest(f"{mode} {label}"), self.assertRaisesRegex(NotImplementedError,
                                                                          f"variant '{label}'.*{why}"):
                self.check(mode, name)
        with self.assertRaisesRegex(NotImplementedError, "not split alike"):
            self.check("ring", "causal", same_lengths=False)


@unittest.skipIf(torch is None, "PyTorch is not installed")
class Rules(unittest.TestCase):
    """The KV-range rules evaluated on blocks of the whole problem, as the compiler's IR computes them."""

    def rules(self, variant, params=None, inputs=None, batch=1, heads=2):
        from flashtile.parallel._hooks import BlockRules, Hooks
        from flashtile.interface import resolve_variant

        decl = resolve_variant(variant).decl
        values = dict(zip(decl.param_names, decl.check_params(params)))
        return BlockRules(Hooks(decl), values, inputs or {}, batch, heads, heads)

    def classify(self, rules, rows, keys, seqlen=16):
        return rules.classify([{"seqlen_q": seqlen, "seqlen_k": seqlen, "key_offset": 0, "rows": rows, "keys": keys}])

    def test_causal_blocks(self):
        r = self.rules("causal")
        self.assertEqual(self.classify(r, (4, 8), (8, 12)), "skip")
        self.assertEqual(self.classify(r, (4, 8), (4, 8)), "partial")
        self.assertEqual(self.classify(r, (4, 8), (0, 4)), "full")
        self.assertEqual(self.classify(self.rules("none"), (4, 8), (8, 12)), "full")

    def test_window_and_heads(self):
        r = self.rules("sliding_window", {"left": 2, "right": 0})
        self.assertEqual(self.classify(r, (8, 12), (0, 4)), "skip")  # row 8 sees keys 6..8
        self.assertEqual(self.classify(r, (8, 12), (4, 8)), "partial")
        band = self.rules(head_band())
        self.assertEqual(self.classify(band, (8, 12), (0, 5)), "partial")  # head 1 sees 4 keys back: key 4 on
        self.assertEqual(self.classify(band, (8, 12), (0, 4)), "skip")
        self.assertEqual(self.classify(self.rules(head_band(), heads=1), (8, 12), (0, 5)), "skip")  # head 0 only

    def test_loads_and_unknowns(self):
        starts = [0, 0, 0, 3, 3, 3, 3, 7]
        r = self.rules("document_mask", inputs={"doc_start": starts})
        self.assertEqual(self.classify(r, (3, 7), (0, 3), seqlen=8), "skip")
        short = self.rules("document_mask", inputs={"doc_start": starts[:2]})  # read out of range: never skipped
        self.assertEqual(self.classify(short, (3, 7), (0, 3), seqlen=8), "partial")

    def test_two_dimensional_inputs_are_read_flat(self):
        # doc_start of (batch, seqlen), as a caller passes it: the rule indexes b * seqlen + key, so the rows are
        # joined in order (a tensor's nested rows compared with a key were a TypeError on the GPU machine).
        starts = [0, 0, 0, 3, 3, 3, 3, 7]
        r = self.rules("document_mask", inputs={"doc_start": torch.tensor([starts, [0] * 8], dtype=torch.int32)},
                       batch=2)
        self.assertEqual(r.inputs["doc_start"], starts + [0] * 8)
        # Batch entry 1 is one document: its rows 3..6 attend keys 0..2, so the block is not skipped for it.
        self.assertEqual(self.classify(r, (3, 7), (0, 3), seqlen=8), "partial")
        only = self.rules("document_mask", inputs={"doc_start": torch.tensor([starts], dtype=torch.int32)})
        self.assertEqual(self.classify(only, (3, 7), (0, 3), seqlen=8), "skip")

    def test_i32_semantics(self):
        from flashtile.parallel._hooks import evaluate

        graph = {"nodes": [["arg", 0], ["arg", 1], ["div", 0, 1], ["const", "i32", 2147483647], ["add", 3, 1]],
                 "results": [2, 4]}
        self.assertEqual(evaluate(graph, (-7, 2), {}, {}, {}), [-3, -2147483647])  # truncation; wrap-around


if __name__ == "__main__":
    unittest.main()
