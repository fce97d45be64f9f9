"""Blocks of a larger problem through the Python package, without a GPU: attention()'s position keywords
(reference_attention's: q_offset, k_offset, head_offset, seqlen_q_global, seqlen_k_global, heads_q_global,
heads_kv_global, cu_seqlens_q_global, cu_seqlens_k_global) checked and turned into the torch ops' arguments and the C
ABI's flashtile_positions, and flashtile.parallel's Kernel opt-in (offsets=True, FLASHTILE_PARALLEL_KERNEL_OFFSETS).
What reaches the kernels is test_positions_host.py's (a fake driver); the values the runtime refuses are
PositionsTest.cpp's."""

import os
import unittest
from unittest import mock

try:
    import torch
except ImportError:  # the rest of tests/python runs without PyTorch
    torch = None


@unittest.skipIf(torch is None, "PyTorch is not installed")
class Keywords(unittest.TestCase):
    def check(self, varlen=False, batch=2, **keywords):
        from flashtile import _positions

        return _positions.check(torch.device("cpu"), varlen, batch, **keywords)

    def test_defaults_make_a_plain_call(self):
        from flashtile import _positions

        self.assertEqual(self.check(), _positions.PLAIN)
        self.assertEqual(self.check(q_offset=0, head_offset=0, heads_q_global=None), _positions.PLAIN)
        # A caller that places every block (flashtile.parallel) runs the module with offsets at zeros too.
        self.assertEqual(self.check(force=True), ([0] * 7, None, None, None, None))

    def test_dense_and_varlen_keywords_become_the_ops_arguments(self):
        positions, *arrays = self.check(q_offset=128, k_offset=64, seqlen_q_global=512, seqlen_k_global=256,
                                        head_offset=4, heads_q_global=16, heads_kv_global=8)
        self.assertEqual(positions, [128, 64, 512, 256, 4, 16, 8])
        self.assertEqual(arrays, [None] * 4)
        positions, q_offsets, k_offsets, cu_q, cu_k = self.check(
            varlen=True, q_offset=3, k_offset=[1, 2], cu_seqlens_k_global=torch.tensor([0, 5, 9], dtype=torch.int32))
        self.assertEqual(positions, [0] * 7)
        self.assertEqual(q_offsets.tolist(), [3, 3])  # one int places every sequence
        self.assertEqual(k_offsets.tolist(), [1, 2])
        self.assertIsNone(cu_q)
        self.assertEqual((cu_k.tolist(), cu_k.dtype), ([0, 5, 9], torch.int32))

    def test_a_blocks_inputs_are_the_larger_problems(self):
        # A block's hooks read the built-ins' arrays at global heads and keys: a placed call counts the larger
        # problem's slopes and document starts (batch 2, 4 query heads and 8 keys a sequence locally; 8 heads and 32
        # keys globally); unplaced, the call's own; under varlen with global sequences the key arrays go unchecked.
        from flashtile.interface import _call_input_counts as counts

        self.assertEqual(counts("alibi", 2, 4, 16, False, (8, 32, None)), {"slopes": 8})
        self.assertEqual(counts("alibi", 2, 4, 16, False, None), {"slopes": 4})
        self.assertEqual(counts("alibi_per_batch", 2, 4, 16, False, (8, 32, None)), {"slopes": 16})
        self.assertEqual(counts("document_mask", 2, 4, 16, False, (8, 32, None)), {"doc_start": 64})
        self.assertEqual(counts("document_mask", 2, 4, 16, False, None), {"doc_start": 16})
        self.assertEqual(counts("document_mask", 2, 4, 40, True, (None, None, torch.tensor([0, 30, 70]))), {})
        self.assertEqual(counts("sinks", 2, 4, 16, False, (None, 32, None)), {"sinks": 4})

    def test_bad_keywords_are_refused_naming_them(self):
        cases = [
            (dict(q_offset=-1), ValueError, "q_offset is -1; it must be >= 0"),
            (dict(k_offset=True), TypeError, "k_offset must be a whole number >= 0, got bool"),
            (dict(head_offset=1.5), TypeError, "head_offset must be a whole number"),
            (dict(seqlen_q_global=2 ** 31), ValueError, "seqlen_q_global is 2147483648; accepted: -2147483648 to"),
            (dict(heads_kv_global=-2), ValueError, "heads_kv_global is -2"),
            (dict(cu_seqlens_q_global=[0, 1, 2]), ValueError, "cu_seqlens_q_global and cu_seqlens_k_global are for "
                                                              "varlen calls"),
            (dict(varlen=True, seqlen_k_global=9), ValueError, "varlen: pass the larger problem's sequences as "
                                                               "cu_seqlens_q_global"),
            (dict(varlen=True, q_offset=[1, 2, 3]), ValueError, "q_offset must be a sequence of 2 ints"),
            (dict(varlen=True, k_offset=[1, -2]), ValueError, r"k_offset\[1\] is -2"),
            (dict(varlen=True, cu_seqlens_k_global=torch.zeros(3, dtype=torch.int64)), ValueError,
             r"cu_seqlens_k_global must be an int32 tensor of shape \(3,\)"),
            (dict(varlen=True, cu_seqlens_q_global=[0, 4]), ValueError, "cu_seqlens_q_global must be a sequence of 3"),
        ]
        for keywords, error, text in cases:
            with self.subTest(keywords), self.assertRaisesRegex(error, text):
                self.check(**keywords)

    def test_the_c_struct_carries_every_value(self):
        from flashtile import _lib, _positions

        self.assertIsNone(_positions.struct(*_positions.PLAIN)[0])
        cu = torch.tensor([0, 5, 9], dtype=torch.int32)
        offsets = torch.tensor([1, 2], dtype=torch.int32)
        c, held = _positions.struct([1, 2, 3, 4, 5, 6, 7], offsets, None, cu, None)
        self.assertIsInstance(c, _lib.Positions)
        self.assertEqual([getattr(c, n) for n in _positions.INT_NAMES], [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual((c.q_offsets, c.k_offsets, c.cu_seqlens_q_global, c.cu_seqlens_k_global),
                         (offsets.data_ptr(), None, cu.data_ptr(), None))
        self.assertEqual(len(held), 2)
        # Arrays without positions are a caller's mistake, not a plain call.
        with self.assertRaisesRegex(ValueError, "q_offsets is given but positions is None"):
            _positions.struct(None, offsets, None, None, None)
        with self.assertRaisesRegex(ValueError, "positions must be 7 ints"):
            _positions.struct([1, 2], None, None, None, None)


@unittest.skipIf(torch is None, "PyTorch is not installed")
class KernelOptIn(unittest.TestCase):
    """The GPU kernels' local op places the blocks of the calls that need it by default (validated on the GPU machine,
    2026-12-07); offsets=False refuses what would then be inexact (test_parallel.py's KernelPath), offsets=True places
    every block."""

    def hooks(self, name):
        from flashtile.interface import resolve_variant
        from flashtile.parallel._hooks import Hooks

        return Hooks(resolve_variant(name).decl)

    def test_the_default_and_the_environment(self):
        from flashtile.parallel import Kernel

        with mock.patch.dict(os.environ, {"FLASHTILE_PARALLEL_KERNEL_OFFSETS": ""}):
            default = Kernel()
            self.assertIsNone(default.offsets)
            # What needs offsets gets an op that places every block; what does not keeps local positions.
            for mode, name in (("ring", "alibi"), ("ring", "sliding_window"), ("ring", "document_mask"),
                               ("ulysses", "alibi")):
                with self.subTest(f"{mode} {name}"):
                    placed = default.check(mode, self.hooks(name), 2, True)
                    self.assertIsNot(placed, default)
                    self.assertIs(placed.offsets, True)
            self.assertIs(default.check("ring", self.hooks("causal"), 2, False).offsets, True)  # not split alike
            for mode, name in (("ring", "causal"), ("ring", "none"), ("ulysses", "sliding_window")):
                self.assertIs(default.check(mode, self.hooks(name), 2, True), default)
            self.assertIsNone(default.offsets)  # the op asked for is left as it was
        with mock.patch.dict(os.environ, {"FLASHTILE_PARALLEL_KERNEL_OFFSETS": "0"}):
            self.assertIs(Kernel().offsets, False)
            with self.assertRaisesRegex(NotImplementedError, "variant 'alibi' cannot run ring attention.*without "
                                                             "position offsets"):
                Kernel().check("ring", self.hooks("alibi"), 2, True)
        with mock.patch.dict(os.environ, {"FLASHTILE_PARALLEL_KERNEL_OFFSETS": "1"}):
            self.assertTrue(Kernel().offsets)
            self.assertFalse(Kernel(offsets=False).offsets)
        with mock.patch.dict(os.environ, {"FLASHTILE_PARALLEL_KERNEL_OFFSETS": "yes"}):
            with self.assertRaisesRegex(ValueError, "FLASHTILE_PARALLEL_KERNEL_OFFSETS='yes': accepted: 1 .*, 0 "):
                Kernel()
        with self.assertRaisesRegex(TypeError, "offsets must be True, False or None"):
            Kernel(offsets=1)

    def test_opted_in_blocks_are_placed(self):
        from flashtile import _positions
        from flashtile.parallel import Block, Kernel

        for mode, name in (("ring", "sliding_window"), ("ring", "alibi"), ("ring", "document_mask"),
                           ("ulysses", "alibi")):
            Kernel(offsets=True).check(mode, self.hooks(name), 2, True)  # nothing refused
        q = torch.zeros(2, 16, 4, 8)
        dense = Block("alibi", dict(q_offset=16, k_offset=0, seqlen_q_global=32, seqlen_k_global=32))
        self.assertEqual(Kernel(offsets=True)._positions(dense, q, None), ([16, 0, 32, 32, 0, 0, 0], None, None,
                                                                            None, None))
        self.assertEqual(Kernel(offsets=False)._positions(dense, q, None), _positions.PLAIN)
        # Every opted-in block runs the module with offsets, the first one's zeros included.
        self.assertEqual(Kernel(offsets=True)._positions(Block("alibi", {}), q, None)[0], [0] * 7)
        cu = torch.tensor([0, 5, 16], dtype=torch.int32)
        varlen = Block("causal", dict(q_offset=[5, 11], k_offset=[0, 0], cu_seqlens_q_global=[0, 10, 32],
                                      cu_seqlens_k_global=[0, 10, 32]), [0, 5, 16], [0, 5, 16])
        positions, q_offsets, k_offsets, cu_q, cu_k = Kernel(offsets=True)._positions(varlen, q[0], cu)
        self.assertEqual(positions, [0] * 7)
        self.assertEqual((q_offsets.tolist(), k_offsets.tolist()), ([5, 11], [0, 0]))
        self.assertEqual((cu_q.tolist(), cu_k.tolist()), ([0, 10, 32], [0, 10, 32]))


if __name__ == "__main__":
    unittest.main()
