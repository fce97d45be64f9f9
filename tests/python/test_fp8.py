"""FP8 (e4m3) calls: flash-attn 3's descales checked by name, dtypes refused by name (e5m2, mixed, e4m3 KV caches),
the output dtype, the C struct's descale fields, and the refusal of an FP8 backward. No GPU needed; skipped where
PyTorch (or its float8 dtypes) is not installed."""

import ctypes
import unittest

try:
    import torch
except ImportError:  # CI installs no PyTorch: the C ABI tests cover the rest
    torch = None

import flashtile

E4M3 = getattr(torch, "float8_e4m3fn", None) if torch is not None else None


@unittest.skipIf(E4M3 is None, "PyTorch with float8 dtypes is not installed")
class Fp8Arguments(unittest.TestCase):
    def q(self, shape=(2, 16, 4, 64)):
        return torch.zeros(shape, dtype=E4M3)

    def test_descales_are_checked_by_name(self):
        from flashtile import fp8

        q = self.q()
        ok = torch.ones(2, 2)
        self.assertIsNone(fp8.check_descales(q, 2, 2, (None, None, None)))
        checked = fp8.check_descales(q, 2, 2, (ok, None, ok.t().contiguous().t()))
        self.assertIsNone(checked[1])
        self.assertTrue(checked[2].is_contiguous())
        with self.assertRaisesRegex(ValueError, r"k_descale must have shape \(2, 2\) \(batch, nheads_k\), got \(2, 4\)"):
            fp8.check_descales(q, 2, 2, (None, torch.ones(2, 4), None))
        with self.assertRaisesRegex(ValueError, r"v_descale must be torch.float32 \(fp32 descales, as flash-attn 3\), "
                                                r"got torch.float16"):
            fp8.check_descales(q, 2, 2, (None, None, ok.half()))
        with self.assertRaisesRegex(TypeError, "q_descale must be None or a torch.float32 tensor of shape"):
            fp8.check_descales(q, 2, 2, (1.0, None, None))
        with self.assertRaisesRegex(ValueError, "q_descale must be on meta"):
            fp8.check_descales(q.to("meta"), 2, 2, (ok, None, None))
        with self.assertRaisesRegex(ValueError, "q_descale, v_descale: descales apply to torch.float8_e4m3fn inputs "
                                                "only; q is torch.bfloat16"):
            fp8.check_descales(q.bfloat16(), 2, 2, (ok, None, ok))

    def test_dtypes(self):
        from flashtile import fp8, interface

        q = self.q()
        self.assertEqual(interface._DTYPE_CODES[E4M3], 2)  # FLASHTILE_E4M3
        self.assertEqual(fp8.output_dtype(E4M3), torch.bfloat16)
        self.assertEqual(fp8.output_dtype(torch.float16), torch.float16)
        with self.assertRaisesRegex(ValueError, "q: torch.float8_e5m2 is not supported: FP8 attention takes "
                                                "torch.float8_e4m3fn"):
            interface._check_tensor("q", q.to(torch.float8_e5m2), 4, "(b, s, h, d)")
        with self.assertRaisesRegex(ValueError, "q, k, v must have one dtype"):
            interface._check_common(q, q.bfloat16(), q, 0.0, None, False)
        with self.assertRaisesRegex(ValueError, "q: torch.float8_e4m3fn q is not supported by flash_attn_with_kvcache"):
            fp8.refuse_e4m3_query("q", q)
        fp8.refuse_e4m3_query("q", q.bfloat16())  # 16-bit q: accepted
        # e4m3's 16-byte vectors hold 16 elements: a stride of 8 is copied into a kernel-ready layout.
        padded = torch.zeros(2, 16, 4, 72, dtype=E4M3)[..., :64]
        self.assertIsNot(interface._kernel_ready(padded), padded)
        self.assertIs(interface._kernel_ready(q), q)

    def test_public_calls_refuse_descales_of_16_bit_inputs(self):
        q = torch.zeros(2, 16, 4, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "q must be a CUDA tensor"):
            flashtile.flash_attn_func(q, q, q, q_descale=torch.ones(2, 4))

    def test_c_struct_has_the_descales(self):
        from flashtile import _lib

        names = [name for name, _ in _lib.Call._fields_]
        # Appended after the fields before them, and followed by the positions and the workspace (appended after them).
        self.assertEqual(names[-6:], ["q_descale", "k_descale", "v_descale", "positions", "workspace",
                                      "workspace_bytes"])
        self.assertEqual(ctypes.sizeof(_lib.Call) % ctypes.sizeof(ctypes.c_void_p), 0)

    def test_fake_output_is_bf16(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            q = torch.empty(2, 100, 8, 128, dtype=E4M3, device="cuda")
            k = torch.empty(2, 50, 2, 128, dtype=E4M3, device="cuda")
            d = torch.empty(2, 2, dtype=torch.float32, device="cuda")
            out, lse = torch.ops.flashtile.fwd_fp8(q, k, k, None, None, 0, 0, 0.1, "causal", [], [], None, False,
                                                   d, d, None)
            self.assertEqual((tuple(out.shape), out.dtype), ((2, 100, 8, 128), torch.bfloat16))
            self.assertEqual((tuple(lse.shape), lse.dtype), ((2, 8, 100), torch.float32))

    def test_backward_refuses(self):
        from flashtile import fp8

        with self.assertRaisesRegex(RuntimeError, r"the backward of an FP8 \(torch.float8_e4m3fn\) attention call is "
                                                  "not supported"):
            fp8._fwd_fp8_backward(None, None, None)


if __name__ == "__main__":
    unittest.main()
