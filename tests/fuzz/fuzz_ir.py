#!/usr/bin/env python3
"""Bounded-time mutation fuzzing of flashtile-opt over the lit inputs.

Each run takes one seed program (a tests/lit file, or one `// -----` chunk of it), applies a few mutations that keep
it close to valid IR (integers replaced by boundary values, strings by hostile names, lines dropped, duplicated or
swapped, types and SSA names exchanged, bytes flipped), and runs it through one of the pass pipelines of the lit
tests, CUDA emission included. A diagnostic and a non-zero exit are the expected answer to bad IR; a crash (a
signal, a sanitizer report, an LLVM fatal error) or a hang is a bug: the input is saved and the run fails.

  fuzz_ir.py --opt build/tools/flashtile-opt --corpus tests/lit --seconds 60 [--seed N] [--out DIR]
"""
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import fuzzing

INTERESTING_INTS = ["0", "-1", "1", "2", "7", "15", "16", "17", "255", "256", "1023", "1024", "65535", "16777216",
                    "2147483647", "2147483648", "-2147483648", "4294967295", "4294967360", "9223372036854775807",
                    "-9223372036854775808", "99999999999999999999999"]
HOSTILE_STRINGS = ["", "q", "k", "v", "x", "none", "fa9", "default", "long", "sm_75", "sm_90a", "may", "full",
                   "seqlen", "key_offset", "ca\\22usal\\0Aint injected = 1;\\0A//", "a\\\\", "\\00", "\u00e9",
                   "a" * 300, "../../etc/passwd", "%s%n", "*/", "\\0A#include <x>"]
TYPES = ["bf16", "f16", "f32", "f64", "i1", "i8", "i32", "i64", "index"]
PIPELINES = [
    ["--canonicalize"],
    ["--tile-verify-program"],
    ["--tile-apply-schedule"],
    ["--tile-apply-schedule", "--tile-split-boundary"],
    ["--tile-apply-schedule", "--tile-split-boundary", "--tile-pipeline"],
    ["--tile-apply-schedule=block-m=64 block-n=32 warps=4 stages=2", "--tile-split-boundary", "--tile-pipeline"],
    ["--tile-apply-schedule=shape-class=short", "--tile-split-boundary", "--tile-pipeline",
     "--tile-lower-to-target=arch=sm_80"],
    ["--tile-apply-schedule", "--tile-split-boundary", "--tile-pipeline", "--tile-lower-to-target=arch=sm_90a"],
    ["--tile-verify-program", "--canonicalize", "--tile-apply-schedule", "--tile-split-boundary", "--tile-pipeline",
     "--tile-lower-to-target=arch=sm_90a", "--canonicalize", "--cse", "--tile-emit-cuda"],
    ["--tile-split-boundary", "--tile-pipeline", "--tile-lower-to-target=arch=sm_100a", "--tile-emit-cuda"],
    ["--tile-emit-cuda"],
]
RUN_TIMEOUT_S = 30
BATCH = 25


def load_seeds(corpus):
    seeds = []
    for path in sorted(pathlib.Path(corpus).rglob("*.mlir")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for chunk in re.split(r"^// -----\s*$", text, flags=re.M):
            # Diagnostics expectations and RUN lines mean nothing to a plain run.
            lines = [l for l in chunk.splitlines() if not l.lstrip().startswith("// RUN")]
            chunk = "\n".join(lines).strip()
            if "tile.func" in chunk:
                seeds.append((path.name, chunk + "\n"))
    return seeds


def mutate(text, rng):
    lines = text.splitlines()
    kind = rng.randrange(9)
    if kind == 0:  # an integer literal becomes a boundary value
        spots = [m for m in re.finditer(r"(?<![%\w#])-?\d+", text)]
        if spots:
            m = rng.choice(spots)
            return text[:m.start()] + rng.choice(INTERESTING_INTS) + text[m.end():]
    elif kind == 1:  # a string literal becomes a hostile name
        spots = list(re.finditer(r'"(?:[^"\\]|\\.)*"', text))
        if spots:
            m = rng.choice(spots)
            return text[:m.start()] + '"' + rng.choice(HOSTILE_STRINGS) + '"' + text[m.end():]
    elif kind == 2 and len(lines) > 1:  # drop a line
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines) + "\n"
    elif kind == 3 and lines:  # duplicate a line
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
        return "\n".join(lines) + "\n"
    elif kind == 4 and len(lines) > 1:  # swap two lines
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines) + "\n"
    elif kind == 5:  # exchange a type
        spots = [m for m in re.finditer(r"\b(" + "|".join(TYPES) + r")\b", text)]
        if spots:
            m = rng.choice(spots)
            return text[:m.start()] + rng.choice(TYPES) + text[m.end():]
    elif kind == 6:  # use another SSA value
        names = re.findall(r"%[\w#]+", text)
        spots = list(re.finditer(r"%[\w#]+", text))
        if spots and names:
            m = rng.choice(spots)
            return text[:m.start()] + rng.choice(names) + text[m.end():]
    elif kind == 7 and text:  # flip, insert or delete one byte
        i = rng.randrange(len(text))
        op = rng.randrange(3)
        if op == 0:
            return text[:i] + chr(rng.randrange(32, 127)) + text[i + 1:]
        if op == 1:
            return text[:i] + rng.choice("{}()<>[]:,=\"%@-0x") + text[i:]
        return text[:i] + text[i + 1:]
    elif kind == 8 and text:  # truncate
        return text[:rng.randrange(len(text))]
    return text


