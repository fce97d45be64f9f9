"""Mistakes in Python variants and bad descriptions are errors naming what is wrong (no GPU, no torch)."""

import unittest

import flashtile
from flashtile import dsl, variants
from flashtile.dsl import TraceError


def trace(variant):
    return variant.description()


class TracerErrors(unittest.TestCase):
    def assertTraceError(self, variant, text):
        with self.assertRaises(TraceError) as caught:
            trace(variant)
        self.assertIn(text, str(caught.exception))

    def test_mixed_types(self):
        self.assertTraceError(flashtile.Variant("x").score(lambda s, c, p: s + c.kv), "'add' mixes f32 and i32")

    def test_python_control_flow(self):
        def mask(c, p):
            return c.kv if c.kv < c.q else c.q  # `if` on a traced predicate

        self.assertTraceError(flashtile.Variant("x").mask(mask), "no Python truth value")
        self.assertTraceError(flashtile.Variant("x").mask(lambda c, p: (c.kv < c.q) and (c.kv > 0)),
                              "no Python truth value")

    def test_truncating_constant(self):
        self.assertTraceError(flashtile.Variant("x").mask(lambda c, p: c.kv < 2.5), "would be truncated")

    def test_undeclared_names(self):
        self.assertTraceError(flashtile.Variant("x").score(lambda s, c, p: s * p["cap"]), "parameter 'cap' is not declared")
        self.assertTraceError(flashtile.Variant("x").score(lambda s, c, p: s + p.load("bias", c.h)),
                              "input 'bias' is not declared")

    def test_wrong_result_type(self):
        self.assertTraceError(flashtile.Variant("x").mask(lambda c, p: c.kv), "hook mask: must return i1, got i32")
        self.assertTraceError(flashtile.Variant("x").score(lambda s, c, p: 1.0), "must return a traced expression")
        self.assertTraceError(flashtile.Variant("x").kv_range(lambda q, p: (q.first, q.last)), "flashtile.dsl.Range")

    def test_functions_check_their_operands(self):
        self.assertTraceError(flashtile.Variant("x").score(lambda s, c, p: dsl.tanh(c.kv)), "tanh takes f32, got i32")
        self.assertTraceError(flashtile.Variant("x").mask(lambda c, p: ~c.kv), "~ takes a predicate")
        self.assertTraceError(flashtile.Variant("x").score(lambda s, c, p: dsl.select(s, s, s)),
                              "select's condition must be a predicate")

    def test_expressions_of_another_trace(self):
        leaked = []

        def score(s, c, p):
            leaked.append(s)
            return s

        trace(flashtile.Variant("x").score(score))
        self.assertTraceError(flashtile.Variant("y").score(lambda s, c, p: s + leaked[0]), "two different traces")


class DeclarationErrors(unittest.TestCase):
    def test_names(self):
        with self.assertRaisesRegex(ValueError, "variant name"):
            flashtile.Variant("has space")
        with self.assertRaisesRegex(ValueError, "input 'x': dtype must be 'f32' or 'i32'"):
            flashtile.Variant("v").input("x", "f64")

    def test_parameter_bounds(self):
        with self.assertRaisesRegex(ValueError, "parameter 'cap' is 0.0; it must be a finite number > 0"):
            variants.softcap(0.0)
        window = variants.sliding_window()
        self.assertEqual(window.check_params({"left": 4}), [4.0, 0.0])
        with self.assertRaisesRegex(ValueError, "parameter 'left' is 2.5; it must be a whole number >= -1"):
            window.check_params([2.5, 0])
        with self.assertRaisesRegex(ValueError, "takes 2 value"):
            window.check_params([1])
        with self.assertRaisesRegex(ValueError, "has no parameter"):
            window.check_params({"width": 3})


class LibraryErrors(unittest.TestCase):
    def test_bad_descriptions(self):
        with self.assertRaisesRegex(flashtile.FlashtileError, "not JSON"):
            flashtile.variant_id("{nope")
        with self.assertRaisesRegex(flashtile.FlashtileError, "unknown built-in 'caual'"):
            flashtile.variant_id("caual")

    def test_compile_arguments(self):
        with self.assertRaisesRegex(flashtile.FlashtileError, "stage: 'sass'"):
            flashtile.compile_variant("causal", "sass")
        with self.assertRaisesRegex(flashtile.FlashtileError, "head_dim/head_dim_v: 100/100 is not supported"):
            flashtile.compile_variant("causal", "cuda", head_dim=100)
        with self.assertRaisesRegex(flashtile.FlashtileError, "arch: 'sm_75'"):
            flashtile.compile_variant("causal", "cuda", arch="sm_75")
        with self.assertRaisesRegex(ValueError, "dtype"):
            flashtile.compile_variant("causal", "cuda", dtype="f32")


if __name__ == "__main__":
    unittest.main()
