"""flash_attn_func / flash_attn_varlen_func / attention reject bad arguments before touching a GPU, and the custom
op's fake implementation gives torch.compile the right shapes. Skipped where PyTorch is not installed."""

import unittest

try:
    import torch
except ImportError:  # CI installs no PyTorch: the tracing and C ABI tests cover the rest
    torch = None

import flashtile


@unittest.skipIf(torch is None, "PyTorch is not installed")
class ArgumentChecks(unittest.TestCase):
    def tensors(self, shape=(1, 16, 2, 64), dtype=None, device="cpu"):
        dtype = dtype or torch.bfloat16
        return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(3)]

    def test_cpu_tensors(self):
        with self.assertRaisesRegex(ValueError, "q must be a CUDA tensor"):
            flashtile.flash_attn_func(*self.tensors())

    def test_shapes_and_dtypes(self):
        q, k, v = self.tensors()
        with self.assertRaisesRegex(ValueError, "q must have 4 dimensions"):
            flashtile.flash_attn_func(q[0], k, v)
        with self.assertRaisesRegex(ValueError, "torch.float16, torch.bfloat16 or torch.float8_e4m3fn"):
            flashtile.flash_attn_func(q.float(), k, v)
        with self.assertRaisesRegex(ValueError, "q must have 3 dimensions"):
            flashtile.flash_attn_varlen_func(q, k, v, None, None, 16, 16)

    def test_unsupported_features(self):
        from flashtile import interface as attention

        q, k, v = self.tensors()
        with self.assertRaisesRegex(NotImplementedError, "dropout"):
            attention._check_common(q, k, v, 0.1, None, False)
        with self.assertRaisesRegex(ValueError, "softmax_scale must be finite and non-zero"):
            attention._check_common(q, k, v, 0.0, 0.0, False)
        with self.assertRaisesRegex(ValueError, "window_size: sizes must be >= -1"):
            attention._check_flags((-3, 0), 0.0, None, 1, 2, q.device)
        with self.assertRaisesRegex(ValueError, "softcap must be >= 0"):
            attention._check_flags((-1, -1), -1.0, None, 1, 2, q.device)
        with self.assertRaisesRegex(ValueError, r"alibi_slopes must have shape \(2,\) or \(1, 2\)"):
            attention._check_flags((-1, -1), 0.0, torch.zeros(3), 1, 2, q.device)
        with self.assertRaisesRegex(ValueError, "head dims: q/k have 64 and v 32"):
            attention._head_dims(64, 32)
        self.assertEqual(attention._head_dims(40, 40), (64, 64))
        self.assertEqual(attention._head_dims(192, 128), (192, 128))

    def test_flash_attn_flags_pick_variants(self):
        from flashtile import interface as attention

        pick = lambda *a: attention._flash_attn_variant(*a)[0].id.split("#")[0]  # noqa: E731
        self.assertEqual(pick(False, (-1, -1), 0.0, None, 128), "none")
        self.assertEqual(pick(True, (-1, -1), 0.0, None, 128), "causal")
        self.assertEqual(pick(False, (-1, 0), 0.0, None, 128), "causal")  # flash-attn: window (-1, 0) is causal
        self.assertEqual(pick(True, (200, -1), 0.0, None, 128), "causal")  # a window past seqlen_k is unbounded
        self.assertEqual(pick(True, (32, -1), 0.0, None, 128), "sliding_window_causal")
        self.assertEqual(pick(False, (32, 8), 0.0, None, 128), "sliding_window")
        self.assertEqual(pick(True, (-1, -1), 30.0, None, 128), "softcap_causal")
        self.assertEqual(pick(True, (-1, -1), 0.0, torch.zeros(2), 128), "alibi_causal")
        # Combinations no built-in covers are composed in Python and compiled by the JIT.
        self.assertEqual(pick(False, (32, 8), 5.0, torch.zeros(1, 2), 128), "softcap_alibi_per_batch_sliding_window")

    def test_attention_inputs(self):
        from flashtile import interface as attention

        decl = flashtile.variants.alibi()
        with self.assertRaisesRegex(ValueError, "reads slopes"):
            attention._check_inputs(decl, {}, torch.device("cpu"), {})
        with self.assertRaisesRegex(ValueError, r"inputs\['slopes'\] must be torch.float32"):
            attention._check_inputs(decl, [torch.zeros(2, dtype=torch.int32)], torch.device("cpu"), {})
        with self.assertRaisesRegex(ValueError, r"has 3 elements; variant 'alibi' reads 2"):
            attention._check_inputs(decl, [torch.zeros(3)], torch.device("cpu"), {"slopes": 2})

    def test_fake_shapes(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            q = torch.empty(2, 100, 8, 128, dtype=torch.bfloat16, device="cuda")
            k = torch.empty(2, 50, 2, 128, dtype=torch.bfloat16, device="cuda")
            out, lse = torch.ops.flashtile.fwd(q, k, k, None, None, 0, 0, 0.1, "causal", [], [], None, False, False,
                                               None, None, None, None, None)
            self.assertEqual(tuple(out.shape), (2, 100, 8, 128))
            self.assertEqual((tuple(lse.shape), lse.dtype), ((2, 8, 100), torch.float32))
            qv = torch.empty(300, 8, 192, dtype=torch.float16, device="cuda")
            kv = torch.empty(200, 2, 192, dtype=torch.float16, device="cuda")
            vv = torch.empty(200, 2, 128, dtype=torch.float16, device="cuda")
            cu = torch.empty(3, dtype=torch.int32, device="cuda")
            out, lse = torch.ops.flashtile.fwd(qv, kv, vv, cu, cu, 150, 100, 0.1, "none", [], [], None, False, False,
                                               None, None, None, None, None)
            self.assertEqual((tuple(out.shape), tuple(lse.shape)), ((300, 8, 128), (8, 300)))


if __name__ == "__main__":
    unittest.main()
