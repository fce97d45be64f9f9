"""flash_attn_with_kvcache with real PyTorch and no GPU: its checks run on fake CUDA tensors (FakeTensorMode) as under
torch.compile, they reach the custom op flashtile::fwd_kvcache, whose fake implementation gives the output shapes,
and bad arguments are errors naming them. Skipped where PyTorch is not installed (tests/python/host covers the
same checks with a stand-in torch and the fake driver)."""

import re
import unittest

try:
    import torch
except ImportError:
    torch = None

import flashtile


@unittest.skipIf(torch is None, "PyTorch is not installed")
class KvCacheWithTorch(unittest.TestCase):
    def setUp(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        from flashtile import interface

        self.interface = interface
        self.compiling = interface._is_compiling
        interface._is_compiling = lambda: True  # the path torch.compile traces: checks, then the custom op
        self.mode = FakeTensorMode()
        self.mode.__enter__()

    def tearDown(self):
        self.mode.__exit__(None, None, None)
        self.interface._is_compiling = self.compiling

    def cuda(self, *shape, dtype=torch.bfloat16 if torch else None):
        return torch.empty(*shape, dtype=dtype, device="cuda")

    def test_shapes_through_the_custom_op(self):
        q, k_cache = self.cuda(3, 2, 8, 128), self.cuda(3, 256, 2, 128)
        k = self.cuda(3, 2, 2, 128)
        seqlens = self.cuda(3, dtype=torch.int32)
        out, lse = flashtile.flash_attn_with_kvcache(q, k_cache, k_cache.clone(), k, k.clone(), cache_seqlens=seqlens,
                                                     causal=True, return_softmax_lse=True)
        self.assertEqual(tuple(out.shape), (3, 2, 8, 128))
        self.assertEqual((tuple(lse.shape), lse.dtype), ((3, 8, 2), torch.float32))
        pool, table = self.cuda(9, 64, 2, 192), self.cuda(3, 4, dtype=torch.int32)
        out = flashtile.flash_attn_with_kvcache(self.cuda(3, 1, 8, 192), pool, self.cuda(9, 64, 2, 128),
                                                cache_seqlens=7, block_table=table)
        self.assertEqual(tuple(out.shape), (3, 1, 8, 128))

    def test_bad_arguments(self):
        q, cache = self.cuda(2, 1, 8, 128), self.cuda(2, 256, 2, 128)
        seqlens = self.cuda(2, dtype=torch.int32)
        kvc = flashtile.flash_attn_with_kvcache
        cases = [
            ("q must be a CUDA tensor", dict(q=torch.empty(2, 1, 8, 128, dtype=torch.bfloat16))),
            ("k_cache must have a contiguous last dimension", dict(k_cache=self.cuda(2, 256, 128, 2).transpose(2, 3))),
            ("k_cache: strides", dict(k_cache=self.cuda(2, 256, 2, 132)[..., :128])),  # rows 132 elements apart
            ("page size (dimension 1 of a paged cache) is 100",
             dict(k_cache=self.cuda(4, 100, 2, 128), v_cache=self.cuda(4, 100, 2, 128),
                  block_table=self.cuda(2, 2, dtype=torch.int32))),
            ("block_table must be torch.int32", dict(block_table=self.cuda(2, 2, dtype=torch.int64))),
            ("cache_seqlens must be torch.int32", dict(cache_seqlens=self.cuda(2, dtype=torch.int64))),
            ("cache_leftpad", dict(cache_leftpad=seqlens)),
            ("rotary_cos and rotary_sin", dict(rotary_cos=self.cuda(256, 32))),
            ("num_splits must be 0", dict(num_splits=200)),
        ]
        for text, changes in cases:
            kwargs = dict(dict(q=q, k_cache=cache, v_cache=cache, cache_seqlens=seqlens), **changes)
            with self.subTest(text), self.assertRaisesRegex((ValueError, NotImplementedError), re.escape(text)):
                kvc(**kwargs)

    def test_op_schema_declares_the_caches_mutated(self):
        schema = torch.ops.flashtile.fwd_kvcache.default._schema
        mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        self.assertEqual(mutated, ["k_cache", "v_cache"])


if __name__ == "__main__":
    unittest.main()
