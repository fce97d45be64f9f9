"""Attention variants written in Python, FlexAttention-style: hooks traced into the C++ DSL's expressions.

    import flashtile
    from flashtile import dsl

    def softcap(cap: float = 30.0) -> flashtile.Variant:
        def score(s, c, p):                    # score = cap·tanh(s / cap), on the scaled score
            cap = p["cap"]
            return cap * dsl.tanh(s * (1.0 / cap))
        return flashtile.Variant("softcap").param("cap", cap, min=0.0, min_exclusive=True).score(score)

A variant's hooks are called once, with proxies (flashtile.dsl), when the variant is first used; what they
compute becomes a description (JSON) that the library turns into the same DSL calls as the C++ hooks, so the
program and its id (name#hash of the IR) are those of the C++ variant with the same hooks. Kernels are compiled
on first use and cached on disk.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from typing import Callable, Dict, List, Optional

from . import dsl

DESCRIPTION_FORMAT = "flashtile.variant.v1"

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_INPUT_TYPES = {"f32": dsl.F32, "float32": dsl.F32, "i32": dsl.I32, "int32": dsl.I32}

ScoreFn = Callable[[dsl.Expr, dsl.Coords, dsl.Params], dsl.Expr]
MaskFn = Callable[[dsl.Coords, dsl.Params], dsl.Expr]
RangeFn = Callable[[dsl.QTile, dsl.Params], dsl.Range]
SinkFn = Callable[[dsl.HeadCoords, dsl.Params], dsl.Expr]


def _check_identifier(what: str, name) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ValueError(f"{what} must be 1-64 letters, digits or '_', not starting with a digit; got {name!r}")
    return name


class Param:
    """A declared number: its default value and the bounds every call's value is checked against."""

    def __init__(self, name: str, value: float, min=None, max=None, min_exclusive=False, integer=False):
        self.name, self.value = name, float(value)
        self.min = None if min is None else float(min)
        self.max = None if max is None else float(max)
        self.min_exclusive, self.integer = bool(min_exclusive), bool(integer)

    def check(self, value) -> Optional[str]:
        """None when `value` is accepted, else why not (naming the parameter)."""
        # No try/except: torch.compile traces this check (flashtile.attention with params).
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return f"parameter '{self.name}' must be a number, got {value!r}"
        v = float(value)
        ok = math.isfinite(v) and (not self.integer or v == math.floor(v))
        ok = ok and (self.min is None or (v > self.min if self.min_exclusive else v >= self.min))
        ok = ok and (self.max is None or v <= self.max)
        if ok:
            return None
        rule = "a whole number" if self.integer else "a finite number"
        if self.min is not None:
            rule += f" {'>' if self.min_exclusive else '>='} {self.min:g}"
        if self.max is not None:
            rule += f"{' and' if self.min is not None else ''} <= {self.max:g}"
        return f"parameter '{self.name}' is {value!r}; it must be {rule}"

    def describe(self) -> dict:
        out = {"name": self.name, "value": self.value, "integer": self.integer}
        if self.min is not None:
            out["min"] = self.min
            out["min_exclusive"] = self.min_exclusive
        if self.max is not None:
            out["max"] = self.max
        return out


