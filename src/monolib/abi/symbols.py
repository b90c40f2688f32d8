"""Run-time dims of a graph JSON version 2: symbols, dim expressions, the layout.

A run-time dim is a **symbol** ``{"name", "lo", "hi", "step"}``: a value ``v`` is in
bounds when ``lo <= v <= hi`` and ``v % step == 0``. An input's shape entry is an int
(static) or a symbol name; an output's or a node's is an int or a **dim expression**
string (integers, symbol names, ``+ - * / %``, ``min(a, b)``, ``max(a, b)``,
parentheses), for display only: the actual sizes of a run are written by the library
at ``arena + shape_offset``. The executor writes the symbol values (int64, in
``symbols`` order) at ``arena + sym_offset`` before each run. A **computed** symbol
(``"computed": true``, issue 13: NonZero's count, NMS's selected boxes) is written by the
library itself during ``monolib_run``; its ``lo`` may be 0 and no input names it. Documented in
docs/ARCHITECTURE.md, "The graph JSON", version 2 (issue 12).

This module reads and checks those fields (:func:`dynamic_layout`) and writes them
(:func:`symbol_entry`); :mod:`.graph_spec` calls it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import ContainerError

__all__ = [
    "ComputedSymbol",
    "DynamicLayout",
    "Symbol",
    "check_expression",
    "dim_label",
    "dynamic_layout",
    "evaluate",
    "is_static",
    "shape_label",
    "symbol_entry",
]

logger = logging.getLogger(__name__)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN = re.compile(r"\s*(?:([0-9]+)|([A-Za-z_][A-Za-z0-9_]*)|([-+*/%(),]))")
_FUNCTIONS = ("min", "max")
#: int64 slots are read by the generated C: their arena offsets must be this aligned.
SLOT_ALIGN = 8


class Symbol(NamedTuple):
    """A run-time dim: values ``lo <= v <= hi`` with ``v % step == 0``."""

    name: str
    lo: int
    hi: int
    step: int

    def contains(self, value: int) -> bool:
        """Whether ``value`` is in bounds and on step."""
        return self.lo <= value <= self.hi and value % self.step == 0

    @property
    def first(self) -> int:
        """The smallest value in bounds (what an executor starts with)."""
        return -(-self.lo // self.step) * self.step

    @property
    def last(self) -> int:
        """The largest value in bounds (the arena is planned for it)."""
        return self.hi - self.hi % self.step

    @property
    def computed(self) -> bool:
        """Whether the library writes this symbol during a run (:class:`ComputedSymbol`)."""
        return False

    def bounds(self) -> str:
        """``"[lo, hi]"``, with ``" step s"`` unless ``step`` is 1, for messages."""
        return f"[{self.lo}, {self.hi}]" + (f" step {self.step}" if self.step != 1 else "")

    def label(self) -> str:
        """``"batch∈[1,8]"``, ``"x_2∈[32,1280]:32"`` with a step: how the tools
        (``inspect``, ``view``) show the dim."""
        step = f":{self.step}" if self.step > 1 else ""
        return f"{self.name}\u2208[{self.lo},{self.hi}]{step}"

    def info(self) -> tuple:
        """``(name, lo, hi)``, or ``(name, lo, hi, step)`` when ``step > 1``: how
        ``get_input_info`` reports the dim."""
        return (self.name, self.lo, self.hi) + ((self.step,) if self.step > 1 else ())


class ComputedSymbol(Symbol):
    """A dim the library computes during a run (a data-dependent output size, issue
    13): bounds ``0 <= lo <= hi``, written at ``sym_offset`` by the op that knows it,
    never bound from an input's shape."""

    __slots__ = ()
    computed = True

    def label(self) -> str:
        """``"nz_count∈[0,24] computed"``: :meth:`Symbol.label` marked computed."""
        return super().label() + " computed"


class DynamicLayout(NamedTuple):
    """The run-time-dim fields of a version-2 graph JSON, checked.

    Attributes
    ----------
    symbols : tuple of Symbol
        In ``symbols`` order (the order of the int64 values at ``sym_offset``).
    sym_offset, shape_offset : int
        Arena byte offsets of ``int64_t sym[len(symbols)]`` and of
        ``int64_t out_shapes[sum of output ranks]``.
    specializations : tuple of dict
        ``{symbol name: value}`` of each shape compiled statically.
    """

    symbols: tuple[Symbol, ...]
    sym_offset: int
    shape_offset: int
    specializations: tuple[dict[str, int], ...]

    @property
    def by_name(self) -> dict[str, Symbol]:
        """``{name: Symbol}``."""
        return {s.name: s for s in self.symbols}


