"""What context parallelism needs to know of a variant's hooks, read from its traced description.

- which coordinates the hooks read (query/key positions and the sequence sizes, the query head, the batch entry):
  a hook that reads none of the positions gives the same answer on a block of a split sequence as on the whole;
- the KV-range rules (kv_range, full_range) evaluated on a block of the whole problem, exactly as the compiler's
  IR computes them (i32 arithmetic wraps, division truncates), so that a block the rules exclude is skipped and a
  block they keep whole drops the mask;
- the variant without some hooks (its mask and ranges, its sink), for blocks that need them not.
"""

from __future__ import annotations

import copy
import json
import math
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..variant import Variant

# Where each hook's arguments are (variant._HOOK_ARGS): positions, the query head, the batch entry.
_POSITION_ARGS = {"score": (3, 4), "mask": (2, 3), "kv_range": (0, 1), "full_range": (0, 1), "sink": ()}
_HEAD_ARGS = {"score": (2,), "mask": (1,), "kv_range": (3,), "full_range": (3,), "sink": (1,)}
_BATCH_ARGS = {"score": (1,), "mask": (0,), "kv_range": (2,), "full_range": (2,), "sink": (0,)}
_POSITION_SIZES = ("seqlen_q", "seqlen_k", "key_offset")
_HEAD_SIZES = ("heads_q", "heads_kv")
MASK_HOOKS = ("mask", "kv_range", "full_range")
_READS_POSITIONS: Dict[str, bool] = {}


def _live(graph: dict) -> List[list]:
    """The nodes the hook's results reach (the compiler builds IR of those only)."""
    nodes, live = graph["nodes"], set()
    stack = list(graph["results"])
    while stack:
        i = stack.pop()
        if i in live:
            continue
        live.add(i)
        node = nodes[i]
        if node[0] in ("arg", "size", "dim", "param", "const"):
            continue
        stack.extend(x for x in node[2 if node[0] == "load" else 1:] if isinstance(x, int))
    return [nodes[i] for i in sorted(live)]


class Hooks:
    """A variant's traced hooks."""

    def __init__(self, variant: Variant):
        self.variant = variant
        self.graphs: Dict[str, dict] = json.loads(variant.description())["hooks"]

    @staticmethod
    def reads_positions(variant: Variant) -> bool:
        """Hooks(variant).reads("positions"), remembered per description."""
        text = variant.description()
        if text not in _READS_POSITIONS:
            _READS_POSITIONS[text] = Hooks(variant).reads("positions")
        return _READS_POSITIONS[text]

    def has(self, hook: str) -> bool:
        return hook in self.graphs

    def reads(self, what: str, hooks: Sequence[str] = ("score", "mask", "kv_range", "full_range", "sink")) -> bool:
        """Whether one of `hooks` reads `what`: "positions" (query or key rows, seqlen_q/seqlen_k, key_offset),
        "heads" (the query head, heads_q/heads_kv) or "batch" (the batch entry, key_offset)."""
        args = {"positions": _POSITION_ARGS, "heads": _HEAD_ARGS, "batch": _BATCH_ARGS}[what]
        sizes = {"positions": _POSITION_SIZES, "heads": _HEAD_SIZES, "batch": ("key_offset",)}[what]
        for hook in hooks:
            if hook not in self.graphs:
                continue
            for node in _live(self.graphs[hook]):
                if node[0] == "arg" and node[1] in args[hook]:
                    return True
                if node[0] in ("size", "dim") and node[1] in sizes:
                    return True
        return False

    def canonical(self, hook: str) -> Optional[str]:
        """The hook's result expressions as text (operand indices resolved), or None without the hook: two hooks
        with equal text build the same IR."""
        if hook not in self.graphs:
            return None
        nodes = self.graphs[hook]["nodes"]
        memo: Dict[int, str] = {}

        def text(i: int) -> str:
            if i not in memo:
                node = nodes[i]
                if node[0] in ("arg", "size", "dim", "param", "const"):
                    memo[i] = json.dumps(node)
                elif node[0] == "load":
                    memo[i] = f"load({node[1]},{text(node[2])})"
                else:
                    memo[i] = f"{node[0]}({','.join(text(x) for x in node[1:])})"
            return memo[i]

        return ";".join(text(r) for r in self.graphs[hook]["results"])


