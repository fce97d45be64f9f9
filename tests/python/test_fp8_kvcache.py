"""flash_attn_with_kvcache over an e4m3 KV cache without a GPU (docs/fp8.md, "An e4m3 KV cache"): host/
fp8_kvcache_calls.py runs in a child process with the stand-in torch and the fake driver of FakeCuda.c; the JIT
compiles the e4m3 cache's kernels for real. It checks what reaches the launches (the cache, the descales), that
explain_kvcache names the e4m3 cache's kernel, and every refusal by name. The descale checks also run here on real
PyTorch tensors (CPU). Skipped without a C compiler, cuda.h or NVRTC (the host path), or PyTorch (the checks)."""

import unittest

from fake_driver import run_host_script

try:
    import torch
except ImportError:
    torch = None


class Fp8KvCacheHostPath(unittest.TestCase):
    def test_fp8_kvcache_host_calls(self):
        run_host_script(self, "fp8_kvcache_calls.py", "fp8 kvcache host calls: ok")


@unittest.skipIf(torch is None or not hasattr(torch, "float8_e4m3fn"), "needs PyTorch with torch.float8_e4m3fn")
class Fp8KvCacheDescales(unittest.TestCase):
    def test_cache_descales_are_checked_by_name(self):
        from flashtile import fp8

        q = torch.zeros(2, 1, 8, 64, dtype=torch.bfloat16)
        ok = torch.ones(2, 4)
        self.assertEqual(fp8.check_cache_descales(q, True, 2, 4, None, None, None), (None, None))
        k_descale, v_descale = fp8.check_cache_descales(q, True, 2, 4, None, ok, ok.t().contiguous().t())
        self.assertTrue(v_descale.is_contiguous())
        with self.assertRaisesRegex(ValueError, "q_descale: flash_attn_with_kvcache takes q in torch.float16 or "
                                                "torch.bfloat16"):
            fp8.check_cache_descales(q, True, 2, 4, ok, None, None)
        with self.assertRaisesRegex(ValueError, r"k_descale, v_descale: descales apply to torch.float8_e4m3fn caches "
                                                r"only; k_cache is torch.bfloat16"):
            fp8.check_cache_descales(q, False, 2, 4, None, ok, ok)
        with self.assertRaisesRegex(ValueError, r"k_descale must have shape \(2, 4\) \(batch, nheads_k\), got \(4, 2\)"):
            fp8.check_cache_descales(q, True, 2, 4, None, ok.t(), None)
        with self.assertRaisesRegex(ValueError, "v_descale must be torch.float32"):
            fp8.check_cache_descales(q, True, 2, 4, None, None, ok.double())
        with self.assertRaisesRegex(ValueError, "k_descale must be on meta"):
            fp8.check_cache_descales(q.to("meta"), True, 2, 4, None, ok, None)
        with self.assertRaisesRegex(TypeError, "k_descale must be None or a torch.float32 tensor"):
            fp8.check_cache_descales(q, True, 2, 4, None, 2.0, None)

    def test_public_call_refuses_an_e4m3_q_and_q_descale(self):
        import flashtile

        q8 = torch.zeros(2, 1, 8, 64, dtype=torch.float8_e4m3fn)
        with self.assertRaisesRegex(ValueError, "q: torch.float8_e4m3fn q is not supported by flash_attn_with_kvcache"):
            flashtile.flash_attn_with_kvcache(q8, q8, q8)


if __name__ == "__main__":
    unittest.main()
