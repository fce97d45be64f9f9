"""flashtile.reference_attention: a variant's attention and gradients in fp64 on the CPU, from the compiler's
derivative IR. Without PyTorch the C ABI itself is called through ctypes (the struct layout and the errors); with
PyTorch, torch.autograd.gradcheck checks the gradients of q, k, v and of the variants' f32 inputs against finite
differences, for built-in variants and a user's Python hook."""

import ctypes
import math
import unittest

try:
    import torch
except ImportError:  # CI installs no PyTorch: the ctypes test below still runs
    torch = None

import flashtile
from flashtile import _lib, dsl


def _doubles(values):
    return (ctypes.c_double * len(values))(*values)


class ReferenceThroughCtypes(unittest.TestCase):
    """The ctypes struct matches the C one: a one-row, one-key call gives O = V and LSE = the scaled score."""

    def call(self, variant=b"none", **overrides):
        q, k, v = _doubles([1.0, 2.0]), _doubles([0.5, -1.0]), _doubles([3.0])
        o, lse = _doubles([0.0]), _doubles([0.0])
        call = _lib.ReferenceCall()
        call.size = ctypes.sizeof(call)
        call.variant = variant
        call.q, call.k, call.v = ctypes.addressof(q), ctypes.addressof(k), ctypes.addressof(v)
        call.o, call.lse = ctypes.addressof(o), ctypes.addressof(lse)
        call.batch = call.seqlen_q = call.seqlen_k = call.heads_q = call.heads_kv = call.head_dim_v = 1
        call.head_dim = 2
        call.softmax_scale = 0.5
        for name, value in overrides.items():
            setattr(call, name, value)
        lib = _lib.library()
        rc = lib.lib.flashtile_reference_attention(ctypes.addressof(call))
        return rc, o[0], lse[0], (lib.lib.flashtile_last_error() or b"").decode()

    def test_one_key(self):
        rc, o, lse, error = self.call()
        self.assertEqual(rc, 0, error)
        self.assertEqual(o, 3.0)
        self.assertAlmostEqual(lse, 0.5 * (0.5 - 2.0), places=12)

    def test_errors_name_the_argument(self):
        self.assertIn("call->size", self.call(size=16)[3])
        self.assertIn("head_dim: must be at least 1", self.call(head_dim=0)[3])
        self.assertIn("variant: unknown built-in 'nope'", self.call(variant=b"nope")[3])