class Unknown(Exception):
    """A rule that cannot be evaluated here (an input read out of its range, a division by zero): the caller
    treats the block as one the rules neither skip nor keep whole."""


def _i32(x: int) -> int:
    return ((x + 2**31) % 2**32) - 2**31


def _f32(x: float) -> float:
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _div(a, b, is_int: bool):
    if is_int:
        if b == 0:
            raise Unknown("division by zero")
        q = abs(a) // abs(b)
        return _i32(q if (a >= 0) == (b >= 0) else -q)
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return _f32(a / b)


_BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "min": min, "max": max,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b,
}


def _to_int(x: float) -> int:
    if not math.isfinite(x) or not -(2**31) <= x < 2**31:
        raise Unknown(f"to_int of {x}")
    return int(x)  # truncates toward zero, as the IR's fptosi


_UNARY = {
    "neg": lambda a: -a, "not": lambda a: not a, "abs": abs,
    "tanh": math.tanh, "exp": lambda a: math.exp(a) if a < 709 else math.inf, "exp2": lambda a: 2.0 ** a,
    "log": lambda a: math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan),
    "sqrt": lambda a: math.sqrt(a) if a >= 0 else math.nan,
    "to_float": float, "to_int": _to_int,
}


def evaluate(graph: dict, args: Sequence, sizes: Dict[str, int], params: Dict[str, float],
             inputs: Dict[str, list]) -> list:
    """The hook's results for these arguments (i32 as Python ints, f32 rounded to float32, i1 as bools)."""
    nodes, values = graph["nodes"], []
    for node in nodes:
        op = node[0]
        if op == "arg":
            value = args[node[1]]
        elif op in ("size", "dim"):
            value = sizes[node[1]]
        elif op == "param":
            value = _f32(params[node[1]])
        elif op == "const":
            value = node[2] if node[1] != "f32" else _f32(float(node[2]) if not isinstance(node[2], str)
                                                          else (math.inf if node[2] == "inf" else -math.inf))
            value = bool(value) if node[1] == "i1" else value
        elif op == "load":
            array, index = inputs.get(node[1]), values[node[2]]
            if array is None or not 0 <= index < len(array):
                raise Unknown(f"input '{node[1]}' read at {index}")
            value = array[index]
        elif op == "select":
            value = values[node[2]] if values[node[1]] else values[node[3]]
        elif op == "div":
            a, b = values[node[1]], values[node[2]]
            value = _div(a, b, isinstance(a, int) and not isinstance(a, bool))
        elif op in _BINARY:
            a, b = values[node[1]], values[node[2]]
            value = _BINARY[op](a, b)
            if isinstance(value, bool):
                pass
            elif isinstance(a, int) and not isinstance(a, bool):
                value = _i32(value)
            else:
                value = _f32(value)
        elif op in _UNARY:
            a = values[node[1]]
            value = _UNARY[op](a)
            if op in ("neg", "abs") and isinstance(a, int) and not isinstance(a, bool):
                value = _i32(value)
            elif op not in ("not", "to_int"):
                value = _f32(value)
        else:
            raise Unknown(f"op '{op}'")
        values.append(value)
    return [values[r] for r in graph["results"]]


_WITHOUT: Dict[Tuple[str, bool, bool], Variant] = {}


def without(variant: Variant, *, mask: bool = False, sink: bool = False) -> Variant:
    """`variant` less its mask and KV-range rules (a block every key of which its rows attend) and/or its sink (a
    block that must not count the sink again). Parameters, rules and inputs stay declared, so a call passes the
    same numbers and arrays (an input no hook reads any more gets a zero gradient). One object per variant and
    choice: its id (its registration with the compiler) is reused from call to call."""
    key = (variant.description(), mask, sink)
    if key not in _WITHOUT:
        if len(_WITHOUT) > 256:
            _WITHOUT.clear()
        _WITHOUT[key] = _strip(variant, mask, sink)
    return _WITHOUT[key]