class Variant:
    """What changes between attention flavours: hooks, numbers, input arrays. Mirrors flashtile::Variant (C++).

    Builder methods return the variant itself, so declarations chain. A variant is traced when first used;
    changing it afterwards gives a new description (and a new id)."""

    def __init__(self, name: str):
        self.name = _check_identifier("variant name", name)
        self._params: List[Param] = []
        self._inputs: Dict[str, str] = {}
        self._score: Optional[ScoreFn] = None
        self._mask: Optional[MaskFn] = None
        self._kv_range: Optional[RangeFn] = None
        self._full_range: Optional[RangeFn] = None
        self._sink: Optional[SinkFn] = None
        self._description: Optional[str] = None
        self._id: Optional[str] = None
        self._rules: List[dict] = []

    # Declarations -----------------------------------------------------------------------------------------
    def param(self, name: str, value: float, *, min=None, max=None, min_exclusive=False, integer=False) -> "Variant":
        """A number the hooks read as ``p[name]`` (an f32 kernel argument: new values reuse the kernel). The
        bounds are checked on the declared value and on every call's value."""
        _check_identifier("parameter name", name)
        if any(p.name == name for p in self._params):
            # Its place in the declarations is its place in every call's numbers: re-declaring it would move it.
            raise ValueError(f"variant '{self.name}': parameter '{name}' is already declared; each parameter is "
                             "declared once (its position is its place in the variant's numbers)")
        for bound, given in (("min", min), ("max", max)):
            if given is not None and (isinstance(given, bool) or not isinstance(given, numbers.Real)
                                      or not math.isfinite(given)):
                raise ValueError(f"variant '{self.name}': parameter '{name}': {bound} is {given!r}; a bound is a "
                                 f"finite number, or None (the default) for no {bound}imum")
        declared = Param(name, value, min, max, min_exclusive, integer)
        error = declared.check(value)
        if error:
            raise ValueError(f"variant '{self.name}': {error}")
        self._params.append(declared)
        return self._changed()

    def rule(self, text: str, accepted: str) -> "Variant":
        """A rule the parameters' values must satisfy, in the runtime's rule language (the text a C++ variant's
        ``validate(rule, accepted)`` produces, e.g. ``((cap > 0) && isfinite(cap))``), and the accepted values in
        words. Rules travel with every kernel, so calls are checked for ahead-of-time kernels too."""
        if not isinstance(text, str) or not isinstance(accepted, str) or not text or not accepted:
            raise ValueError("rule: expected two non-empty strings (the rule and the accepted values in words)")
        self._rules.append({"rule": text, "accepted": accepted})
        return self._changed()

    def input(self, name: str, dtype: str) -> "Variant":
        """A device array the hooks read with ``p.load(name, index)``: dtype "f32" or "i32"."""
        _check_identifier("input name", name)
        if dtype not in _INPUT_TYPES:
            raise ValueError(f"input '{name}': dtype must be 'f32' or 'i32', got {dtype!r}")
        self._inputs[name] = _INPUT_TYPES[dtype]
        return self._changed()

    def score(self, fn: ScoreFn) -> "Variant":
        """(score, coords, params) -> new score (f32), before masking."""
        self._score = _callable("score", fn)
        return self._changed()

    def mask(self, fn: MaskFn) -> "Variant":
        """(coords, params) -> keep? (a predicate)."""
        self._mask = _callable("mask", fn)
        return self._changed()

    def kv_range(self, fn: RangeFn) -> "Variant":
        """(q_tile, params) -> Range of keys some row of the tile may attend: other tiles are skipped."""
        self._kv_range = _callable("kv_range", fn)
        return self._changed()

    def full_range(self, fn: RangeFn) -> "Variant":
        """(q_tile, params) -> Range of keys every row of the tile attends: no mask there."""
        self._full_range = _callable("full_range", fn)
        return self._changed()

    def sink(self, fn: SinkFn) -> "Variant":
        """(head_coords, params) -> an attention-sink logit (f32) joining each row's softmax denominator."""
        self._sink = _callable("sink", fn)
        return self._changed()

    def _changed(self) -> "Variant":
        self._description = None
        self._id = None
        return self

    @property
    def id(self) -> str:
        """Registers the variant with the compiler (once) and returns its id, name#hash of its IR: the id of the
        C++ variant with the same hooks. Calls pass it; kernels are compiled on first use."""
        if self._id is None:
            from . import _lib

            self._id = _lib.register_variant(self.description())
        return self._id

    # What was declared ----------------------------------------------------------------------------------
    @property
    def params(self) -> List[Param]:
        return list(self._params)

    @property
    def param_names(self) -> List[str]:
        return [p.name for p in self._params]

    @property
    def inputs(self) -> Dict[str, str]:
        """Input name -> element type ("f32" / "i32"), in declaration order."""
        return dict(self._inputs)

    def hooks(self) -> Dict[str, Callable]:
        named = {"score": self._score, "mask": self._mask, "kv_range": self._kv_range,
                 "full_range": self._full_range, "sink": self._sink}
        return {k: v for k, v in named.items() if v is not None}

    # Tracing --------------------------------------------------------------------------------------------
    def description(self) -> str:
        """The JSON description the library compiles (format flashtile.variant.v1)."""
        if self._description is None:
            self._description = json.dumps(self._describe(), separators=(",", ":"), allow_nan=False)
        return self._description

    def _describe(self) -> dict:
        hooks = {}
        for hook, fn in self.hooks().items():
            hooks[hook] = _trace(self, hook, fn)
        return {
            "format": DESCRIPTION_FORMAT,
            "name": self.name,
            "params": [p.describe() for p in self._params],
            "inputs": [{"name": n, "type": t} for n, t in self._inputs.items()],
            "hooks": hooks,
            **({"rules": list(self._rules)} if self._rules else {}),
        }

    def check_params(self, values) -> List[float]:
        """The call's values in declaration order: `values` is None (the declared values), a mapping by name
        (missing names take their declared value) or a sequence in declaration order."""
        if values is None:
            return [p.value for p in self._params]
        if isinstance(values, dict):
            unknown = sorted(set(values) - set(self.param_names))
            if unknown:
                raise ValueError(f"params: variant '{self.name}' has no parameter(s) {', '.join(unknown)}; "
                                 f"declared: {', '.join(self.param_names) or 'none'}")
            ordered = [values.get(p.name, p.value) for p in self._params]
        else:
            ordered = list(values)
            if len(ordered) != len(self._params):
                raise ValueError(f"params: variant '{self.name}' takes {len(self._params)} value(s) "
                                 f"({', '.join(self.param_names) or 'none'}), got {len(ordered)}")
        for p, v in zip(self._params, ordered):
            error = p.check(v)
            if error:
                raise ValueError(f"params: variant '{self.name}': {error}")
        return [float(v) for v in ordered]

    def __repr__(self):
        return f"flashtile.Variant({self.name!r}, params={self.param_names}, inputs={list(self._inputs)}, " \
               f"hooks={list(self.hooks())})"


