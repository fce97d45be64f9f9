"""The C ABI of libflashtile_jit.so checks its arguments before touching a GPU (no GPU, no torch)."""

import ctypes
import unittest

from flashtile import _lib


def forward(variant=b"none", dtype=1, batch=1, sq=16, sk=16, hq=2, hkv=2, d=64, dv=0, strides=True, params=None,
            inputs=None):
    lib = _lib.library()
    stride = (ctypes.c_longlong * 4)(sq * hq * d, hq * d, d, 1)
    kstride = (ctypes.c_longlong * 4)(sk * hkv * d, hkv * d, d, 1)
    vargs = None
    if params is not None or inputs is not None:
        params = params or []
        inputs = inputs or []
        vargs = ctypes.byref(_lib.VariantArgs((ctypes.c_float * len(params))(*params), len(params),
                                              (ctypes.c_void_p * len(inputs))(*inputs), len(inputs)))
    fake = 1 << 20  # never dereferenced: every check here fails first
    rc = lib.lib.flashtile_forward_variant(lib.runtime(), fake, fake, fake, fake, fake, dtype, batch, sq, sk, hq, hkv, d,
                                           dv, stride if strides else None, kstride, kstride, stride, 0.0, variant,
                                           vargs, None)
    return rc, lib.lib.flashtile_last_error().decode()


class ForwardChecks(unittest.TestCase):
    def assertRejected(self, text, **kwargs):
        rc, message = forward(**kwargs)
        self.assertEqual(rc, -1)
        self.assertIn(text, message)

    def test_arguments(self):
        self.assertRejected("stride arrays must not be NULL", strides=False)
        self.assertRejected("dtype: 7", dtype=7)
        self.assertRejected("head", d=100)
        self.assertRejected("heads", hq=3, hkv=2)

    def test_variant_numbers_are_checked_by_the_jit(self):
        self.assertRejected("left = -5 is not accepted", variant=b"sliding_window", params=[-5, 0])
        self.assertRejected("takes 2 parameters, got 1", variant=b"sliding_window", params=[3])
        self.assertRejected("cap = 0 is not accepted", variant=b"softcap", params=[0.0])
        self.assertRejected("inputs[0] ('slopes') is null", variant=b"alibi", inputs=[None])

    def test_registered_description_is_checked_too(self):
        from flashtile import variants

        vid = variants.sliding_window().id.encode()
        self.assertRejected("left = 2.5 is not accepted", variant=vid, params=[2.5, 0])

    def test_enable_jit_needs_a_runtime(self):
        lib = _lib.library()
        self.assertEqual(lib.lib.flashtile_enable_jit(None), -1)
        self.assertIn("rt must not be NULL", lib.lib.flashtile_last_error().decode())

    def test_register_rejects_bad_descriptions(self):
        with self.assertRaisesRegex(_lib.FlashtileError, "registering the variant: .*\"format\""):
            _lib.register_variant('{"name": "x"}')


if __name__ == "__main__":
    unittest.main()
