"""The ctypes mirrors of the C ABI's call structs match the C headers field for field: a small C program, generated
from the ctypes field list and compiled against CApi.h/CApiKvCache.h, prints every field's offset and size and the
struct's size. A field added, removed, reordered or retyped on either side fails here. No GPU, no torch."""

import ctypes
import os
import shutil
import subprocess
import tempfile
import unittest

from flashtile import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "runtime", "include")


def c_layout(header: str, struct: str, fields) -> dict:
    """{field: (offset, size)} and {"sizeof": (size, 0)} of `struct` as the C compiler lays it out."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("cc")
    if not compiler:
        raise unittest.SkipTest("no C compiler")
    lines = [f'#include "{header}"', "#include <stddef.h>", "#include <stdio.h>", "int main(void) {",
             f'  printf("sizeof %zu 0\\n", sizeof({struct}));']
    for name in fields:
        lines.append(f'  printf("{name} %zu %zu\\n", offsetof({struct}, {name}), sizeof((({struct} *)0)->{name}));')
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as work:
        source, program = os.path.join(work, "layout.c"), os.path.join(work, "layout")
        with open(source, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.run([compiler, "-std=c11", "-Wall", "-Werror", "-I", INCLUDE, "-o", program, source], check=True)
        output = subprocess.run([program], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in output.splitlines():
        name, offset, size = line.split()
        layout[name] = (int(offset), int(size))
    return layout


def ctypes_layout(struct) -> dict:
    layout = {"sizeof": (ctypes.sizeof(struct), 0)}
    for name, kind in struct._fields_:
        layout[name] = (getattr(struct, name).offset, ctypes.sizeof(kind))
    return layout


class CallStructs(unittest.TestCase):
    def assertSameLayout(self, header, c_struct, py_struct):
        names = [name for name, _ in py_struct._fields_]
        self.assertEqual(ctypes_layout(py_struct), c_layout(header, c_struct, names))

    def test_kvcache_call_matches_the_header(self):
        self.assertSameLayout("flashtile/runtime/CApiKvCache.h", "flashtile_kvcache_call", _lib.KvCacheCall)

    def test_forward_call_matches_the_header(self):
        self.assertSameLayout("flashtile/runtime/CApi.h", "flashtile_call", _lib.Call)

    def test_positions_match_the_header(self):
        self.assertSameLayout("flashtile/runtime/CApi.h", "flashtile_positions", _lib.Positions)
        self.assertSameLayout("flashtile/runtime/CApi.h", "flashtile_bwd_call", _lib.BwdCall)


if __name__ == "__main__":
    unittest.main()