def _callable(hook: str, fn):
    if not callable(fn):
        raise TypeError(f"{hook}: expected a function, got {type(fn).__name__}")
    return fn


_HOOK_ARGS = {
    "score": (dsl.F32, dsl.I32, dsl.I32, dsl.I32, dsl.I32),
    "mask": (dsl.I32,) * 4,
    "kv_range": (dsl.I32,) * 4,
    "full_range": (dsl.I32,) * 4,
    "sink": (dsl.I32,) * 2,
}


def _trace(variant: Variant, hook: str, fn) -> dict:
    graph = dsl.Graph(hook, _HOOK_ARGS[hook], variant.param_names, variant.inputs)
    sizes, params, a = dsl.Sizes(graph), dsl.Params(graph), graph.args
    where = f"variant '{variant.name}', hook {hook}"
    try:
        if hook == "score":
            out = fn(a[0], dsl.Coords(a[1], a[2], a[3], a[4], sizes), params)
            results = [_result(out, dsl.F32, where, graph)]
        elif hook == "mask":
            out = fn(dsl.Coords(a[0], a[1], a[2], a[3], sizes), params)
            results = [_result(out, dsl.I1, where, graph)]
        elif hook in ("kv_range", "full_range"):
            out = fn(dsl.QTile(a[0], a[1], a[2], a[3], sizes), params)
            if not isinstance(out, dsl.Range):
                raise dsl.TraceError(f"{where}: must return a flashtile.dsl.Range, got {type(out).__name__}")
            results = [_result(out.lo, dsl.I32, where + " (lo)", graph), _result(out.hi, dsl.I32, where + " (hi)", graph)]
        else:
            out = fn(dsl.HeadCoords(a[0], a[1], sizes), params)
            results = [_result(out, dsl.F32, where, graph)]
    except dsl.TraceError as e:
        if str(e).startswith(where):
            raise
        raise dsl.TraceError(f"{where}: {e}") from None
    return {"nodes": graph.nodes, "results": results}


def _result(value, want: str, where: str, graph: dsl.Graph) -> int:
    if not isinstance(value, dsl.Expr):
        raise dsl.TraceError(f"{where}: must return a traced expression ({want}), got {type(value).__name__}; "
                             "build it from the hook's arguments")
    if value.graph is not graph:
        raise dsl.TraceError(f"{where}: returns an expression of another trace")
    if value.type != want:
        raise dsl.TraceError(f"{where}: must return {want}, got {value.type}")
    return value.index


def _all_keys(q: dsl.QTile) -> dsl.Range:
    return dsl.Range.up_to(q.sizes.seqlen_k)


def _no_keys(q: dsl.QTile) -> dsl.Range:
    return dsl.Range.up_to(q.sizes.seqlen_k.literal(0))


def _intersect(x: dsl.Range, y: dsl.Range) -> dsl.Range:
    return dsl.Range(dsl.maximum(x.lo, y.lo), dsl.minimum(x.hi, y.hi))


def both(a: Variant, b: Variant, name: str) -> Variant:
    """`a` and `b` at once, as flashtile::both in C++: masks ANDed, ranges intersected, a's score modifier then
    b's, parameters and inputs the union (a name both declare is one value), the sink a's, else b's."""
    v = Variant(name)
    for part in (a, b):
        for p in part.params:
            if p.name not in v.param_names:
                v._params.append(p)
        for n, t in part.inputs.items():
            v._inputs[n] = t
        v._rules.extend(part._rules)
    fa, fb = a.hooks(), b.hooks()
    if "score" in fa and "score" in fb:
        sa, sb = fa["score"], fb["score"]
        v.score(lambda s, c, p: sb(sa(s, c, p), c, p))
    elif "score" in fa or "score" in fb:
        v.score(fa.get("score") or fb.get("score"))
    if "mask" in fa and "mask" in fb:
        ma, mb = fa["mask"], fb["mask"]
        v.mask(lambda c, p: ma(c, p) & mb(c, p))
    elif "mask" in fa or "mask" in fb:
        v.mask(fa.get("mask") or fb.get("mask"))
    if "kv_range" in fa or "kv_range" in fb:
        ra, rb = fa.get("kv_range"), fb.get("kv_range")
        v.kv_range(lambda q, p: _intersect(ra(q, p) if ra else _all_keys(q), rb(q, p) if rb else _all_keys(q)))
    if "mask" in fa or "mask" in fb:
        def full_of(hooks: dict) -> RangeFn:
            if "full_range" in hooks:
                return hooks["full_range"]
            if "mask" in hooks:
                return lambda q, p: _no_keys(q)
            return lambda q, p: _all_keys(q)

        xa, xb = full_of(fa), full_of(fb)
        v.full_range(lambda q, p: _intersect(xa(q, p), xb(q, p)))
    if "sink" in fa or "sink" in fb:
        v.sink(fa.get("sink") or fb.get("sink"))
    return v
