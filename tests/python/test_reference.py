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

    def test_bad_arguments(self):
        q, k, v = self.tensors()
        with self.assertRaisesRegex(ValueError, "float64 CPU tensor"):
            flashtile.reference_attention(q.float(), k, v)
        with self.assertRaisesRegex(ValueError, "inputs: variant 'alibi' reads slopes"):
            flashtile.reference_attention(q, k, v, "alibi")


if __name__ == "__main__":
    unittest.main()
