"""The C++ call path (_fastpath.cpp): built against the installed PyTorch on first use, cached, and optional.

The wheel holds no code compiled against PyTorch (one wheel serves every CPython >= 3.10 and every PyTorch). The
first attention call of a process looks for `_fastpath` built for this PyTorch (version, build, Python) in
FLASHTILE_CACHE_DIR/torch-ext; if it is there, warm calls go through it from then on. If not, it is compiled (one
C++ file, about 10-20 s of one core) and calls go through ctypes until it is loaded. Where it cannot be built (no
C++ compiler, no Python.h, PyTorch without its headers) calls stay on ctypes, with one INFO line on the "flashtile"
logger; flashtile.call_path() says which path is active and why.

FLASHTILE_EXTENSION: auto (the default: build in a background thread), wait (build before the first call
returns), require (as wait, and an error if it cannot be built), off (ctypes only). build_extension() builds it
ahead of time.

A module loaded from the cache runs in this process, so whoever can write the cache could run code here. As ssh's
StrictModes (and the runtime's kernel cache, runtime/include/flashtile/runtime/CacheTrust.h): the cache's folders
are created 0700 and the module 0700; before it is loaded, the module and every folder on its path must be owned
by this user (or root) and not writable by group or others (a sticky folder above the cache, as /tmp, is accepted;
so is group write by this user's own private group). FLASHTILE_SHARED_CACHE=1 accepts a cache others can write.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import stat as statmodes
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from typing import Callable, Optional

from ._lib import FlashtileError

SHARED_VARIABLE = "FLASHTILE_SHARED_CACHE"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fastpath.cpp")
MODE_VARIABLE = "FLASHTILE_EXTENSION"
MODES = ("auto", "wait", "require", "off")
# A build lock older than this was left by a process that died while building.
_STALE_LOCK_SECONDS = 600
_BUILD_TIMEOUT_SECONDS = 600

_log = logging.getLogger("flashtile")
_state_lock = threading.Lock()
_started = False
_path_line = "ctypes: no attention call has run yet (the C++ call path is looked for on the first)"


def call_path() -> str:
    """Which path warm attention calls take: "extension: <the module's file>" (the C++ call path) or
    "ctypes: <why>" (not built yet, building, disabled, or why it cannot be built)."""
    return _path_line


def _set(line: str) -> None:
    global _path_line
    _path_line = line


def mode() -> str:
    value = os.environ.get(MODE_VARIABLE, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise FlashtileError(f"{MODE_VARIABLE}={value!r}: accepted: {', '.join(MODES)}")
    return value


def cache_root() -> str:
    return os.environ.get("FLASHTILE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "flashtile")


def cache_folder() -> str:
    return os.path.join(cache_root(), "torch-ext")


def shared_cache() -> bool:
    """Whether the caller accepts a cache other users can write (FLASHTILE_SHARED_CACHE, anything but "" or "0")."""
    return os.environ.get(SHARED_VARIABLE, "") not in ("", "0")


def _private_group(gid: int, uid: int) -> bool:
    """Whether group `gid` is user `uid`'s own: its primary group, with no other member (Debian's user groups)."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(uid)
        return user.pw_gid == gid and all(member == user.pw_name for member in grp.getgrgid(gid).gr_mem)
    except (ImportError, KeyError):
        return False


def _why_untrusted(st, uid: int, sticky_accepted: bool, private_group) -> str:
    if st.st_uid not in (uid, 0):
        return f"is owned by uid {st.st_uid}, not by you (uid {uid}) or root"
    if sticky_accepted and statmodes.S_ISDIR(st.st_mode) and st.st_mode & statmodes.S_ISVTX:
        return ""
    mode = f"mode {statmodes.S_IMODE(st.st_mode):04o}"
    if st.st_mode & statmodes.S_IWOTH:
        return f"is writable by others ({mode})"
    if st.st_mode & statmodes.S_IWGRP and not private_group(st.st_gid, uid):
        return f"is writable by its group, gid {st.st_gid} ({mode})"
    return ""


