"""Variants written in Python build the programs of the C++ variants with the same hooks (no GPU, no torch)."""

import json
import unittest

import flashtile
from flashtile import dsl, variants


class BuiltinsWrittenInPython(unittest.TestCase):
    def test_every_builtin_has_a_python_twin(self):
        self.assertEqual(sorted(variants.names()), sorted(flashtile.builtin_variants()))

    def test_same_id_as_cpp(self):
        for name in variants.names():
            with self.subTest(variant=name):
                self.assertEqual(flashtile.variant_id(variants.by_name(name).description()), flashtile.variant_id(name))

    def test_same_tile_ir_and_cuda_as_cpp(self):
        for name in variants.names():
            described = variants.by_name(name).description()
            with self.subTest(variant=name, stage="tile"):
                self.assertEqual(flashtile.compile_variant(described, "tile"), flashtile.compile_variant(name, "tile"))
            with self.subTest(variant=name, stage="cuda"):
                python_cuda = flashtile.compile_variant(described, "cuda", "f16", 64, arch="sm_80")
                self.assertEqual(python_cuda, flashtile.compile_variant(name, "cuda", "f16", 64, arch="sm_80"))
                self.assertIn("__global__", python_cuda)

    def test_registration_returns_the_id(self):
        v = variants.softcap(12.0)
        self.assertEqual(v.id, flashtile.variant_id("softcap"))


class Tracing(unittest.TestCase):
    def test_statement_order_does_not_change_the_id(self):
        # One computation whose operands are made in different orders (GCC makes C++ operands right to left,
        # Python left to right): one program, because hook bodies are ordered operands-first.
        def mask_a(c, p):
            heads = c.sizes.heads_q()
            aligned = c.q_aligned()
            return (c.kv + heads) <= aligned

        def mask_b(c, p):
            aligned = c.q_aligned()
            heads = c.sizes.heads_q()
            return (c.kv + heads) <= aligned

        def mask_c(c, p):  # a different computation
            return (c.kv + c.sizes.heads_kv()) <= c.q_aligned()

        ids = [flashtile.variant_id(flashtile.Variant("m").mask(m).description()) for m in (mask_a, mask_b, mask_c)]
        self.assertEqual(ids[0], ids[1])
        self.assertNotEqual(ids[0], ids[2])
        tile = [flashtile.compile_variant(flashtile.Variant("m").mask(m).description(), "tile") for m in (mask_a, mask_b)]
        self.assertEqual(tile[0], tile[1])

    def test_unused_values_do_not_change_the_id(self):
        def mask(c, p):
            c.sizes.heads_q()  # traced, never used
            return c.kv <= c.q_aligned()

        self.assertEqual(flashtile.variant_id(flashtile.Variant("causal").mask(mask)
                                              .kv_range(variants.causal().hooks()["kv_range"])
                                              .full_range(variants.causal().hooks()["full_range"]).description()),
                         flashtile.variant_id("causal"))

    def test_combinations_compile(self):
        combined = flashtile.both(variants.softcap(), variants.sliding_window(), "softcap_window")
        self.assertEqual(combined.param_names, ["cap", "left", "right"])
        cuda = flashtile.compile_variant(combined.description(), "cuda", "bf16", 128)
        self.assertIn("tanh", cuda.lower())
        self.assertTrue(combined.id.startswith("softcap_window#"))

    def test_user_variant_with_input_and_sink(self):
        def score(s, c, p):  # a learned relative-position bias per head, clamped distance
            distance = dsl.minimum(dsl.abs(c.q_aligned() - c.kv), c.kv.literal(127))
            return s + p.load("bias", c.h * 128 + distance) * p["gain"]

        v = (flashtile.Variant("rel_bias").param("gain", 1.0).input("bias", "f32").input("sink", "f32")
             .score(score).sink(lambda h, p: p.load("sink", h.h)))
        ir = flashtile.compile_variant(v.description(), "tile")
        self.assertIn('tile.input "bias"', ir)
        self.assertIn("tile.score_mod", ir)
        self.assertIn("__global__", flashtile.compile_variant(v.description(), "cuda", "bf16", 64))

    def test_description_is_json_in_the_documented_format(self):
        d = json.loads(variants.sliding_window(8, 2).description())
        self.assertEqual(d["format"], "flashtile.variant.v1")
        self.assertEqual([p["name"] for p in d["params"]], ["left", "right"])
        self.assertEqual(sorted(d["hooks"]), ["full_range", "kv_range", "mask"])
        self.assertEqual(d["params"][0]["value"], 8.0)

    def test_description_changes_with_the_variant(self):
        v = flashtile.Variant("x").mask(lambda c, p: c.kv <= c.q)
        first = v.description()
        v.mask(lambda c, p: c.kv < c.q)
        self.assertNotEqual(first, v.description())


if __name__ == "__main__":
    unittest.main()