def main():
    parser = fuzzing.arguments(__doc__, "--programs", "mutated programs")
    parser.add_argument("--opt", required=True, help="the flashtile-opt binary")
    parser.add_argument("--corpus", required=True, help="directory of .mlir seed programs (tests/lit)")
    args = parser.parse_args()

    seeds = load_seeds(args.corpus)
    if not seeds:
        print("fuzz-ir: no seed programs under %s" % args.corpus, file=sys.stderr)
        return 2
    seed = fuzzing.seed_of(args)
    rng = random.Random(seed)
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="flashtile-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="flashtile-fuzz-work-"))
    print("fuzz-ir: %d seed programs, seed %d, %.0f s; crashing inputs go to %s" % (len(seeds), seed, args.seconds, out),
          flush=True)
    # Under a sanitizer build (scripts/sanitize.sh): MLIR's process-lifetime allocations are not leaks, and LLVM's
    # allocator annotations do not hold for the uninstrumented libMLIR (see sanitize.sh).
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=0:allow_user_poisoning=0"))
    deadline = time.monotonic() + args.seconds
    runs = failures = 0

    def run(pipeline, chunks):
        """Runs `chunks` (mutated programs) through `pipeline` in one process; returns (why it crashed, stderr)."""
        command = [args.opt, "-", "--split-input-file", *pipeline]
        if "--tile-emit-cuda" in pipeline:
            command += ["-o", str(work / "out.cu")]
        try:
            result = subprocess.run(command, input="\n// -----\n".join(chunks), capture_output=True, text=True,
                                    errors="replace", timeout=RUN_TIMEOUT_S, env=env)
            return fuzzing.crashed(result.returncode, result.stderr), result.stderr
        except subprocess.TimeoutExpired as e:
            stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return "no answer in %d s (a hang)" % RUN_TIMEOUT_S, stderr

    try:
        while time.monotonic() < deadline and (args.programs == 0 or runs < args.programs):
            # One process runs a batch of mutants (--split-input-file): starting MLIR dominates a run's time.
            pipeline = rng.choice(PIPELINES)
            batch = []
            for _ in range(BATCH):
                name, text = rng.choice(seeds)
                for _ in range(1 + rng.randrange(2)):
                    text = mutate(text, rng)
                batch.append((name, text.replace("// -----", "//")))
            runs += len(batch)
            why, stderr = run(pipeline, [text for _, text in batch])
            if not why:
                continue
            # Find the mutants that crash on their own, and keep them.
            culprits = [(n, t, w, e) for n, t in batch for w, e in [run(pipeline, [t])] if w]
            if not culprits:
                culprits = [("a batch of %d mutants" % len(batch), "\n// -----\n".join(t for _, t in batch), why, stderr)]
            for name, text, why, stderr in culprits:
                failures += 1
                case = out / ("crash-%d-%d.mlir" % (seed, failures))
                case.write_text(text)
                print("fuzz-ir: CRASH (%s) on a mutation of %s:\n  %s %s --split-input-file %s\n%s" %
                      (why, name, args.opt, case, " ".join(repr(p) for p in pipeline), stderr[-3000:]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("fuzz-ir: %d mutated programs run, %d crashes (seed %d)" % (runs, failures, seed))
    if runs == 0:
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
