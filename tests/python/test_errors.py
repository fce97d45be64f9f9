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
        with self.assertRaisesRegex(flashtile.FlashtileError, "arch: unknown arch 'sm_75'"):
            flashtile.compile_variant("causal", "cuda", arch="sm_75")
        with self.assertRaisesRegex(ValueError, "dtype"):
            flashtile.compile_variant("causal", "cuda", dtype="f32")



class CStrings(unittest.TestCase):
    """Strings cross into C, which ends them at the first NUL: one inside is refused by name before the library is
    reached, never truncated (compile_variant("causal\\x00junk") compiled causal)."""

    def test_nul_bytes_are_refused_by_name(self):
        cases = [
            (lambda: flashtile.compile_variant("causal\x00junk", "cuda"), "variant", 6),
            (lambda: flashtile.compile_variant("causal", "cuda\x00", arch="sm_90a"), "stage", 4),
            (lambda: flashtile.compile_variant("causal", "cuda", arch="sm_90a\x00sm_80"), "arch", 6),
            (lambda: flashtile.compile_variant('{"name": "x"}\x00' + "z" * 200, "tile"), "variant", 13),
            (lambda: flashtile.variant_id("causal\x00"), "variant", 6),
            (lambda: flashtile._lib.register_variant('{"name": "x"}\x00tail'), "description", 13),
        ]
        for call, name, index in cases:
            with self.subTest(name=name, index=index):
                with self.assertRaisesRegex(ValueError, rf"^{name} contains a NUL character at index {index} of "
                                                        r"\d+ \(.*\); a C string ends at its first NUL"):
                    call()

    def test_long_inputs_are_cut_in_the_message(self):
        with self.assertRaises(ValueError) as caught:
            flashtile.compile_variant("\x00" + "x" * 100000)
        self.assertLess(len(str(caught.exception)), 400)
        self.assertIn("of 100001", str(caught.exception))

    def test_non_strings_are_type_errors(self):
        with self.assertRaisesRegex(TypeError, r"^variant must be a str, got bytes"):
            flashtile.compile_variant(b"causal")



class ParamDeclarations(unittest.TestCase):
    def test_bounds_must_be_finite_numbers_named_by_the_parameter(self):
        for bound, value in (("max", float("inf")), ("min", float("-inf")), ("max", float("nan")), ("min", "0"),
                             ("max", True)):
            with self.subTest(bound=bound, value=value):
                with self.assertRaisesRegex(ValueError, rf"^variant 'v': parameter 'cap': {bound} is .*; a bound is a "
                                                        rf"finite number, or None \(the default\) for no {bound}imum"):
                    flashtile.Variant("v").param("cap", 1.0, **{bound: value})
        flashtile.Variant("v").param("cap", 1.0, min=0.0, max=1e30)

    def test_a_parameter_is_declared_once(self):
        v = flashtile.Variant("v").param("left", 1.0).param("right", 2.0)
        with self.assertRaisesRegex(ValueError, r"^variant 'v': parameter 'left' is already declared"):
            v.param("left", 3.0)
        self.assertEqual(v.param_names, ["left", "right"])

if __name__ == "__main__":
    unittest.main()