def is_static(shape: Sequence[Any]) -> bool:
    """Whether every entry of a shape is an int (no run-time dim)."""
    return all(type(d) is int for d in shape)


def dim_label(dim: Any, symbols: Mapping[str, Symbol]) -> str:
    """A shape entry for display: an int as is, a symbol with its bounds
    (:meth:`Symbol.label`), a dim expression as written."""
    return symbols[dim].label() if isinstance(dim, str) and dim in symbols else str(dim)


def shape_label(shape: Sequence[Any], symbols: Mapping[str, Symbol]) -> str:
    """``"[batch∈[1,8], 3, 224, 224]"``: a shape with :func:`dim_label` entries."""
    return "[" + ", ".join(dim_label(d, symbols) for d in shape) + "]"


def symbol_entry(name: str, lo: int, hi: int, step: int = 1, computed: bool = False
                 ) -> dict[str, Any]:
    """A ``symbols`` entry of the graph JSON (the writer side of :class:`Symbol`);
    ``"computed": true`` only for a :class:`ComputedSymbol`."""
    out = {"name": name, "lo": int(lo), "hi": int(hi), "step": int(step)}
    if computed:
        out["computed"] = True
    return out


def _int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise ContainerError(f"graph JSON: {what} is {value!r:.60}, not an integer")
    return value


def _symbol(raw: Any, i: int) -> Symbol:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise ContainerError(f"graph JSON: symbols[{i}] is not an object with a string name")
    name = raw["name"]
    if not _IDENT.match(name) or name in _FUNCTIONS:
        raise ContainerError(f"graph JSON: symbol name {name!r:.60} is not a C identifier")
    lo, hi = _int(raw.get("lo"), f"symbol {name!r} lo"), _int(raw.get("hi"), f"symbol {name!r} hi")
    step = _int(raw.get("step", 1), f"symbol {name!r} step")
    computed = raw.get("computed", False)
    if type(computed) is not bool:
        raise ContainerError(f"graph JSON: symbol {name!r} computed is {computed!r:.40}, "
                             "not a bool")
    sym = (ComputedSymbol if computed else Symbol)(name, lo, hi, step)
    least = 0 if computed else 1
    if not least <= lo <= hi or step < 1 or sym.first > hi:
        raise ContainerError(
            f"graph JSON: symbol {name!r} has bounds {sym.bounds()} (needs {least} <= lo <= "
            "hi, step >= 1 and a multiple of step in between)"
        )
    return sym


def check_expression(text: str, names: Mapping[str, Any], where: str) -> None:
    """Check a dim expression's tokens: integers, declared symbol names,
    ``min``/``max``, ``+ - * / % ( ) ,``, with balanced parentheses.

    Raises
    ------
    ContainerError
        An unknown name, a stray character or unbalanced parentheses; the message
        names ``where``.
    """
    try:
        evaluate(text, {n: 1 for n in names})  # parses it; every symbol is >= 1
    except ZeroDivisionError:  # at these values only: the syntax is fine
        pass
    except ValueError as exc:
        raise ContainerError(f"graph JSON: {where}: {exc}") from None


def _tokens(text: str) -> list[str]:
    out, pos, text = [], 0, str(text).rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"bad dim expression {text!r:.80}")
        out.append(m.group(m.lastindex))
        pos = m.end()
    return out


