"""The variant DSL in Python: proxies that record a hook's arithmetic as an expression graph.

A hook (score modifier, mask, KV-range rule, sink) is an ordinary Python function over these proxies. Calling it
once with proxies records every operation; the C++ side replays the graph through the C++ DSL (capi/
VariantDescription.h), so the tile IR, its hash and the kernels are those of the same hook written in C++.

The operators follow the C++ DSL (dsl/include/flashtile/dsl/Expr.h):
- an expression is f32 (scores, parameters), i32 (indices, sizes) or i1 (predicates);
- ``+ - * /`` and comparisons take two expressions of one type; ``/`` on i32 truncates toward zero, as in C;
- a Python number next to an expression takes that expression's type (a float with a fractional part next to
  an i32 expression is an error, never a silent truncation);
- predicates combine with ``&``, ``|`` and ``~`` (Python's ``and``/``or``/``not``/``if`` cannot be traced:
  use them and :func:`select`);
- :func:`to_float` / :func:`to_int` convert between i32 and f32.
"""

from __future__ import annotations

import math
import numbers
from typing import List, Optional, Sequence

F32, I32, I1 = "f32", "i32", "i1"

_BINARY_ARITHMETIC = ("add", "sub", "mul", "div", "min", "max")
_BINARY_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
_BINARY_LOGIC = ("and", "or")


class TraceError(TypeError):
    """A hook did something the DSL cannot record (mixed types, Python control flow on a traced value, ...)."""


class Graph:
    """The nodes one hook's trace records, in the order they were made."""

    def __init__(self, hook: str, arg_types: Sequence[str], params: Sequence[str], inputs: dict):
        self.hook = hook
        self.nodes: List[list] = []
        self.types: List[str] = []
        self.params = list(params)
        self.inputs = dict(inputs)
        self.args = [self.add(["arg", i], t) for i, t in enumerate(arg_types)]

    def add(self, node: list, type_: str) -> "Expr":
        self.nodes.append(node)
        self.types.append(type_)
        return Expr(self, len(self.nodes) - 1, type_)


class Expr:
    """A traced scalar: f32, i32 or i1."""

    __slots__ = ("graph", "index", "type")
    __hash__ = None  # == builds an expression; expressions are not dictionary keys

    def __init__(self, graph: Graph, index: int, type_: str):
        self.graph = graph
        self.index = index
        self.type = type_

    def is_float(self) -> bool:
        return self.type == F32

    def is_bool(self) -> bool:
        return self.type == I1

    def literal(self, value) -> "Expr":
        """A constant of this expression's type."""
        return _constant(self.graph, self.type, value, self.type)

    def __bool__(self):
        raise TraceError(
            "a traced expression has no Python truth value: use &, |, ~ instead of and/or/not, and "
            "flashtile.dsl.select(cond, a, b) instead of if/else"
        )

    # Arithmetic
    def __add__(self, other):
        return _binary("add", self, other)

    def __radd__(self, other):
        return _binary("add", other, self)

    def __sub__(self, other):
        return _binary("sub", self, other)

    def __rsub__(self, other):
        return _binary("sub", other, self)

    def __mul__(self, other):
        return _binary("mul", self, other)

    def __rmul__(self, other):
        return _binary("mul", other, self)

    def __truediv__(self, other):
        return _binary("div", self, other)

    def __rtruediv__(self, other):
        return _binary("div", other, self)

    def __floordiv__(self, other):
        raise TraceError("use / : on i32 expressions it truncates toward zero, as the C++ DSL does")

    __rfloordiv__ = __floordiv__

    def __neg__(self):
        if self.type == I1:
            raise TraceError("negation takes f32 or i32; use ~ on predicates")
        return self.graph.add(["neg", self.index], self.type)

    # Comparisons
    def __lt__(self, other):
        return _binary("lt", self, other)

    def __le__(self, other):
        return _binary("le", self, other)

    def __gt__(self, other):
        return _binary("gt", self, other)

    def __ge__(self, other):
        return _binary("ge", self, other)

    def __eq__(self, other):  # type: ignore[override]
        return _binary("eq", self, other)

    def __ne__(self, other):  # type: ignore[override]
        return _binary("ne", self, other)

    # Predicates
    def __and__(self, other):
        return _binary("and", self, other)

    def __rand__(self, other):
        return _binary("and", other, self)

    def __or__(self, other):
        return _binary("or", self, other)

    def __ror__(self, other):
        return _binary("or", other, self)

    def __invert__(self):
        if self.type != I1:
            raise TraceError(f"~ takes a predicate (i1), got {self.type}")
        return self.graph.add(["not", self.index], I1)

    def __repr__(self):
        return f"<flashtile.dsl.Expr {self.type} #{self.index} in {self.graph.hook}>"