def check_trusted(path: str, root: str, stat: Callable = os.stat, lstat: Callable = os.lstat,
                  uid: Optional[int] = None, private_group: Callable = _private_group) -> None:
    """Raises FlashtileError unless `path` (a file in the cache rooted at `root`) may be loaded: it and each folder
    up to / owned by this user or root and not writable by group or others, but for sticky folders above `root`.
    A missing file passes (there is nothing to load). stat, lstat, uid and private_group are the tests' seams."""
    uid = os.geteuid() if uid is None else uid

    def refuse(at: str, why: str, folder: bool) -> FlashtileError:
        fix = f"chmod go-w '{at}' (and chown it to yourself)" if folder else "remove it (it is built again)"
        kind = "folder " if folder else ""
        return FlashtileError(
            f"refusing to load '{path}' from the cache: {kind}'{at}' {why}, so another user could have planted it. "
            f"Fix: {fix}, or set FLASHTILE_CACHE_DIR to a folder of your own, or set {SHARED_VARIABLE}=1 if you "
            f"trust everyone who can write there")

    try:
        st = stat(path)
    except FileNotFoundError:
        return
    why = _why_untrusted(st, uid, False, private_group)
    if why:
        raise refuse(path, why, False)
    root = os.path.realpath(root)
    at = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    while True:
        inside = at == root or at.startswith(root.rstrip(os.sep) + os.sep)
        why = _why_untrusted(lstat(at), uid, not inside, private_group)
        if why:
            raise refuse(at, why, True)
        parent = os.path.dirname(at)
        if parent == at:
            return
        at = parent


def _make_folders(folder: str) -> None:
    """Creates `folder` and its missing parents, each 0700 (the umask's mode for a shared cache); folders that exist
    are left as they are."""
    mode = 0o777 if shared_cache() else 0o700
    missing = []
    at = os.path.abspath(folder)
    while not os.path.isdir(at):
        missing.append(at)
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    for at in reversed(missing):
        try:
            os.mkdir(at, mode)
        except FileExistsError:
            pass


def target_path() -> str:
    """Where the module built from this source for this PyTorch and this Python lives."""
    import torch

    identity = "\n".join([
        torch.__version__, str(getattr(torch.version, "git_version", "")), os.path.dirname(torch.__file__),
        sys.implementation.cache_tag or "", sysconfig.get_config_var("EXT_SUFFIX") or "",
    ])
    digest = hashlib.sha256()
    with open(SOURCE, "rb") as source:
        digest.update(source.read())
    digest.update(identity.encode())
    return os.path.join(cache_folder(), f"_fastpath-{digest.hexdigest()[:20]}.so")


