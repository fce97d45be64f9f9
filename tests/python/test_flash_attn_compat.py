"""flashtile.flash_attn_compat: flash-attn 2.x's private entry points, called as ring-flash-attn calls them (by
keyword, from their inspected parameters). On CPU tensors they run the fp64 reference, so their semantics are
checked here against flashtile.reference_attention: flash-attn's flags, out and lse, the backward writing into
the caller's (strided) buffers. tests/python/gpu/test_parallel_gpu.py runs ring-flash-attn itself on a GPU."""

import importlib
import importlib.util
import inspect
import sys
import unittest

try:
    import torch
except ImportError:  # the rest of tests/python runs without PyTorch
    torch = None

import flashtile

# flash-attn 2.6's parameters, in order (flash_attn/flash_attn_interface.py).
FLASH_ATTN_PARAMETERS = {
    "_flash_attn_forward": ["q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size_left",
                            "window_size_right", "softcap", "alibi_slopes", "return_softmax"],
    "_flash_attn_backward": ["dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "dropout_p",
                             "softmax_scale", "causal", "window_size_left", "window_size_right", "softcap",
                             "alibi_slopes", "deterministic", "rng_state"],
    "_flash_attn_varlen_forward": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                                   "dropout_p", "softmax_scale", "causal", "window_size_left", "window_size_right",
                                   "softcap", "alibi_slopes", "return_softmax", "block_table", "leftpad_k",
                                   "seqused_k"],
    "_flash_attn_varlen_backward": ["dout", "q", "k", "v", "out", "softmax_lse", "dq", "dk", "dv", "cu_seqlens_q",
                                    "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "dropout_p", "softmax_scale",
                                    "causal", "window_size_left", "window_size_right", "softcap", "alibi_slopes",
                                    "deterministic", "rng_state"],
}


def call_by_keyword(fn, **given):
    """As ring-flash-attn calls flash-attn: every parameter by name, defaults from the signature, softcap 0."""
    spec = inspect.getfullargspec(fn)
    defaults = spec.defaults or ()
    params = dict(zip(spec.args, (None,) * (len(spec.args) - len(defaults)) + tuple(defaults)))
    if "softcap" in params:
        params["softcap"] = 0.0
    params.update(given)
    return fn(**params)


@unittest.skipIf(torch is None, "PyTorch is not installed")
class EntryPoints(unittest.TestCase):
    def setUp(self):
        from flashtile import flash_attn_compat

        self.fa = flash_attn_compat
        g = torch.Generator().manual_seed(7)
        self.q = torch.randn(2, 6, 4, 8, generator=g, dtype=torch.float64)
        self.k = torch.randn(2, 9, 2, 8, generator=g, dtype=torch.float64)
        self.v = torch.randn(2, 9, 2, 5, generator=g, dtype=torch.float64)
        self.dout = torch.randn(2, 6, 4, 5, generator=g, dtype=torch.float64)
        self.slopes = torch.tensor([0.5, 0.25, 0.125, 1.0], dtype=torch.float64)

    def test_parameters_are_flash_attns(self):
        for name, expected in FLASH_ATTN_PARAMETERS.items():
            with self.subTest(name):
                self.assertEqual(inspect.getfullargspec(getattr(self.fa, name)).args[:len(expected)], expected)

    FLAGS = [  # flash-attn's flags and the flashtile variant they name
        (dict(causal=True), "causal", {}),
        (dict(causal=False, window_size_left=2, window_size_right=1), "sliding_window", {"left": 2, "right": 1}),
        (dict(causal=True, softcap=3.0), "softcap_causal", {"cap": 3.0}),
        (dict(causal=False), "none", {}),
    ]

    def test_forward_and_backward(self):
        for flags, variant, params in self.FLAGS + [(dict(causal=True, alibi_slopes="slopes"), "alibi_causal", {})]:
            with self.subTest(variant):
                flags = dict(flags)
                inputs = None
                if flags.get("alibi_slopes") == "slopes":
                    flags["alibi_slopes"], inputs = self.slopes, {"slopes": self.slopes}
                q, k, v = (t.clone().requires_grad_() for t in (self.q, self.k, self.v))
                expected, expected_lse = flashtile.reference_attention(q, k, v, variant, params=params,
                                                                       inputs=inputs, return_lse=True)
                grads = torch.autograd.grad((expected * self.dout).sum(), (q, k, v))
                outputs = call_by_keyword(self.fa._flash_attn_forward, q=self.q, k=self.k, v=self.v, dropout_p=0.0,
                                          softmax_scale=None, return_softmax=False, **flags)
                self.assertEqual(len(outputs), 4)
                out, lse = outputs[0], outputs[1]
                torch.testing.assert_close(out, expected.detach(), rtol=0, atol=1e-12)
                torch.testing.assert_close(lse, expected_lse, rtol=0, atol=1e-12)
                # Buffers as ring-flash-attn passes them: views of larger ones, written in place.
                buffers = [torch.zeros(2, 12, t.shape[2], t.shape[3], dtype=torch.float64) for t in (q, k, v)]
                dq, dk, dv = buffers[0][:, :6], buffers[1][:, :9], buffers[2][:, :9]
                d = call_by_keyword(self.fa._flash_attn_backward, dout=self.dout, q=self.q, k=self.k, v=self.v,
                                    out=out, softmax_lse=lse, dq=dq, dk=dk, dv=dv, dropout_p=0.0,
                                    softmax_scale=None, deterministic=False, **flags)
                for got, want in zip((dq, dk, dv), grads):
                    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
                self.assertEqual(float(buffers[0][:, 6:].abs().max()), 0.0)
                torch.testing.assert_close(d, (self.dout * out).sum(-1).transpose(1, 2))

    def test_varlen(self):
        cu = torch.tensor([0, 4, 9], dtype=torch.int32)
        q, k, v = self.k.reshape(18, 2, 8)[:9].clone(), self.k.reshape(18, 2, 8)[9:].clone(), \
            self.v.reshape(18, 2, 5)[:9].clone()
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
        expected, expected_lse = flashtile.reference_attention(q, k, v, "causal", cu_seqlens_q=cu, cu_seqlens_k=cu,
                                                               return_lse=True)
        dout = torch.ones_like(expected)
        grads = torch.autograd.grad((expected * dout).sum(), (q, k, v))
        out, lse, _, _ = call_by_keyword(self.fa._flash_attn_varlen_forward, q=q.detach(), k=k.detach(),
                                         v=v.detach(), cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5,
                                         max_seqlen_k=5, dropout_p=0.0, softmax_scale=None, causal=True)
        torch.testing.assert_close(out, expected.detach(), rtol=0, atol=1e-12)
        torch.testing.assert_close(lse, expected_lse, rtol=0, atol=1e-12)
        dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
        call_by_keyword(self.fa._flash_attn_varlen_backward, dout=dout, q=q.detach(), k=k.detach(), v=v.detach(),
                        out=out, softmax_lse=lse, dq=dq, dk=dk, dv=dv, cu_seqlens_q=cu, cu_seqlens_k=cu,
                        max_seqlen_q=5, max_seqlen_k=5, dropout_p=0.0, softmax_scale=None, causal=True,
                        deterministic=False)
        for got, want in zip((dq, dk, dv), grads):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12)

    def test_refused(self):
        with self.assertRaisesRegex(NotImplementedError, "dropout_p=0.1"):
            self.fa._flash_attn_forward(self.q, self.k, self.v, 0.1, None, True)
        with self.assertRaisesRegex(NotImplementedError, "leftpad_k is not supported"):
            self.fa._flash_attn_varlen_forward(self.q[0], self.k[0], self.v[0], torch.tensor([0, 6]),
                                               torch.tensor([0, 9]), 6, 9, 0.0, None, False,
                                               leftpad_k=torch.zeros(1))
        with self.assertRaisesRegex(ValueError, "window_size_left/right: sizes must be >= -1"):
            self.fa._flash_attn_forward(self.q, self.k, self.v, 0.0, None, False, -3, 0)

    def test_install(self):
        saved = {n: sys.modules.pop(n) for n in ("flash_attn", "flash_attn.flash_attn_interface") if n in sys.modules}
        try:
            installed = self.fa.install(force=True)
            self.assertTrue(installed)
            interface = importlib.import_module("flash_attn.flash_attn_interface")
            self.assertIs(interface._flash_attn_forward, self.fa._flash_attn_forward)
            from flash_attn import flash_attn_func  # the public call comes along
            self.assertIs(flash_attn_func, flashtile.flash_attn_func)
            self.assertTrue(self.fa.install())  # already serving: nothing to do
        finally:
            for name in ("flash_attn", "flash_attn.flash_attn_interface"):
                sys.modules.pop(name, None)
            sys.modules.update(saved)