def _constant(graph: Graph, type_: str, value, context: str) -> Expr:
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, numbers.Real):
        raise TraceError(f"expected a number or a traced expression, got {type(value).__name__}")
    value = float(value) if type_ == F32 else value
    if type_ == F32:
        if math.isnan(value):
            raise TraceError("NaN constants are not allowed in a variant")
        encoded = "inf" if value == math.inf else "-inf" if value == -math.inf else value
        return graph.add(["const", F32, encoded], F32)
    if float(value) != int(value):
        raise TraceError(
            f"the number {value} next to an {context} expression would be truncated; use an integer, or convert "
            "the expression with flashtile.dsl.to_float"
        )
    value = int(value)
    low, high = (0, 1) if type_ == I1 else (-(2**31), 2**31 - 1)
    if not low <= value <= high:
        raise TraceError(f"the number {value} does not fit an {type_} expression ([{low}, {high}])")
    return graph.add(["const", type_, value], type_)


def _binary(op: str, a, b) -> Expr:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise TraceError(f"'{op}' needs at least one traced expression")
    anchor = a if isinstance(a, Expr) else b
    graph = anchor.graph
    # As in C++: a plain number takes the expression's type (made after the expression, before the op).
    if not isinstance(a, Expr):
        a = _constant(graph, b.type, a, b.type)
    if not isinstance(b, Expr):
        b = _constant(graph, a.type, b, a.type)
    if a.graph is not b.graph:
        raise TraceError(
            f"'{op}' combines expressions of two different traces ({a.graph.hook}, {b.graph.hook}); a hook may "
            "only use its own arguments, sizes and parameters"
        )
    if a.type != b.type:
        raise TraceError(f"'{op}' mixes {a.type} and {b.type}; convert with flashtile.dsl.to_float / to_int")
    if op in _BINARY_LOGIC:
        if a.type != I1:
            raise TraceError(f"'{op}' (& or |) takes predicates (i1), got {a.type}")
        result = I1
    else:
        if a.type == I1:
            raise TraceError(f"'{op}' takes f32 or i32 expressions, got predicates (i1)")
        result = I1 if op in _BINARY_COMPARE else a.type
    return graph.add([op, a.index, b.index], result)


def _expr(x, name: str) -> Expr:
    if not isinstance(x, Expr):
        raise TraceError(f"{name} takes a traced expression, got {type(x).__name__}")
    return x


def _unary(op: str, a, accepts: Sequence[str], result: Optional[str] = None) -> Expr:
    a = _expr(a, op)
    if a.type not in accepts:
        raise TraceError(f"{op} takes {' or '.join(accepts)}, got {a.type}")
    return a.graph.add([op, a.index], result or a.type)


def minimum(a, b) -> Expr:
    """min(a, b) of two f32 or two i32 expressions."""
    return _binary("min", a, b)


def maximum(a, b) -> Expr:
    """max(a, b) of two f32 or two i32 expressions."""
    return _binary("max", a, b)


min = minimum  # noqa: A001 - the C++ DSL's names, inside this module only
max = maximum  # noqa: A001


def select(cond, if_true, if_false) -> Expr:
    """if_true where cond holds, else if_false (both of one type; a number takes the other's type)."""
    cond = _expr(cond, "select's condition")
    if cond.type != I1:
        raise TraceError(f"select's condition must be a predicate (i1), got {cond.type}")
    graph = cond.graph
    if not isinstance(if_true, Expr) and not isinstance(if_false, Expr):
        raise TraceError("select needs at least one traced branch (or use cond.literal)")
    if not isinstance(if_true, Expr):
        if_true = _constant(graph, if_false.type, if_true, if_false.type)
    if not isinstance(if_false, Expr):
        if_false = _constant(graph, if_true.type, if_false, if_true.type)
    if if_true.type != if_false.type:
        raise TraceError(f"select's branches must have one type, got {if_true.type} and {if_false.type}")
    if not (cond.graph is if_true.graph is if_false.graph):
        raise TraceError("select combines expressions of different traces")
    return graph.add(["select", cond.index, if_true.index, if_false.index], if_true.type)


def to_float(i) -> Expr:
    """i32 -> f32."""
    return _unary("to_float", i, (I32,), F32)


