"""The C++ call path's loader (flashtile/_extension.py) where it cannot be built or is not wanted: its settings,
what call_path() says, and that the source ships with the package. tests/python/gpu/test_torch_integration.py
builds and runs it against PyTorch."""

import importlib.util
import os
import unittest
from unittest import mock

import flashtile
from flashtile import _extension


class Extension(unittest.TestCase):
    def setUp(self):
        self.saved = (_extension._started, _extension._path_line)
        _extension._started = False

    def tearDown(self):
        _extension._started, _extension._path_line = self.saved

    def test_source_ships_with_the_package(self):
        self.assertTrue(os.path.isfile(_extension.SOURCE), _extension.SOURCE)
        with open(_extension.SOURCE) as source:
            self.assertIn("PyInit__fastpath", source.read())

    def test_modes(self):
        for value, expected in (("", "auto"), ("auto", "auto"), (" Wait ", "wait"), ("require", "require"),
                                ("off", "off")):
            with mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": value}):
                self.assertEqual(_extension.mode(), expected)
        with mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": "yes"}):
            with self.assertRaisesRegex(flashtile.FlashtileError,
                                        r"FLASHTILE_EXTENSION='yes': accepted: auto, wait, require, off"):
                _extension.mode()

    def test_off(self):
        activated = []
        with mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": "off"}):
            _extension.start(lambda module, path: activated.append(module))
        self.assertEqual(flashtile.call_path(), "ctypes: FLASHTILE_EXTENSION=off")
        self.assertEqual(activated, [])

    def test_started_once(self):
        with mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": "off"}):
            _extension.start(lambda module, path: None)
        with mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": "require"}):
            _extension.start(lambda module, path: None)  # a second start does nothing
        self.assertEqual(flashtile.call_path(), "ctypes: FLASHTILE_EXTENSION=off")

    @unittest.skipIf(importlib.util.find_spec("torch") is not None, "PyTorch is installed: the path can be built")
    def test_without_torch(self):
        # auto and wait fall back to ctypes with the reason (one INFO line on the "flashtile" logger); require raises.
        for value in ("auto", "wait"):
            _extension._started = False
            with mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": value}), \
                    self.assertLogs("flashtile", "INFO") as logged:
                _extension.start(lambda module, path: self.fail("activated without PyTorch"))
            self.assertRegex(flashtile.call_path(), r"^ctypes: the C\+\+ call path is not available: .*torch")
            self.assertEqual(len(logged.output), 1, logged.output)
        with self.assertRaisesRegex(flashtile.FlashtileError, r"^the C\+\+ call path cannot be built: .*torch"):
            flashtile.build_extension()
        _extension._started = False
        with mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": "require"}):
            with self.assertRaisesRegex(flashtile.FlashtileError,
                                        r"^FLASHTILE_EXTENSION=require: ctypes: the C\+\+ call path is not available"):
                _extension.start(lambda module, path: None)


if __name__ == "__main__":
    unittest.main()
