"""Integers reach the C ABI whole or not at all: ctypes keeps the low 32 bits of a larger Python int without a word,
so every C int is range-checked first (no GPU, no torch)."""

import unittest

from flashtile import _lib


class IntRanges(unittest.TestCase):
    def test_compile_variant_head_dim_past_a_c_int(self):
        # 2**32 + 64 used to compile head dim 64.
        with self.assertRaisesRegex(ValueError, r"head_dim is 4294967360; accepted: -2147483648 to 2147483647"):
            _lib.compile_variant("none", head_dim=2 ** 32 + 64)
        with self.assertRaisesRegex(ValueError, r"head_dim_v is -4294967232"):
            _lib.compile_variant("none", head_dim=64, head_dim_v=-(2 ** 32) + 64)
        with self.assertRaisesRegex(TypeError, "head_dim must be an integer, got float"):
            _lib.compile_variant("none", head_dim=64.5)

    def test_in_range_values_still_reach_the_library(self):
        # A C int the library refuses is the library's error, not a range error.
        with self.assertRaisesRegex(_lib.FlashtileError, "head_dim/head_dim_v: 100/100 is not supported"):
            _lib.compile_variant("none", head_dim=100)

    def test_struct_fields(self):
        call = _lib.Call()
        _lib.set_ints(call, batch=2, seqlen_q=2 ** 31 - 1)
        self.assertEqual((call.batch, call.seqlen_q), (2, 2 ** 31 - 1))
        with self.assertRaisesRegex(ValueError, "seqlen_k is 2147483648"):
            _lib.set_ints(call, seqlen_k=2 ** 31)
        kv = _lib.KvCacheCall()
        with self.assertRaisesRegex(ValueError, "page_size is 4294967296"):
            _lib.set_ints(kv, page_size=2 ** 32)
        with self.assertRaisesRegex(TypeError, "num_splits must be an integer, got bool"):
            _lib.set_ints(kv, num_splits=True)


if __name__ == "__main__":
    unittest.main()