def to_int(f) -> Expr:
    """f32 -> i32, truncating."""
    return _unary("to_int", f, (F32,), I32)


def abs(a) -> Expr:  # noqa: A001
    return _unary("abs", a, (F32, I32))


def tanh(a) -> Expr:
    return _unary("tanh", a, (F32,))


def exp(a) -> Expr:
    return _unary("exp", a, (F32,))


def exp2(a) -> Expr:
    return _unary("exp2", a, (F32,))


def log(a) -> Expr:
    return _unary("log", a, (F32,))


def sqrt(a) -> Expr:
    return _unary("sqrt", a, (F32,))


class Sizes:
    """Sizes of the problem: seqlen_q, seqlen_k (i32), and the others where a hook asks for them."""

    def __init__(self, graph: Graph):
        self._graph = graph

    @property
    def seqlen_q(self) -> Expr:
        return self._graph.add(["size", "seqlen_q"], I32)

    @property
    def seqlen_k(self) -> Expr:
        return self._graph.add(["size", "seqlen_k"], I32)

    def batch(self) -> Expr:
        return self._graph.add(["dim", "batch"], I32)

    def heads_q(self) -> Expr:
        return self._graph.add(["dim", "heads_q"], I32)

    def heads_kv(self) -> Expr:
        return self._graph.add(["dim", "heads_kv"], I32)

    def key_offset(self) -> Expr:
        """The row of this sequence's first key among all keys: b·seqlen_k dense, cu_seqlens_k[b] varlen."""
        return self._graph.add(["dim", "key_offset"], I32)


class Coords:
    """Where a score sits: batch b, query head h, query row q, key kv (i32), and the sizes."""

    def __init__(self, b: Expr, h: Expr, q: Expr, kv: Expr, sizes: Sizes):
        self.b, self.h, self.q, self.kv, self.sizes = b, h, q, kv, sizes

    def q_aligned(self) -> Expr:
        """The query row aligned to the bottom-right corner: q + seqlen_k - seqlen_q."""
        return self.q + self.sizes.seqlen_k - self.sizes.seqlen_q


class QTile:
    """The rows [first, last] of a Q tile (inclusive, clipped to seqlen_q), its batch entry b and query head h."""

    def __init__(self, first: Expr, last: Expr, b: Expr, h: Expr, sizes: Sizes):
        self.first, self.last, self.b, self.h, self.sizes = first, last, b, h, sizes

    def first_aligned(self) -> Expr:
        return self.first + self.sizes.seqlen_k - self.sizes.seqlen_q

    def last_aligned(self) -> Expr:
        return self.last + self.sizes.seqlen_k - self.sizes.seqlen_q


class HeadCoords:
    """A batch entry and query head: what a sink sees."""

    def __init__(self, b: Expr, h: Expr, sizes: Sizes):
        self.b, self.h, self.sizes = b, h, sizes


class Range:
    """A half-open key range [lo, hi) of i32 expressions; schedules clamp it to [0, seqlen_k)."""

    def __init__(self, lo: Expr, hi: Expr):
        self.lo, self.hi = lo, hi

    @staticmethod
    def up_to(hi: Expr) -> "Range":
        """[0, hi)"""
        return Range(hi.literal(0), hi)


class Params:
    """A variant's numbers (``p["cap"]``, f32) and input arrays (``p.load("slopes", c.h)``)."""

    def __init__(self, graph: Graph):
        self._graph = graph

    def __getitem__(self, name: str) -> Expr:
        if name not in self._graph.params:
            declared = ", ".join(self._graph.params) or "none"
            raise TraceError(f"parameter '{name}' is not declared (declared: {declared}); add .param('{name}', value)")
        return self._graph.add(["param", name], F32)

    def load(self, name: str, index) -> Expr:
        """Element `index` (i32) of input `name`, of the element type the input was declared with. The index
        defines the array's shape the caller passes (e.g. c.h reads an (H) array)."""
        if name not in self._graph.inputs:
            declared = ", ".join(self._graph.inputs) or "none"
            raise TraceError(f"input '{name}' is not declared (declared: {declared}); add .input('{name}', 'f32')")
        if not isinstance(index, Expr):
            index = _constant(self._graph, I32, index, I32)
        if index.graph is not self._graph:
            raise TraceError("an input's index must come from the same hook's trace")
        if index.type != I32:
            raise TraceError(f"the index of input '{name}' must be i32, got {index.type}")
        return self._graph.add(["load", name, index.index], self._graph.inputs[name])
