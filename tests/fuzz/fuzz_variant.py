#!/usr/bin/env python3
"""Bounded-time fuzzing of variant descriptions (the JSON that flashtile_register_variant, flashtile_variant_id and
flashtile_compile_variant take) through the C ABI.

Seeds are the Python package's built-in variants, traced. Each case mutates one along the axes a caller controls:
depth (arrays and objects nested around a value, up to 200,000 levels), size (long node chains, many params,
inputs, rules, huge strings, each around its limit), numbers (boundary integers and floats in constants, operand
indices and parameter bounds), names (hostile strings for names, ops, hooks and types), and structure (values of
the wrong kind, dropped keys, truncation, flipped bytes). VariantFuzzWorker runs a batch of cases in one process;
an error is the expected answer, a crash (a signal, a sanitizer report) or a hang is a bug: the case is saved and
the run fails.

  fuzz_variant.py --worker build/tests/fuzz/flashtile_variant_fuzz_worker --python python --seconds 60 [--seed N]
"""
import copy
import json
import os
import pathlib
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import fuzzing

INTERESTING_INTS = [0, -1, 1, 2, 3, 7, 8, 9, 63, 64, 65, 255, 256, 257, 1024, 1025, 2**31 - 1, 2**31, -2**31,
                    -2**31 - 1, 2**32 + 64, 2**53, 2**63 - 1, 2**63, -2**63, 10**30]
INTERESTING_FLOATS = [0.0, -0.0, 0.5, -2.5, 1e-45, 1e-320, 3.4028235e38, 3.5e38, 1e308, -1e308]
# Tokens that are not JSON numbers or that overflow a double.
NUMBER_TOKENS = ["1e999", "-1e999", "NaN", "Infinity", "-0", "00", "1.", ".5", "0x10", "1e", "-"]
HOSTILE_STRINGS = ["", "a", "_", "0a", "a" * 64, "a" * 65, "a" * 100000, "inf", "-inf", "nan", "score", "q", "kv",
                   "seqlen_q", "key_offset", "batch", "f32", "i32", "i1", "f64", "bf16", "add", "select", "load",
                   "param", "arg", "const", "é", "\u0000", "a\u0000b", "\"", "\\", "*/", "%s%n", "../x",
                   "x\ny", "cap", "slopes", "flashtile.variant.v0", "flashtile.variant.v1"]
OPS = ["arg", "size", "dim", "param", "load", "const", "add", "sub", "mul", "div", "min", "max", "lt", "le", "gt",
       "ge", "eq", "ne", "and", "or", "neg", "not", "abs", "tanh", "exp", "exp2", "log", "sqrt", "to_float", "to_int",
       "select", "frobnicate"]
HOOKS = ["score", "mask", "kv_range", "full_range", "sink", "scores"]
DEPTHS = [1, 5, 31, 32, 33, 64, 1000, 40000, 200000]
# A deep value is spliced into the text in place of this string: Python's JSON encoder recurses too.
DEEP = "\u0001deep:%d\u0001"
# The worst accepted description compiles in seconds: minutes mean a hang.
BATCH_TIMEOUT_S = 120
CASE_TIMEOUT_S = 60
BATCH = 16


def load_seeds(python_dir):
    sys.path.insert(0, python_dir)
    from flashtile import variants  # noqa: E402  (the package under test, from the source tree)

    seeds = []
    for name in variants.names():
        seeds.append(json.loads(variants.by_name(name).description()))
    return seeds