def build_command(output: str) -> list:
    """The compiler's command line: one C++ file against PyTorch's headers and libraries (as
    torch.utils.cpp_extension builds an extension, without its ninja step and its lock)."""
    import torch
    from torch.utils import cpp_extension

    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not compiler:
        raise FlashtileError("no C++ compiler (c++, g++ or clang++ on PATH, or CXX)")
    python_include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(python_include, "Python.h")):
        raise FlashtileError(f"Python's headers are missing ({python_include}/Python.h: install python3-dev)")
    includes = cpp_extension.include_paths()
    if not any(os.path.exists(os.path.join(p, "torch", "csrc", "autograd", "python_variable.h")) for p in includes):
        raise FlashtileError(f"PyTorch's C++ headers are missing (looked in {', '.join(includes)})")
    libraries = cpp_extension.library_paths()
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return ([compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden",
             f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
            + [f"-isystem{p}" for p in includes + [python_include]]
            + [SOURCE, "-o", output]
            + [f"-L{p}" for p in libraries] + [f"-Wl,-rpath,{p}" for p in libraries]
            + ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"])


def _load(path: str):
    loader = importlib.machinery.ExtensionFileLoader("flashtile._fastpath", path)
    spec = importlib.util.spec_from_loader(loader.name, loader, origin=path)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _build(target: str) -> None:
    """Compiles into a file of this process and renames it into place (a reader sees a whole module or none); the
    compiler's output goes to target.log."""
    temporary = f"{target}.{os.getpid()}.tmp"
    command = build_command(temporary)
    with open(target + ".log", "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=_BUILD_TIMEOUT_SECONDS)
    if result.returncode != 0:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise FlashtileError(f"the C++ compiler failed (exit {result.returncode}; its output: {target}.log)")
    if not shared_cache():
        os.chmod(temporary, 0o700)  # the linker's mode follows the umask (group-writable under umask 002)
    os.replace(temporary, target)


def _take_lock(lock: str) -> bool:
    """One process builds at a time: the others wait for its module (a lock older than _STALE_LOCK_SECONDS is
    taken over)."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if time.time() - os.path.getmtime(lock) > _STALE_LOCK_SECONDS:
                os.unlink(lock)
        except OSError:
            pass
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _obtain(target: str):
    """The module at `target`, built first if missing (or if the file there does not load). Refused, before it is
    loaded, where another user could have written it (check_trusted)."""
    shared = shared_cache()
    if os.path.exists(target):
        if not shared:
            check_trusted(target, cache_root())
        try:
            return _load(target)
        except ImportError:
            os.unlink(target)  # built against something else than what is installed now: built again below
    _make_folders(os.path.dirname(target))
    lock = target + ".lock"
    deadline = time.time() + _BUILD_TIMEOUT_SECONDS
    while not os.path.exists(target):
        if time.time() > deadline:
            raise FlashtileError(f"waited {_BUILD_TIMEOUT_SECONDS} s for another process's build ({lock})")
        if _take_lock(lock):
            try:
                _set(f"ctypes: building the C++ call path ({target}.log)")
                _build(target)
            finally:
                os.unlink(lock)
        else:
            _set(f"ctypes: another process is building the C++ call path ({lock})")
            time.sleep(0.5)
    if not shared:
        check_trusted(target, cache_root())
    return _load(target)


def _attempt(activate: Callable[[object, str], None], strict: bool) -> None:
    try:
        target = target_path()
        module = _obtain(target)
        activate(module, target)
        _set(f"extension: {target}")
    except Exception as error:  # anything: the ctypes path serves every call
        line = f"ctypes: the C++ call path is not available: {error}"
        _set(line)
        if strict:
            raise FlashtileError(f"{MODE_VARIABLE}=require: {line}") from error
        _log.info("flashtile: %s (flashtile.call_path() says which path calls take)", line)


def start(activate: Callable[[object, str], None]) -> None:
    """Called once the runtime exists: loads the C++ call path, or starts its build (as FLASHTILE_EXTENSION says).
    activate(module, path) makes a loaded module the one warm calls use."""
    global _started
    with _state_lock:
        if _started:
            return
        _started = True
    chosen = mode()
    if chosen == "off":
        _set(f"ctypes: {MODE_VARIABLE}=off")
        return
    if chosen == "auto":
        try:
            cached = os.path.exists(target_path())
        except Exception as error:  # no real PyTorch (the test suite's stand-in): ctypes
            _set(f"ctypes: the C++ call path is not available: {error}")
            _log.info("flashtile: %s", call_path())
            return
        if not cached:
            _set("ctypes: building the C++ call path in the background")
            threading.Thread(target=_attempt, args=(activate, False), name="flashtile-extension", daemon=True).start()
            return
    _attempt(activate, chosen == "require")


def wait(timeout: Optional[float] = None) -> str:
    """Waits for a background build (FLASHTILE_EXTENSION=auto) to finish; returns call_path()."""
    for thread in threading.enumerate():
        if thread.name == "flashtile-extension":
            thread.join(timeout)
    return call_path()


def build_extension() -> str:
    """Builds the C++ call path for the installed PyTorch now, unless it is cached (after installing the package or
    PyTorch, say), and returns its file; raises FlashtileError with the reason where it cannot be built. The calls
    of this process load it on their first call (FLASHTILE_EXTENSION other than off)."""
    try:
        path = target_path()
        _obtain(path)
    except FlashtileError:
        raise
    except Exception as error:
        raise FlashtileError(f"the C++ call path cannot be built: {error}") from error
    return path