def _strip(variant: Variant, mask: bool, sink: bool) -> Variant:
    out = copy.copy(variant)
    out._params, out._inputs, out._rules = list(variant._params), dict(variant._inputs), list(variant._rules)
    suffix = ""
    if mask:
        out._mask = out._kv_range = out._full_range = None
        suffix += "_unmasked"
    if sink:
        out._sink = None
        suffix += "_sinkless"
    out.name = (variant.name[:64 - len(suffix)] + suffix) if suffix else variant.name
    out.__dict__.pop("_resolved", None)
    return out._changed()


class BlockRules:
    """The KV-range rules of one call (variant, numbers, input arrays) on blocks of the whole problem.

    classify(...) -> "skip" (no row of the block attends any of its keys), "full" (every row attends every key:
    the mask can be dropped) or "partial". Blocks are judged for every batch entry and query head the rules depend
    on; a rule that cannot be evaluated makes the block "partial", never "skip"."""

    def __init__(self, hooks: Hooks, params: Dict[str, float], inputs: Dict[str, Any], batch: int, heads_q: int,
                 heads_kv: int):
        # The arrays flat, as the kernels read them: a variant's index rule spans every dimension of a 2-D array
        # (document_mask's doc_start of (batch, seqlen), say), so a tensor's rows are joined in order.
        self.hooks, self.params = hooks, params
        self.inputs = {n: a.reshape(-1).tolist() if hasattr(a, "reshape") else list(a) for n, a in inputs.items()}
        self.batch, self.heads_q, self.heads_kv = batch, heads_q, heads_kv
        self.masked = hooks.has("mask")
        ranges = [h for h in ("kv_range", "full_range") if hooks.has(h)]
        self.batches = range(batch) if hooks.reads("batch", ranges) else range(1)
        self.heads = range(heads_q) if hooks.reads("heads", ranges) else range(1)

    def _range(self, hook: str, rows: Tuple[int, int], b: int, h: int, seq: dict) -> Tuple[int, int]:
        sizes = dict(seq, batch=self.batch, heads_q=self.heads_q, heads_kv=self.heads_kv)
        lo, hi = evaluate(self.hooks.graphs[hook], (rows[0], rows[1] - 1, b, h), sizes, self.params, self.inputs)
        return lo, hi

    def classify(self, seqs: Sequence[dict]) -> str:
        """seqs: one entry per sequence under varlen, {"b", "seqlen_q", "seqlen_k", "key_offset", "rows", "keys"},
        or one entry without "b" standing for every batch entry under the dense layout: the whole problem's
        sizes and the block's query rows and keys, [begin, end) in the whole sequence."""
        if not self.masked:
            return "full"
        skip = full = True
        try:
            for seq in seqs:
                (r0, r1), (k0, k1) = seq["rows"], seq["keys"]
                if r1 <= r0 or k1 <= k0:
                    continue
                sizes = {n: seq[n] for n in _POSITION_SIZES}
                for b in ([seq["b"]] if "b" in seq else self.batches):
                    dense = "b" not in seq
                    for h in self.heads:
                        entry = dict(sizes, key_offset=b * seq["seqlen_k"]) if dense else sizes
                        if self.hooks.has("kv_range"):
                            lo, hi = self._range("kv_range", (r0, r1), b, h, entry)
                            if lo < k1 and hi > k0 and lo < hi:
                                skip = False
                        else:
                            skip = False
                        if self.hooks.has("full_range"):
                            lo, hi = self._range("full_range", (r0, r1), b, h, entry)
                            if not (lo <= k0 and hi >= k1):
                                full = False
                        else:
                            full = False
        except Unknown:
            return "partial"
        return "skip" if skip else "full" if full else "partial"
