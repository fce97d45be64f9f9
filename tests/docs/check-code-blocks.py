#!/usr/bin/env python3
"""Builds or runs the fenced code blocks of README.md, CONTRIBUTING.md and docs/*.md, so the docs cannot go stale.

Each markdown file gets a scratch copy of the tree (its top-level entries linked, `build` the given build folder) in
which its blocks run in order:
  sh, bash, shell  run with `bash -e -o pipefail`, build/tools first on PATH;
  python           run with the package of python/ and the built libflashtile_jit.so;
  cpp, c++, c      compiled (-fsyntax-only) with the include folders of README.md's build line;
  cmake            must be written to a file (below);
  anything else    prose (text, mlir, none): not run.
An HTML comment on the line before a fence changes that:
  <!-- gpu -->               needs a GPU: not run (Python still byte-compiled), reported with that reason;
  <!-- not-run: REASON -->   a synopsis, or effects outside the scratch copy: not run, reported with REASON;
  <!-- file: PATH -->        written to PATH in the scratch copy, for a later block (a program and its build line).
Exit status 1 if any block fails, with the block's file, line and output.

Usage: check-code-blocks.py --root ROOT --build BUILD [--jit-library LIB] [FILE.md ...]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^<!--\s*(gpu|not-run:\s*(?P<reason>.+?)|file:\s*(?P<path>\S+))\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
SHELL, PYTHON, CPP, C, CMAKE = ("sh", "bash", "shell"), ("python", "py"), ("cpp", "c++"), ("c",), ("cmake",)
INCLUDES = ["-I.", "-Ibuild", "-Iruntime/include", "-Idsl/include", "-I/usr/lib/llvm-22/include",
            "-I/usr/local/cuda/include"]
TIMEOUT_S = 600


class Block:
    def __init__(self, doc, line, info, text, marker):
        self.doc, self.line, self.lang, self.text, self.marker = doc, line, info.lower(), text, marker

    def where(self):
        return f"{self.doc}:{self.line} ({self.lang or 'no language'})"


def blocks_of(path, shown):
    """The fenced blocks of a markdown file, each with the marker comment on the line before its fence."""
    lines = open(path, encoding="utf-8").read().split("\n")
    result, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
        start, fence, body = i + 1, m.group("fence"), []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(m.group("indent")):] if lines[i].startswith(m.group("indent")) else lines[i])
            i += 1
        if i == len(lines):
            raise SystemExit(f"{shown}:{start}: a code fence is never closed")
        result.append(Block(shown, start, m.group("info"), "\n".join(body) + "\n", marker))
        i += 1
    return result


def scratch_tree(root, build):
    """A folder that looks like the repository root: its entries linked, `build` the build folder."""
    work = tempfile.mkdtemp(prefix="flashtile-docs-")
    for name in os.listdir(root):
        if name == ".git" or name.startswith("build"):
            continue
        os.symlink(os.path.join(root, name), os.path.join(work, name))
    os.symlink(os.path.abspath(build), os.path.join(work, "build"))
    return work


def run(command, work, env, block, log):
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{block.where()}: did not finish in {TIMEOUT_S} s"
    output = done.stdout.decode(errors="replace")
    seconds = time.monotonic() - start
    if done.returncode != 0:
        tail = "\n".join(output.rstrip().split("\n")[-30:])
        return f"{block.where()}: exit status {done.returncode} after {seconds:.1f} s\n{indent(block.text)}\n" \
               f"  output:\n{indent(tail)}"
    log(f"{block.where()}: ok ({seconds:.1f} s)")
    return None


def indent(text):
    return "\n".join("    " + line for line in text.rstrip("\n").split("\n"))


def byte_compile(block):
    try:
        compile(block.text, block.where(), "exec")
    except SyntaxError as error:
        return f"{block.where()}: does not compile as Python: {error}"
    return None


def check_block(block, work, env, log):
    """None if the block is fine (run, compiled, written or skipped for a stated reason), else the failure."""
    marker = block.marker
    kind = marker.group(1) if marker else None
    if kind and kind.startswith("file:"):
        path = marker.group("path")
        if os.path.isabs(path) or ".." in path.split("/"):
            return f"{block.where()}: file: {path} must be a relative path inside the tree"
        target = os.path.join(work, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            out.write(block.text)
        log(f"{block.where()}: written to {path}")
        return None
    if kind == "gpu" or (kind and kind.startswith("not-run")):
        reason = "needs a GPU" if kind == "gpu" else marker.group("reason")
        failure = byte_compile(block) if block.lang in PYTHON else None
        log(f"{block.where()}: skipped, {reason}" + (" (byte-compiled)" if block.lang in PYTHON else ""))
        return failure
    if block.lang in SHELL:
        return run(["bash", "-e", "-o", "pipefail", "-c", block.text], work, env, block, log)
    if block.lang in PYTHON:
        return byte_compile(block) or run([sys.executable, "-c", block.text], work, env, block, log)
    if block.lang in CPP + C:
        suffix, compiler = (".cpp", ["g++", "-std=c++20"]) if block.lang in CPP else (".c", ["gcc", "-std=c11"])
        source = os.path.join(work, f".block-{block.line}{suffix}")
        with open(source, "w", encoding="utf-8") as out:
            out.write(block.text)
        return run(compiler + ["-fsyntax-only"] + INCLUDES + [source], work, env, block, log)
    if block.lang in CMAKE:
        return f"{block.where()}: a cmake block is not run by itself; say where it goes (<!-- file: PATH -->) or " \
               "why it is not run (<!-- not-run: REASON -->)"
    log(f"{block.where()}: prose, not run")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True, help="the repository")
    parser.add_argument("--build", required=True, help="its build folder (scripts/build.sh's ./build)")
    parser.add_argument("--jit-library", help="libflashtile_jit.so for Python blocks (default: BUILD/capi/...)")
    parser.add_argument("files", nargs="*", help="markdown files (default: README.md, CONTRIBUTING.md, docs/*.md)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = args.files or [os.path.join(root, "README.md"), os.path.join(root, "CONTRIBUTING.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "*.md")))
    failures, counted = [], 0
    for path in files:
        shown = os.path.relpath(path, root) if os.path.abspath(path).startswith(root + os.sep) else path
        blocks = blocks_of(path, shown)
        work = scratch_tree(root, args.build)
        env = dict(os.environ)
        env.update({
            "PATH": os.path.join(work, "build", "tools") + os.pathsep + env.get("PATH", ""),
            "PYTHONPATH": os.path.join(work, "python"),
            "FLASHTILE_LIBRARY": os.path.abspath(args.jit_library or os.path.join(args.build, "capi",
                                                                                   "libflashtile_jit.so")),
            "FLASHTILE_CACHE_DIR": os.path.join(work, ".cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        try:
            for block in blocks:
                counted += 1
                failure = check_block(block, work, env, print)
                if failure:
                    print(f"FAILED {failure}")
                    failures.append(failure)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{counted} code blocks in {len(files)} files; {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