def _ring_flash_attn_worker(rank, world, init_file, queue):
    import traceback

    import torch.distributed as dist

    results = []
    try:
        from flashtile import flash_attn_compat

        flash_attn_compat.install(force=True)  # before ring-flash-attn imports flash_attn
        from gloo_ranks import import_ring_flash_attn

        rfa = import_ring_flash_attn()
        dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
        g = torch.Generator().manual_seed(0)
        # bf16: ring-flash-attn accumulates in fp32 copies of its buffers, which fp32 inputs would alias.
        q, k, v, dout = (torch.randn(1, 8 * world, 2, 8, generator=g).to(torch.bfloat16) for _ in range(4))
        for name, causal, chunks in (("ring_flash_attn_func", False, world), ("ring_flash_attn_func", True, world),
                                     ("zigzag_ring_flash_attn_func", True, 2 * world)):
            ids = [rank, 2 * world - 1 - rank] if chunks == 2 * world else [rank]

            def mine(t):
                return torch.cat([t.chunk(chunks, dim=1)[i] for i in ids], dim=1)

            whole = [t.double().requires_grad_() for t in (q, k, v)]
            ref = flashtile.reference_attention(*whole, "causal" if causal else "none")
            ref_grads = torch.autograd.grad((ref * dout.double()).sum(), whole)
            local = [mine(t).requires_grad_() for t in (q, k, v)]
            out = getattr(rfa, name)(*local, causal=causal)
            grads = torch.autograd.grad((out * mine(dout)).sum(), local)
            worst = max(float((a.double() - mine(b)).abs().max()) for a, b in
                        [(out, ref.detach())] + list(zip(grads, ref_grads)))
            results.append(((name, causal), worst))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - reported to the parent
        results.append(("setup", traceback.format_exc()))
    queue.put((rank, results))


@unittest.skipIf(torch is None or importlib.util.find_spec("ring_flash_attn") is None,
                 "ring-flash-attn is not installed (pip install ring-flash-attn)")
class RingFlashAttnOnCpu(unittest.TestCase):
    """ring-flash-attn itself over gloo with 2 ranks, its flash-attn calls served by these entry points (the fp64
    reference on CPU tensors): every rank's output and gradients within bf16's rounding of the whole problem's."""

    def test_two_ranks(self):
        from gloo_ranks import run_ranks

        reports = run_ranks(_ring_flash_attn_worker, 2)
        for rank, results in sorted(reports.items()):
            for case, worst in results:
                with self.subTest(rank=rank, case=case):
                    self.assertNotIsInstance(worst, str, worst)
                    self.assertLess(worst, 5e-2)  # bf16 inputs and outputs; a wrong block is off by O(1)


if __name__ == "__main__":
    unittest.main()