def all_values(value, path=()):
    """(path, value) of every value inside `value`, depth first."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from all_values(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from all_values(v, path + (i,))


def replace_at(root, path, new):
    if not path:
        return new
    parent = root
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return root


def deep_text(depth, rng):
    opener, closer = rng.choice([("[", "]"), ("{\"a\":", "}")])
    return opener * depth + "1" + closer * depth


def chain(hook, n, rng):
    """A valid `hook` of about n nodes: a chain of ops, each node using the one before (the shape that nests)."""
    if hook in ("score", "sink"):  # f32 -> f32
        nodes = [["arg", 0]] if hook == "score" else [["arg", 0], ["to_float", 0]]
        op = rng.choice(["add", "mul", "sub", "neg", "tanh", "exp", "max", "select"])
        first = len(nodes) - 1
        while len(nodes) < n:
            i = len(nodes)
            if op in ("neg", "tanh", "exp"):
                nodes.append([op, i - 1])
            elif op == "select":
                nodes += [["lt", i - 1, first], ["select", i, i - 1, first]]
            else:
                nodes.append([op, i - 1, first])
        return {"nodes": nodes, "results": [len(nodes) - 1]}
    nodes = [["arg", 2], ["arg", 3]] if hook == "mask" else [["arg", 0], ["arg", 1]]
    while len(nodes) < max(n - 1, 3):
        nodes.append([rng.choice(["add", "sub", "max", "min"]), len(nodes) - 1, len(nodes) % 2])
    if hook == "mask":
        nodes.append(["le", 1, len(nodes) - 1])
        return {"nodes": nodes, "results": [len(nodes) - 1]}
    return {"nodes": nodes, "results": [0, len(nodes) - 1]}


def mutate_tree(doc, rng):
    """One mutation of a parsed description; returns the new document (any JSON value)."""
    values = list(all_values(doc))
    path, value = rng.choice(values)
    kind = rng.randrange(11)
    if kind == 0:  # depth: a deeply nested value in place of this one
        return replace_at(doc, path, DEEP % rng.choice(DEPTHS))
    if kind == 1:  # size: a long chain in one hook, or several
        if not isinstance(doc, dict):
            doc = {}
        if not isinstance(doc.get("hooks"), dict):
            doc["hooks"] = {}
        hooks = doc["hooks"]
        for hook in rng.sample(["score", "sink", "mask", "kv_range", "full_range"], rng.randrange(1, 4)):
            hooks[hook] = chain(hook, rng.choice([2, 17, 100, 255, 256, 257, 1000]), rng)
        return doc
    if kind == 2 and isinstance(doc, dict):  # size: many params, inputs or rules
        count = rng.choice([8, 9, 4, 5, 64, 65, 1000, 100000])
        which = rng.choice(["params", "inputs", "rules"])
        if which == "params":
            doc["params"] = [{"name": "p%d" % i, "value": 1} for i in range(count)]
        elif which == "inputs":
            doc["inputs"] = [{"name": "in%d" % i, "type": rng.choice(["f32", "i32"])} for i in range(count)]
        else:
            doc["rules"] = [{"rule": rng.choice(["1", "p0 > 0", "(" * 100 + "1" + ")" * 100]), "accepted": "x"}
                            for _ in range(count)]
        return doc
    if kind in (3, 4):  # numbers
        numbers = [(p, v) for p, v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers:
            path, _ = rng.choice(numbers)
            new = rng.choice(INTERESTING_INTS) if kind == 3 else rng.choice(INTERESTING_FLOATS)
            return replace_at(doc, path, new)
    if kind == 5:  # names
        strings = [(p, v) for p, v in values if isinstance(v, str)]
        if strings:
            path, _ = rng.choice(strings)
            return replace_at(doc, path, rng.choice(HOSTILE_STRINGS + OPS))
    if kind == 6:  # a node's op or operands
        nodes = [(p, v) for p, v in values if isinstance(v, list) and v and isinstance(v[0], str)]
        if nodes:
            path, node = rng.choice(nodes)
            node = list(node)
            if rng.random() < 0.5:
                node[0] = rng.choice(OPS)
            else:
                node.append(rng.choice(INTERESTING_INTS))
            return replace_at(doc, path, node)
    if kind == 7:  # the wrong kind of value
        return replace_at(doc, path, rng.choice([None, True, 1, 1.5, "x", [], {}, [[]], {"nodes": 1}]))
    if kind == 8 and isinstance(value, dict) and value:  # a key dropped or renamed
        key = rng.choice(list(value))
        item = value.pop(key)
        if rng.random() < 0.5:
            value[rng.choice(HOOKS + ["format", "name", "params", "inputs", "rules", "hooks", "nodes", "results"])] = item
        return doc
    if kind == 9 and isinstance(doc, dict):  # hooks exchanged
        hooks = doc.get("hooks")
        if isinstance(hooks, dict) and hooks:
            hook = rng.choice(list(hooks))
            hooks[rng.choice(HOOKS)] = hooks.pop(hook)
            return doc
    if kind == 10 and isinstance(value, list) and value:  # an element duplicated or dropped
        if rng.random() < 0.5:
            value.insert(rng.randrange(len(value) + 1), copy.deepcopy(rng.choice(value)))
        else:
            del value[rng.randrange(len(value))]
        return doc
    return doc


def mutate_text(text, rng):
    """Byte-level damage the JSON parser sees: truncation, flipped bytes, number tokens, pure nesting."""
    kind = rng.randrange(5)
    if kind == 0 and text:
        return text[:rng.randrange(len(text))]
    if kind == 1 and text:
        i = rng.randrange(len(text))
        return text[:i] + rng.choice("[]{}\",:\\0-e.") + text[i + 1:]
    if kind == 2:
        spots = [i for i, c in enumerate(text) if c.isdigit()]
        if spots:
            i = rng.choice(spots)
            return text[:i] + rng.choice(NUMBER_TOKENS) + text[i + 1:]
    if kind == 3:
        depth = rng.choice(DEPTHS)
        opener = rng.choice(["[", "{\"a\":", "[\"", "[1,"])
        return opener * depth + rng.choice(["", "]" * depth, "1"])
    if kind == 4 and text:  # unbalanced brackets inside and outside strings
        i = rng.randrange(len(text))
        return text[:i] + rng.choice(["\"[[[[\"", "]]]]", "\\\"[", "\"\\\\\"[["]) + text[i:]
    return text


def make_case(seeds, rng):
    doc = copy.deepcopy(rng.choice(seeds))
    # Mostly one mutation, so that a good share of the cases stay valid and reach the compiler.
    for _ in range(1 + (rng.random() < 0.3) + (rng.random() < 0.1)):
        doc = mutate_tree(doc, rng)
    text = json.dumps(doc, separators=(",", ":"))
    while "\\u0001deep:" in text:
        start = text.index("\"\\u0001deep:")
        end = text.index("\\u0001\"", start + 1) + len("\\u0001\"")
        depth = int(text[start + len("\"\\u0001deep:"):end - len("\\u0001\"")])
        text = text[:start] + deep_text(depth, rng) + text[end:]
    if rng.random() < 0.25:
        text = mutate_text(text, rng)
    # Compiling to CUDA costs the most: a few cases go that far, the others stop at the id or the tile IR.
    entry = rng.choices("irtc", weights=[50, 20, 20, 10])[0]
    return entry, text


def frames(cases):
    out = bytearray()
    for entry, text in cases:
        data = text.encode("utf-8", errors="surrogatepass")
        out += entry.encode() + struct.pack("<I", len(data)) + data
    return bytes(out)


def crashed(returncode, stderr):
    why = fuzzing.crashed(returncode, stderr)
    if not why and returncode != 0:
        why = "exit status %d (the worker could not read its input)" % returncode
    return why


def run(worker, cases, env, accepted=None):
    """Runs `cases` in one worker; returns (why it crashed or None, stderr). Counts the cases the library accepted
    into accepted[0] (when given)."""
    timeout = BATCH_TIMEOUT_S if len(cases) > 1 else CASE_TIMEOUT_S
    try:
        result = subprocess.run([worker], input=frames(cases), capture_output=True, env=env, timeout=timeout)
        stderr = result.stderr.decode(errors="replace")
        if accepted is not None:
            accepted[0] += sum(1 for line in result.stdout.splitlines() if line.endswith(b" ok"))
        return crashed(result.returncode, stderr), stderr
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode(errors="replace") if e.stderr else ""
        return "no answer in %d s (a hang)" % timeout, stderr


def main():
    parser = fuzzing.arguments(__doc__, "--cases", "descriptions")
    parser.add_argument("--worker", required=True, help="the flashtile_variant_fuzz_worker binary")
    parser.add_argument("--python", required=True, help="the Python package's folder (for the seed variants)")
    args = parser.parse_args()

    seeds = load_seeds(args.python)
    seed = fuzzing.seed_of(args)
    rng = random.Random(seed)
    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="flashtile-fuzz-variant-"))
    out.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="flashtile-fuzz-variant-cache-")
    print("fuzz-variant: %d seed variants, seed %d, %.0f s; crashing descriptions go to %s" %
          (len(seeds), seed, args.seconds, out), flush=True)
    # Under a sanitizer build (scripts/sanitize.sh) MLIR's process-lifetime allocations are not leaks.
    env = dict(os.environ, FLASHTILE_CACHE_DIR=cache,
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=0:allow_user_poisoning=0"))
    deadline = time.monotonic() + args.seconds
    runs = failures = 0
    accepted = [0]  # descriptions the library took: the mutations should leave some valid
    try:
        while time.monotonic() < deadline and (args.cases == 0 or runs < args.cases):
            batch = [make_case(seeds, rng) for _ in range(BATCH)]
            runs += len(batch)
            why, stderr = run(args.worker, batch, env, accepted)
            if not why:
                continue
            culprits = [(c, w, e) for c in batch for w, e in [run(args.worker, [c], env)] if w]
            if not culprits:
                culprits = [(c, why, stderr) for c in batch]
            for (entry, text), why, stderr in culprits:
                failures += 1
                case = out / ("crash-%d-%d-%s.json" % (seed, failures, entry))
                case.write_text(text, errors="surrogatepass")
                print("fuzz-variant: CRASH (%s) in entry point '%s' on %s (%d bytes):\n%s" %
                      (why, entry, case, len(text), stderr[-3000:]), flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("fuzz-variant: %d descriptions run, %d accepted, %d crashes (seed %d)" % (runs, accepted[0], failures, seed))
    if runs == 0:
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
