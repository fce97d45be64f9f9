#!/usr/bin/env python3
"""Runs a command that must fail cleanly: a non-zero exit (not a crash), nothing on stdout, exactly one line on
stderr, and nothing written under OUT (when given). Prints that line for FileCheck.

usage: one-error.py [--out OUT] [--lines N] [--status S] -- COMMAND ARGS...
  (N lines on stderr instead of 1; exit status S exactly: 2 for a command line not understood)
"""
import os
import subprocess
import sys


def main():
    args = sys.argv[1:]
    out = None
    expected_lines = 1
    expected_status = None
    while args[:1] in (["--out"], ["--lines"], ["--status"]):
        if args[0] == "--out":
            out = args[1]
        elif args[0] == "--lines":
            expected_lines = int(args[1])
        else:
            expected_status = int(args[1])
        args = args[2:]
    if args[:1] != ["--"] or len(args) < 2:
        sys.exit("usage: one-error.py [--out OUT] [--lines N] [--status S] -- COMMAND ARGS...")
    result = subprocess.run(args[1:], capture_output=True, text=True, timeout=300)
    problems = []
    if result.returncode == 0:
        problems.append("exit code 0")
    if result.returncode < 0 or result.returncode >= 128:
        problems.append(f"exit code {result.returncode}: killed by a signal")
    elif expected_status is not None and result.returncode != expected_status:
        problems.append(f"exit code {result.returncode}, not {expected_status}")
    if result.stdout:
        problems.append(f"stdout is not empty: {result.stdout[:200]!r}...")
    lines = result.stderr.splitlines()
    if len(lines) != expected_lines:
        problems.append(f"{len(lines)} lines on stderr, not {expected_lines}: {result.stderr[:2000]!r}")
    if out is not None and os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        problems.append(f"{out} was written")
    if problems:
        sys.exit("one-error.py: " + "; ".join(problems))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
