#!/usr/bin/env python3
"""Every ELF executable and shared library under the given directories has a RUNPATH (and RPATH) of absolute
directories only: an empty entry means the current directory and a relative one a directory relative to it, so a
library planted there (libstdc++.so.6, libcuda.so.1) would be loaded by whoever runs the binary from there.

The dynamic section is read here, from the file's section table, rather than through readelf, so the check needs
nothing installed. `--self-test CC` first links a probe with an empty entry and checks that it is caught.

  check_runpath.py DIR... [--self-test CC]
"""
import os
import struct
import subprocess
import sys
import tempfile

ELF_MAGIC = b"\x7fELF"
ET_EXEC, ET_DYN = 2, 3
SHT_DYNAMIC = 6
DT_NULL, DT_RPATH, DT_RUNPATH = 0, 15, 29


def search_paths(path):
    """[(tag name, text)] of DT_RPATH and DT_RUNPATH, or None when `path` is no 64-bit little-endian ELF
    executable or shared library."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 64 or data[:4] != ELF_MAGIC or data[4] != 2 or data[5] != 1:
        return None
    e_type = struct.unpack_from("<H", data, 16)[0]
    if e_type not in (ET_EXEC, ET_DYN):
        return None
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = []
    for i in range(shnum):
        at = shoff + i * shentsize
        if at + 64 > len(data):
            raise ValueError("truncated section table")
        sh_type, = struct.unpack_from("<I", data, at + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", data, at + 24)
        sh_link, = struct.unpack_from("<I", data, at + 40)
        sections.append((sh_type, sh_offset, sh_size, sh_link))
    found = []
    for sh_type, offset, size, link in sections:
        if sh_type != SHT_DYNAMIC:
            continue
        strtab_offset, strtab_size = sections[link][1], sections[link][2]
        for at in range(offset, offset + size - 15, 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == DT_NULL:
                break
            if tag in (DT_RPATH, DT_RUNPATH):
                start = strtab_offset + value
                end = data.index(b"\0", start, strtab_offset + strtab_size)
                found.append(("RUNPATH" if tag == DT_RUNPATH else "RPATH", data[start:end].decode(errors="replace")))
    return found


def bad_entries(text):
    """The entries of a search path that are not absolute ($ORIGIN-based ones are: they name the binary's folder)."""
    return [entry for entry in text.split(":") if not (entry.startswith("/") or entry.startswith("$ORIGIN")
                                                       or entry.startswith("${ORIGIN}"))]


def check(roots):
    """(ELF files checked, problems)."""
    checked, problems = 0, []
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                try:
                    paths = search_paths(path)
                except (OSError, ValueError, struct.error) as e:
                    problems.append("%s: cannot read its dynamic section: %s" % (path, e))
                    continue
                if paths is None:
                    continue
                checked += 1
                for tag, text in paths:
                    bad = bad_entries(text)
                    if bad:
                        problems.append("%s: %s '%s' has %s" % (path, tag, text, ", ".join(
                            "an empty entry (the current directory)" if not b else "the relative entry '%s'" % b
                            for b in bad)))
    return checked, problems


def self_test(cc):
    """A probe linked with RUNPATH '/usr/lib:' must be reported."""
    with tempfile.TemporaryDirectory(prefix="flashtile-runpath-") as work:
        source = os.path.join(work, "probe.c")
        with open(source, "w") as f:
            f.write("int main(void) { return 0; }\n")
        subprocess.run([cc, source, "-o", os.path.join(work, "probe"), "-Wl,-rpath,/usr/lib:",
                        "-Wl,--enable-new-dtags"], check=True)
        checked, problems = check([work])
        if checked != 1 or len(problems) != 1 or "empty entry" not in problems[0]:
            print("check_runpath: the self-test's probe (RUNPATH '/usr/lib:') was not caught: %r" % problems)
            return False
    return True


def main(argv):
    roots, cc = [], None
    args = iter(argv)
    for arg in args:
        if arg == "--self-test":
            cc = next(args, None)
        else:
            roots.append(arg)
    if not roots:
        print(__doc__, file=sys.stderr)
        return 2
    if cc and not self_test(cc):
        return 1
    checked, problems = check(roots)
    for problem in problems:
        print("check_runpath: " + problem)
    if checked == 0:
        print("check_runpath: no ELF executables or shared libraries under %s" % ", ".join(roots))
        return 1
    print("check_runpath: %d ELF files under %s, %d with a non-absolute search path" %
          (checked, ", ".join(roots), len({p.split(":")[0] for p in problems})))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
