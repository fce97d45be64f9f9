"""The C++ call path's loader (flashtile/_extension.py) where it cannot be built or is not wanted: its settings,
what call_path() says, and that the source ships with the package. tests/python/gpu/test_torch_integration.py
builds and runs it against PyTorch."""

import importlib.util
import os
import stat
import tempfile
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


class SharedCache(unittest.TestCase):
    """A module in the cache runs in the process: one that another user could have written is refused before it is
    loaded (ssh's StrictModes), unless FLASHTILE_SHARED_CACHE=1 accepts a shared cache."""

    def setUp(self):
        self.saved = (_extension._started, _extension._path_line)
        self.scratch = tempfile.TemporaryDirectory()  # 0700, under the sticky temporary folder
        self.root = os.path.join(self.scratch.name, "cache")
        self.env = mock.patch.dict(os.environ, {"FLASHTILE_CACHE_DIR": self.root})
        self.env.start()
        os.environ.pop("FLASHTILE_SHARED_CACHE", None)
        self.target = os.path.join(self.root, "torch-ext", "_fastpath-0123456789abcdef0123.so")

    def tearDown(self):
        self.env.stop()
        self.scratch.cleanup()
        _extension._started, _extension._path_line = self.saved

    def plant(self, folder_mode=0o700):
        _extension._make_folders(os.path.dirname(self.target))
        with open(self.target, "wb") as module:
            module.write(b"\x7fELF planted")
        os.chmod(self.target, 0o700)
        os.chmod(os.path.dirname(self.target), folder_mode)

    def test_folders_are_created_0700(self):
        _extension._make_folders(os.path.dirname(self.target))
        for folder in (self.root, os.path.dirname(self.target)):
            self.assertEqual(stat.S_IMODE(os.stat(folder).st_mode), 0o700, folder)

    def test_a_world_writable_cache_folder_is_refused(self):
        self.plant(0o777)
        folder = os.path.dirname(self.target)
        with self.assertRaisesRegex(flashtile.FlashtileError,
                                    rf"refusing to load '{self.target}' from the cache: folder '{folder}' is "
                                    r"writable by others \(mode 0777\).*chmod go-w.*FLASHTILE_CACHE_DIR.*"
                                    r"FLASHTILE_SHARED_CACHE=1"):
            _extension.check_trusted(self.target, self.root)

    def test_a_module_owned_by_another_uid_is_refused(self):
        self.plant()

        def stat_as_another(path):
            real = os.stat(path)
            return os.stat_result((real.st_mode, real.st_ino, real.st_dev, real.st_nlink, 4242, real.st_gid,
                                   real.st_size, real.st_atime, real.st_mtime, real.st_ctime))

        with self.assertRaisesRegex(flashtile.FlashtileError,
                                    rf"'{self.target}' is owned by uid 4242, not by you.*remove it"):
            _extension.check_trusted(self.target, self.root, stat=stat_as_another)

    def test_group_write_by_the_users_own_group_is_accepted(self):
        self.plant(0o770)
        with self.assertRaisesRegex(flashtile.FlashtileError, r"is writable by its group"):
            _extension.check_trusted(self.target, self.root, private_group=lambda gid, uid: False)
        _extension.check_trusted(self.target, self.root, private_group=lambda gid, uid: True)

    def test_a_writable_folder_above_the_cache_is_refused_unless_sticky(self):
        self.plant()
        os.chmod(self.scratch.name, 0o777)
        with self.assertRaisesRegex(flashtile.FlashtileError, rf"folder '{self.scratch.name}' is writable by others"):
            _extension.check_trusted(self.target, self.root)
        os.chmod(self.scratch.name, 0o1777)
        _extension.check_trusted(self.target, self.root)
        os.chmod(self.scratch.name, 0o700)

    def test_obtain_refuses_before_loading_and_the_opt_in_loads(self):
        self.plant(0o777)
        loaded = []
        with mock.patch.object(_extension, "_load", lambda path: loaded.append(path) or "module"):
            with self.assertRaisesRegex(flashtile.FlashtileError, r"refusing to load"):
                _extension._obtain(self.target)
            self.assertEqual(loaded, [])
            with mock.patch.dict(os.environ, {"FLASHTILE_SHARED_CACHE": "1"}):
                self.assertEqual(_extension._obtain(self.target), "module")
            self.assertEqual(loaded, [self.target])

    def test_start_falls_back_to_ctypes_with_the_reason(self):
        self.plant(0o777)
        _extension._started = False
        with mock.patch.object(_extension, "target_path", lambda: self.target), \
                mock.patch.object(_extension, "_load", lambda path: self.fail("loaded a module others could write")), \
                mock.patch.dict(os.environ, {"FLASHTILE_EXTENSION": "auto"}), \
                self.assertLogs("flashtile", "INFO"):
            _extension.start(lambda module, path: self.fail("activated"))
        self.assertRegex(flashtile.call_path(), r"^ctypes: the C\+\+ call path is not available: refusing to load")

    def test_the_default_home_cache_keeps_working(self):
        home = os.path.join(self.scratch.name, "home")
        os.mkdir(home, 0o755)
        with mock.patch.dict(os.environ, {"HOME": home}):
            del os.environ["FLASHTILE_CACHE_DIR"]
            self.assertEqual(_extension.cache_root(), os.path.join(home, ".cache", "flashtile"))
            self.target = os.path.join(_extension.cache_folder(), "_fastpath-0123456789abcdef0123.so")
            self.plant()
            _extension.check_trusted(self.target, _extension.cache_root())
            with mock.patch.object(_extension, "_load", lambda path: "module"):
                self.assertEqual(_extension._obtain(self.target), "module")


if __name__ == "__main__":
    unittest.main()