@unittest.skipIf(torch is None, "PyTorch is not installed")
class Gradcheck(unittest.TestCase):
    def tensors(self, batch=2, seqlen_q=3, seqlen_k=5, heads_q=2, heads_kv=1, d=4, dv=3, seed=0):
        g = torch.Generator().manual_seed(seed)
        shapes = [(batch, seqlen_q, heads_q, d), (batch, seqlen_k, heads_kv, d), (batch, seqlen_k, heads_kv, dv)]
        return [torch.randn(s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]

    def check(self, variant, params=None, inputs=None, **shape):
        q, k, v = self.tensors(**shape)
        names = list(inputs or {})

        def fn(q, k, v, *arrays):
            return flashtile.reference_attention(q, k, v, variant, params=params,
                                                 inputs=dict(zip(names, arrays)) if names else None)

        arrays = [inputs[n] for n in names]
        self.assertTrue(torch.autograd.gradcheck(fn, (q, k, v, *arrays), eps=1e-6, atol=1e-7, rtol=1e-5))

    def test_builtins(self):
        for name in ("none", "causal", "causal_top_left", "sliding_window_causal"):
            with self.subTest(name):
                self.check(name, seqlen_q=4, seqlen_k=6)
        self.check("softcap", params={"cap": 1.5})
        self.check("softcap_causal", params={"cap": 2.0})

    def test_input_gradients(self):
        slopes = torch.tensor([0.5, -0.25], dtype=torch.float64, requires_grad=True)
        self.check("alibi", inputs={"slopes": slopes})
        per_batch = torch.tensor([0.5, -0.25, 0.125, 1.0], dtype=torch.float64, requires_grad=True)
        self.check("alibi_per_batch", inputs={"slopes": per_batch})
        sinks = torch.tensor([0.3, -1.2], dtype=torch.float64, requires_grad=True)
        self.check("sinks", inputs={"sinks": sinks})
        sinks_out = flashtile.reference_attention(*self.tensors(), "sinks", inputs={"sinks": sinks}).sum()
        (d_sinks,) = torch.autograd.grad(sinks_out, sinks)
        self.assertGreater(d_sinks.abs().max().item(), 1e-6, "the sinks' gradient is zero: the check is vacuous")

    def test_user_hook(self):
        # A hook nobody wrote a derivative for: the compiler's chain rule through tanh, exp and a learnable bias.
        def score(s, c, p):
            return dsl.tanh(s) * 2.0 + dsl.exp(-s * s) + p.load("bias", c.h)

        variant = flashtile.Variant("wavy_bias").input("bias", "f32").score(score)
        bias = torch.tensor([0.7, -0.4], dtype=torch.float64, requires_grad=True)
        self.check(variant, inputs={"bias": bias})

    def test_matches_an_explicit_softmax(self):
        q, k, v = self.tensors(heads_kv=2)
        out, lse = flashtile.reference_attention(q, k, v, "causal", return_lse=True)
        scale = 1 / math.sqrt(q.shape[-1])
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
        mask = torch.ones(s.shape[-2:], dtype=torch.bool).tril(s.shape[-1] - s.shape[-2])
        s = s.masked_fill(~mask, float("-inf"))
        expected = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse, s.logsumexp(-1), rtol=1e-12, atol=1e-12)

    def test_blocks_of_a_larger_problem(self):
        # Varlen, two sequences of 6 and 4 tokens. Rows [2, 6) of the first and [1, 4) of the second, against two
        # key blocks placed by per-sequence offsets: merged by LSE they are the whole problem's rows, and the blocks'
        # backwards (given the whole problem's out and lse) sum to its gradients from those rows.
        g = torch.Generator().manual_seed(3)
        cu = torch.tensor([0, 6, 10], dtype=torch.int32)
        q, k, v = (torch.randn(10, 2, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
        rows = torch.tensor([2, 3, 4, 5, 7, 8, 9])
        key_blocks = [(torch.tensor([0, 1, 2, 6, 7]), [0, 0]), (torch.tensor([3, 4, 5, 8, 9]), [3, 2])]
        place = dict(cu_seqlens_q=torch.tensor([0, 4, 7], dtype=torch.int32), q_offset=[2, 1],
                     cu_seqlens_q_global=cu, cu_seqlens_k_global=cu)
        cases = {"causal": {}, "sliding_window": dict(params={"left": 2, "right": 1}),
                 "alibi": dict(inputs={"slopes": torch.tensor([0.5, -0.75], dtype=torch.float64)}),
                 "document_mask": dict(inputs={"doc_start": torch.tensor([0, 0, 2, 2, 2, 5, 0, 1, 1, 1],
                                                                         dtype=torch.int32)})}
        for name, extra in cases.items():
            with self.subTest(name):
                out, lse = flashtile.reference_attention(q, k, v, name, return_lse=True, cu_seqlens_q=cu,
                                                         cu_seqlens_k=cu, **extra)
                d_out = torch.zeros_like(out)
                d_out[rows] = torch.randn(len(rows), 2, 4, generator=g, dtype=torch.float64)
                expected = torch.autograd.grad((out * d_out).sum(), (q, k, v))
                merged_o, merged_lse = 0, torch.full((2, len(rows)), float("-inf"), dtype=torch.float64)
                dq, dk = torch.zeros(len(rows), 2, 4, dtype=torch.float64), torch.zeros_like(k)
                for keys, k_offset in key_blocks:
                    block = dict(place, cu_seqlens_k=torch.tensor([0, 3, 5], dtype=torch.int32), k_offset=k_offset,
                                 **extra)
                    o, l = flashtile.reference_attention(q[rows], k[keys], v[keys], name, return_lse=True, **block)
                    new = torch.logaddexp(merged_lse, l)
                    weight = lambda x: torch.where(new > float("-inf"), (x - new).exp(), 0.0).T[..., None]  # noqa
                    merged_o, merged_lse = merged_o * weight(merged_lse) + o * weight(l), new
                    gq, gk, _, _ = flashtile.reference_attention_backward(
                        d_out[rows], q[rows].detach(), k[keys].detach(), v[keys].detach(), out[rows].detach(),
                        lse[:, rows], name, **block)
                    dq += gq
                    dk[keys] += gk
                torch.testing.assert_close(merged_o, out[rows].detach(), rtol=0, atol=1e-12)
                torch.testing.assert_close(merged_lse, lse[:, rows], rtol=0, atol=1e-12)
                torch.testing.assert_close(dq, expected[0][rows], rtol=0, atol=1e-12)
                torch.testing.assert_close(dk, expected[1], rtol=0, atol=1e-12)
                # The same blocks without their offsets are another problem: the check is not vacuous.
                unplaced = dict(block, q_offset=0, k_offset=0)
                o, _ = flashtile.reference_attention(q[rows], k[keys], v[keys], name, return_lse=True, **unplaced)
                self.assertGreater((o - flashtile.reference_attention(q[rows], k[keys], v[keys], name, return_lse=True,
                                                                       **block)[0]).abs().max().item(), 1e-3)

    def test_placed_block_gradcheck(self):
        # A block placed in a larger problem: its own gradients, through autograd, against finite differences.
        q, k, v = self.tensors(seqlen_q=3, seqlen_k=4)
        slopes = torch.tensor([0.5, -0.25, 0.75, 1.5], dtype=torch.float64, requires_grad=True)  # heads 2, 3 of 4

        def fn(q, k, v, slopes):
            return flashtile.reference_attention(q, k, v, "alibi_causal", inputs={"slopes": slopes}, q_offset=5,
                                                 k_offset=3, seqlen_q_global=9, seqlen_k_global=9, head_offset=2,
                                                 heads_q_global=4, heads_kv_global=2)

        self.assertTrue(torch.autograd.gradcheck(fn, (q, k, v, slopes), eps=1e-6, atol=1e-7, rtol=1e-5))

    def test_bad_placements(self):
        q, k, v = self.tensors()
        with self.assertRaisesRegex(flashtile.FlashtileError, "q_offset: rows \\[3, 6\\) are not inside"):
            flashtile.reference_attention(q, k, v, "causal", q_offset=3, seqlen_q_global=5)
        with self.assertRaisesRegex(ValueError, "head_offset must be a whole number >= 0"):
            flashtile.reference_attention(q, k, v, "causal", head_offset=-1)
        with self.assertRaisesRegex(ValueError, "cu_seqlens_q_global and cu_seqlens_k_global are for varlen"):
            flashtile.reference_attention(q, k, v, "causal", cu_seqlens_q_global=[0, 3])
        with self.assertRaisesRegex(ValueError, "lse must be a float64 CPU tensor of shape \\(2, 2, 3\\)"):
            flashtile.reference_attention_backward(torch.zeros(2, 3, 2, 3, dtype=torch.float64), q, k, v,
                                                   torch.zeros(2, 3, 2, 3, dtype=torch.float64),
                                                   torch.zeros(2, 3, dtype=torch.float64), "causal")

    def test_bad_arguments(self):
        q, k, v = self.tensors()
        with self.assertRaisesRegex(ValueError, "float64 CPU tensor"):
            flashtile.reference_attention(q.float(), k, v)
        with self.assertRaisesRegex(ValueError, "inputs: variant 'alibi' reads slopes"):
            flashtile.reference_attention(q, k, v, "alibi")


if __name__ == "__main__":
    unittest.main()