def evaluate(expr: int | str, values: Mapping[str, int]) -> int:
    """The value of a dim (an int, or a dim expression string) at the symbol
    ``values``, with C's integer semantics on non-negative operands (``/`` and ``%``
    truncate).

    Raises
    ------
    ValueError
        A malformed expression or an unknown name.
    ZeroDivisionError
        A ``/`` or ``%`` by zero at these values.
    """
    if type(expr) is int:
        return expr
    toks, pos = _tokens(expr), 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take(want: str | None = None) -> str:
        nonlocal pos
        tok = peek()
        if tok is None or (want is not None and tok != want):
            raise ValueError(f"bad dim expression {expr!r:.80}")
        pos += 1
        return tok

    def atom() -> int:
        tok = take()
        if tok.isdigit():
            return int(tok)
        if tok == "(":
            v = total()
            take(")")
            return v
        if tok in _FUNCTIONS:
            take("(")
            a = total()
            take(",")
            b = total()
            take(")")
            return min(a, b) if tok == "min" else max(a, b)
        if tok in values:
            return int(values[tok])
        raise ValueError(f"dim expression {expr!r:.80}: unknown name {tok!r}")

    def term() -> int:
        v = atom()
        while peek() in ("*", "/", "%"):
            op, rhs = take(), atom()
            if op != "*" and rhs == 0:
                raise ZeroDivisionError(f"dim expression {expr!r:.80} divides by zero")
            v = v * rhs if op == "*" else (v // rhs if op == "/" else v % rhs)
        return v

    def total() -> int:
        v = term()
        while peek() in ("+", "-"):
            op, rhs = take(), term()
            v = v + rhs if op == "+" else v - rhs
        return v

    out = total()
    if pos != len(toks):
        raise ValueError(f"bad dim expression {expr!r:.80}")
    return out


def _slot(graph: Mapping, key: str, count: int, arena: int) -> int:
    off = graph.get(key)
    if type(off) is not int or off < 0 or off % SLOT_ALIGN:
        raise ContainerError(
            f"graph JSON: {key} is {off!r:.60}, not an arena offset aligned to {SLOT_ALIGN}"
        )
    if off + 8 * count > arena:
        raise ContainerError(
            f"graph JSON: {key} [{off}, {off + 8 * count}) lies outside the arena ({arena} bytes)"
        )
    return off


def dynamic_layout(graph: Mapping, arena: int) -> DynamicLayout:
    """The run-time-dim fields of a version-2 graph JSON, checked against the arena.

    Checks: symbol names are C identifiers and unique, ``1 <= lo <= hi`` (``0 <= lo``
    for a computed one), ``step >= 1``; every symbol but the computed ones is a dim of
    some input; ``sym_offset`` and
    ``shape_offset`` are 8-byte aligned and their int64 ranges lie inside the arena;
    each ``specializations`` entry gives every input symbol (not the computed ones)
    an in-bounds value. The shape
    entries themselves are checked by :func:`.graph_spec.tensor_info`.

    Raises
    ------
    ContainerError
        The first field that breaks one of these rules, named.
    """
    raw = graph.get("symbols", [])
    if not isinstance(raw, list):
        raise ContainerError("graph JSON: symbols is not a list")
    symbols = tuple(_symbol(r, i) for i, r in enumerate(raw))
    names = {s.name: s for s in symbols}
    if len(names) != len(symbols):
        dup = next(s.name for i, s in enumerate(symbols) if s.name in [t.name for t in symbols[:i]])
        raise ContainerError(f"graph JSON: symbol {dup!r} is declared twice")
    used = {d for t in graph.get("inputs", []) if isinstance(t, Mapping)
            for d in t.get("shape", []) if isinstance(d, str)}  # fmt: skip
    unset = [n for n, s in names.items() if n not in used and not s.computed]
    if unset:
        raise ContainerError(
            f"graph JSON: symbol {unset[0]!r} is no input's dim: nothing could set it"
        )
    ranks = 0
    for t in graph.get("outputs", []):
        shape = t.get("shape") if isinstance(t, Mapping) else None
        ranks += len(shape) if isinstance(shape, list) else 0
    sym_offset = _slot(graph, "sym_offset", len(symbols), arena)
    shape_offset = _slot(graph, "shape_offset", ranks, arena)
    specs = graph.get("specializations", [])
    if not isinstance(specs, list):
        raise ContainerError("graph JSON: specializations is not a list")
    out = []
    given = [n for n, s in names.items() if not s.computed]
    for i, spec in enumerate(specs):
        values = spec.get("symbols") if isinstance(spec, Mapping) else None
        if not isinstance(values, Mapping) or set(values) != set(given):
            raise ContainerError(
                f"graph JSON: specializations[{i}] must give every symbol "
                f"({', '.join(given)}) a value"
            )
        for name, v in values.items():
            if type(v) is not int or not names[name].contains(v):
                raise ContainerError(
                    f"graph JSON: specializations[{i}] sets {name!r} to {v!r:.40}, outside "
                    f"its bounds {names[name].bounds()}"
                )
        out.append(dict(values))
    return DynamicLayout(symbols, sym_offset, shape_offset, tuple(out))
