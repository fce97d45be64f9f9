"""The eager autograd path of flash_attn_func and attention(): a call whose tensors need gradients runs
interface._EagerAttention (the forward's and backward's launches without torch.library's custom-op dispatch), a call
under torch.compile the custom op flashtile::fwd; the Function saves and hands the backward what the custom op's
registered autograd does, and returns each gradient in its argument's place (dq, dk, dv, then the variant's fp32
arrays). No GPU: the launches are replaced by recording stand-ins on CPU tensors. Skipped without PyTorch."""

import unittest
from unittest import mock

try:
    import torch

    from flashtile import _positions, interface
except ImportError:  # the package's torch-free test run: these need PyTorch (the torch-facing run has it)
    torch = None


@unittest.skipIf(torch is None, "PyTorch is not installed")
class EagerAutograd(unittest.TestCase):
    def setUp(self):
        self.launches, self.backwards = [], []

        def launch(q, k, v, cu_q, cu_k, max_q, max_k, scale, variant, params, inputs, remember, schedule, strict,
                   descales=None, positions=_positions.PLAIN):
            self.launches.append(dict(variant=variant, params=params, inputs=inputs, schedule=schedule,
                                      strict=strict, positions=positions))
            out = q.detach() * 2.0  # a result that is not an alias of q
            lse = torch.full(q.shape[:1] + q.shape[2:3] + q.shape[1:2], 0.5, dtype=torch.float32)
            return out, lse

        def backward(grad_out, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, variant, params, inputs, wanted,
                     schedule, strict, deterministic, positions=_positions.PLAIN):
            self.backwards.append(dict(grad_out=grad_out, out=out, lse=lse, variant=variant, params=params,
                                       inputs=list(inputs), wanted=list(wanted), schedule=schedule, strict=strict,
                                       deterministic=deterministic, positions=positions))
            grads = [torch.full_like(t, 7.0) if want else t.new_empty((0,)) for t, want in zip(inputs, wanted)]
            return grad_out + 1.0, grad_out + 2.0, grad_out + 3.0, grads

        patches = [mock.patch.object(interface, "_launch", launch),
                   mock.patch.object(interface, "_backward_launch", backward)]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)

    def call(self, slopes=None, compiling=False):
        q, k, v = (torch.randn(2, 8, 4, 16, requires_grad=True) for _ in range(3))
        resolved = interface.resolve_variant("alibi" if slopes is not None else "causal")
        inputs = [slopes] if slopes is not None else []
        with mock.patch.object(interface, "_is_compiling", lambda: compiling):
            out, lse = interface._run(q, k, v, None, None, 8, 8, 0.25, resolved, [], inputs, None, b"fa3", 1, True)
        return q, k, v, out, lse, resolved

    def test_eager_call_runs_the_function_and_its_backward_gets_the_forwards_call(self):
        slopes = torch.rand(4, dtype=torch.float32, requires_grad=True)
        with mock.patch.object(torch.ops.flashtile, "fwd", side_effect=AssertionError("the custom op ran eagerly")):
            q, k, v, out, lse, resolved = self.call(slopes)
        self.assertEqual(len(self.launches), 1)
        self.assertEqual(self.launches[0]["variant"], resolved.id_bytes)
        self.assertIs(self.launches[0]["inputs"][0], slopes)
        self.assertEqual(self.launches[0]["strict"], 1)
        self.assertTrue(out.requires_grad)
        self.assertFalse(lse.requires_grad)  # flash-attn's LSE is not differentiable
        g = torch.randn_like(out)
        dq, dk, dv, dslopes = torch.autograd.grad(out, (q, k, v, slopes), g)
        (b,) = self.backwards
        self.assertTrue(torch.equal(b["grad_out"], g))
        self.assertTrue(torch.equal(b["out"], out.detach()))
        self.assertEqual(b["variant"], resolved.id)
        self.assertEqual(b["wanted"], [True])
        self.assertIs(b["inputs"][0], slopes)
        self.assertEqual((b["schedule"], b["strict"], b["deterministic"]), ("fa3", True, True))
        self.assertEqual(b["positions"], _positions.PLAIN)
        self.assertTrue(torch.equal(dq, g + 1.0) and torch.equal(dk, g + 2.0) and torch.equal(dv, g + 3.0))
        self.assertTrue(torch.equal(dslopes, torch.full_like(slopes, 7.0)))

    def test_an_array_without_grad_gets_none(self):
        slopes = torch.rand(4, dtype=torch.float32)  # no requires_grad
        q, k, v, out, _, _ = self.call(slopes)
        dq, = torch.autograd.grad(out.sum(), (q,))
        self.assertEqual(self.backwards[0]["wanted"], [False])
        self.assertTrue(torch.equal(dq, torch.ones_like(out) + 1.0))

    def test_an_unmaterialized_output_gradient_is_zero(self):
        # LSE's gradient is never made (set_materialize_grads(False)); out's, where absent, is zero.
        _, _, _, out, _, _ = self.call()
        dq, _, _ = out.grad_fn.apply(None, None)[:3]
        self.assertTrue(torch.equal(self.backwards[0]["grad_out"], torch.zeros_like(out)))
        self.assertTrue(torch.equal(dq, torch.ones_like(out)))

    def test_a_dispatch_mode_sees_the_custom_op(self):
        # FakeTensorMode, FlopCounterMode or a user's mode: the custom op runs, as under torch.compile.
        from torch.utils._python_dispatch import TorchDispatchMode

        class Passthrough(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        sentinel = (torch.zeros(1), torch.zeros(1))
        with mock.patch.object(torch.ops.flashtile, "fwd", return_value=sentinel) as op:
            q, k, v = (torch.randn(2, 8, 4, 16, requires_grad=True) for _ in range(3))
            resolved = interface.resolve_variant("causal")
            with Passthrough():
                out, _ = interface._run(q, k, v, None, None, 8, 8, 0.25, resolved, [], [], None, None, 0, False)
        self.assertEqual(op.call_count, 1)
        self.assertIs(out, sentinel[0])
        self.assertEqual(self.launches, [])

    def test_compiling_runs_the_custom_op(self):
        sentinel = (torch.zeros(1), torch.zeros(1))
        with mock.patch.object(torch.ops.flashtile, "fwd", return_value=sentinel) as op:
            _, _, _, out, lse, _ = self.call(compiling=True)
        self.assertEqual(op.call_count, 1)
        self.assertIs(out, sentinel[0])
        self.assertEqual(self.launches, [])


if __name__ == "__main__":
    unittest.main()
