"""Run-time dims: integer expressions over named, bounded symbols.

A run-time dim of a compiled model is a :class:`Symbol` (``name``, inclusive bounds
``lo..hi``, a ``step`` every value is a multiple of; /tmp contract of issue 12, "Symbols")
and every shape the compiler derives from it is a :class:`Dim`: an integer expression
in canonical form, so equal expressions compare equal and hash alike.

Canonical form: a polynomial (monomial -> integer coefficient) over *atoms*:

* ``q(s)``: the quotient ``s / s.step`` of a symbol (so ``s == step * q(s)``; a symbol
  with step 32 is ``32*q``, and divisibility is the content of the coefficients);
* ``div(p, k)``: floor division of a non-constant polynomial by a positive int ``k``
  (or by a Dim known to be positive);
* ``min(a, b)``, ``max(a, b)``.

Modulo is written ``a - k * (a // k)``, so it simplifies with the division. Any
operation whose result is constant returns a plain Python ``int``.

Questions that have one answer over every in-bound value (``x == x``, ``x < 9999``,
``x % 8 == 0`` for ``x`` in steps of 32) answer it; the others raise
:class:`~monolib.errors.UndecidableDimError` naming the expression, so an op that
branches on a run-time size is refused instead of silently picking a branch. ``int()``
and ``operator.index()`` of a Dim always raise (``range(dim)`` refuses).

Bounds come from interval arithmetic (:attr:`Dim.lo`, :attr:`Dim.hi`); :attr:`Dim.hint`
is the value with every symbol at its upper bound (memory planning sizes from
:attr:`Dim.hi`, heuristics use :func:`size_hint`).
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Union

import numpy as np

from ..abi import symbols as abi_symbols
from ..errors import ShapeError, UndecidableDimError

__all__ = [
    "Dim",
    "DimLike",
    "Symbol",
    "SymbolTable",
    "c_rendering",
    "computed_symbol",
    "dim_max",
    "dim_min",
    "evaluate",
    "free_symbols",
    "is_computed",
    "is_dim",
    "is_one",
    "same",
    "same_shape",
    "size_hint",
]

logger = logging.getLogger(__name__)


class Symbol(abi_symbols.Symbol):
    """A named run-time dim: every value ``v`` with ``lo <= v <= hi`` and ``v % step == 0``
    (the graph JSON's :class:`monolib.abi.symbols.Symbol`, checked when made).

    Raises
    ------
    ShapeError
        When ``1 <= lo <= hi`` and ``step >= 1`` do not hold, or no multiple of ``step``
        lies in the bounds.
    """

    __slots__ = ()

    def __new__(cls, name: str, lo: int, hi: int, step: int = 1) -> "Symbol":
        lo, hi, step = int(lo), int(hi), int(step)
        if not (1 <= lo <= hi) or step < 1:
            raise ShapeError(
                f"dim {name!r}: bounds ({lo}, {hi}, step {step}) need 1 <= lo <= hi and step >= 1"
            )
        if -(-lo // step) > hi // step:
            raise ShapeError(f"dim {name!r}: no multiple of {step} lies in [{lo}, {hi}]")
        return super().__new__(cls, name, lo, hi, step)

    @property
    def qlo(self) -> int:
        """Smallest in-bound value divided by ``step``."""
        return self.first // self.step

    @property
    def qhi(self) -> int:
        """Largest in-bound value divided by ``step``."""
        return self.last // self.step

    def describe(self) -> str:
        """``name in [lo, hi]`` (``step k`` appended when k > 1), for messages."""
        return f"{self.name} in {self.bounds()}"

    def as_json(self) -> dict:
        """The graph JSON entry ``{"name", "lo", "hi", "step"}`` (+ ``"computed"``)."""
        return abi_symbols.symbol_entry(*self, computed=self.computed)


class ComputedSymbol(Symbol, abi_symbols.ComputedSymbol):
    """A dim the library writes during a run (issue 13), ``0 <= lo <= hi`` (else
    :class:`ShapeError`); written by its op through ``CEmitContext.set_symbol``."""

    __slots__ = ()

    def __new__(cls, name: str, lo: int, hi: int, step: int = 1) -> "ComputedSymbol":
        if not (0 <= int(lo) <= int(hi)) or int(step) < 1:
            raise ShapeError(f"computed dim {name!r}: bounds ({lo}, {hi}, step {step}) "
                             "need 0 <= lo <= hi and step >= 1")
        return tuple.__new__(cls, (name, int(lo), int(hi), int(step)))


_computed_ids = itertools.count()


def computed_symbol(hint: str, hi: int, lo: int = 0) -> ComputedSymbol:
    """A fresh data-dependent dim (issue 13), bounds ``lo..hi``, step 1, named from
    ``hint`` made a C identifier plus a unique number. Raises :class:`ShapeError`
    unless ``0 <= lo <= hi``."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", str(hint))[:40]
    base = base if base[:1].isalpha() or base[:1] == "_" else f"n_{base}"
    return ComputedSymbol(f"{base}_c{next(_computed_ids)}", lo, hi, 1)


def is_computed(sym) -> bool:
    """Whether ``sym`` (a Symbol, a Dim that is one symbol, a list of symbols: any) is
    computed. ``d == 0`` of a Dim ``d >= 0`` reading one is False: "empty?" skips no code."""
    if isinstance(sym, list):
        return any(is_computed(s) for s in sym)
    if isinstance(sym, Dim):
        syms = sym.symbols()
        return len(syms) == 1 and is_computed(syms[0]) and same(sym, Dim.of(syms[0]))
    return bool(getattr(sym, "computed", False))


# An atom is a hashable tuple: ("q", Symbol) | ("div", Dim, den) | ("min"|"max", a, b).
# A monomial is a sorted tuple of (atom, exponent); () is the constant monomial.
Atom = tuple
Monomial = tuple
DimLike = Union[int, "Dim"]


def _atom_key(atom: Atom) -> str:
    if atom[0] == "q":
        s = atom[1]
        return f"0{s.name}:{s.lo}:{s.hi}:{s.step}"
    return f"1{atom[0]}({_key(atom[1])},{_key(atom[2])})"


def _key(x: DimLike) -> str:
    """A string that two dims share exactly when their canonical forms are the same."""
    if not isinstance(x, Dim):
        return str(int(x))
    if x._key is None:
        x._key = "+".join(
            f"{c}" + "".join(f"*{_atom_key(a)}^{e}" for a, e in m) for m, c in x.terms
        )
    return x._key


def _mono_key(m: Monomial) -> tuple:
    return (len(m), [(_atom_key(a), e) for a, e in m])


def _mono_mul(m1: Monomial, m2: Monomial) -> Monomial:
    exps: dict[Atom, int] = dict(m1)
    for a, e in m2:
        exps[a] = exps.get(a, 0) + e
    return tuple(sorted(exps.items(), key=lambda ae: _atom_key(ae[0])))


def _mono_div(m: Monomial, d: Monomial) -> Monomial | None:
    """m / d when d's atoms all appear in m with at least d's exponents, else None."""
    exps: dict[Atom, int] = dict(m)
    for a, e in d:
        if exps.get(a, 0) < e:
            return None
        exps[a] -= e
    return tuple(sorted(((a, e) for a, e in exps.items() if e), key=lambda ae: _atom_key(ae[0])))


def _coerce(x) -> DimLike | None:
    """``x`` as an int or Dim; None when it is neither (the operator returns
    NotImplemented)."""
    if isinstance(x, Dim):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)) and float(x).is_integer():
        return int(x)
    return None


def _poly(x: DimLike) -> dict[Monomial, int]:
    if isinstance(x, Dim):
        return dict(x.terms)
    return {(): int(x)} if x else {}


def _make(poly: Mapping[Monomial, int]) -> DimLike:
    """int when ``poly`` is constant, else the canonical Dim."""
    items = [(m, c) for m, c in poly.items() if c]
    if not items:
        return 0
    if len(items) == 1 and items[0][0] == ():
        return items[0][1]
    return Dim(tuple(sorted(items, key=lambda mc: _mono_key(mc[0]))))


def _single(atom: Atom, coeff: int = 1) -> "Dim":
    """The Dim ``coeff * atom``."""
    return Dim(((((atom, 1),), coeff),))


def _interval_mul(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    p = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return min(p), max(p)


def _bounds(x: DimLike) -> tuple[int, int]:
    return x.bounds if isinstance(x, Dim) else (x, x)


def _atom_bounds(atom: Atom) -> tuple[int, int]:
    kind = atom[0]
    if kind == "q":
        return atom[1].qlo, atom[1].qhi
    a, b = _bounds(atom[1]), _bounds(atom[2])
    if kind == "div":  # b >= 1: floor(a / b) is extreme at the corners
        corners = [x // y for x in a for y in b]
        return min(corners), max(corners)
    if kind == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    return max(a[0], b[0]), max(a[1], b[1])


def _content(poly: Mapping[Monomial, int], constant: bool = True) -> int:
    """gcd of the coefficients (of the non-constant terms only when not ``constant``)."""
    g = 0
    for m, c in poly.items():
        if m or constant:
            g = math.gcd(g, c)
    return g


class Dim:
    """An integer expression over :class:`Symbol` s in canonical form (module docstring).

    Build one with :meth:`of` (a symbol) and the operators ``+ - * // %`` with ints and
    other Dims (reflected forms too, so NumPy object arrays of Dims compute). Never
    constant: a constant result is a plain ``int``.

    Raises
    ------
    UndecidableDimError
        From comparisons, ``bool()``, ``int()``, ``operator.index()`` when the answer
        depends on the run-time value.
    """

    __slots__ = ("terms", "_hash", "_bounds", "_key")

    def __init__(self, terms: tuple[tuple[Monomial, int], ...]):
        self.terms = terms
        self._key: str | None = None
        self._hash = hash(_key(self))
        self._bounds: tuple[int, int] | None = None

    @classmethod
    def of(cls, symbol: Symbol) -> "Dim":
        """The dim of ``symbol`` itself (``step * q(symbol)``)."""
        return _single(("q", symbol), symbol.step)

    # -- bounds and facts -----------------------------------------------------------
    @property
    def bounds(self) -> tuple[int, int]:
        """(lo, hi) by interval arithmetic: every in-bound value lies within."""
        if self._bounds is None:
            lo = hi = 0
            for m, c in self.terms:
                iv = (1, 1)
                for atom, e in m:
                    for _ in range(e):
                        iv = _interval_mul(iv, _atom_bounds(atom))
                t = _interval_mul(iv, (c, c))
                lo, hi = lo + t[0], hi + t[1]
            self._bounds = (lo, hi)
        return self._bounds

    @property
    def lo(self) -> int:
        """A lower bound of every in-bound value."""
        return self.bounds[0]

    @property
    def hi(self) -> int:
        """An upper bound of every in-bound value (memory is planned with it)."""
        return self.bounds[1]

    @property
    def hint(self) -> int:
        """The value with every symbol at its largest in-bound value."""
        return evaluate(self, {s.name: s.qhi * s.step for s in self.symbols()})

    def divides(self, k: int) -> bool:
        """True when every in-bound value is a multiple of ``k`` (a sufficient test: the
        content of the coefficients)."""
        return _content(dict(self.terms)) % int(k) == 0

    def symbols(self) -> list[Symbol]:
        """The symbols this expression reads, sorted by name."""
        found: dict[str, Symbol] = {}
        for atom in self._atoms():
            if atom[0] == "q":
                found[atom[1].name] = atom[1]
        return [found[n] for n in sorted(found)]

    def _atoms(self) -> Iterator[Atom]:
        for m, _ in self.terms:
            for atom, _ in m:
                yield atom
                if atom[0] != "q":
                    for part in atom[1:]:
                        if isinstance(part, Dim):
                            yield from part._atoms()

    # -- arithmetic -----------------------------------------------------------------
    def __add__(self, other):
        o = _coerce(other)
        if o is None:
            return NotImplemented
        p = _poly(self)
        for m, c in _poly(o).items():
            p[m] = p.get(m, 0) + c
        return _make(p)

    __radd__ = __add__

    def __neg__(self):
        return _make({m: -c for m, c in self.terms})

    def __pos__(self):
        return self

    def __sub__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else self + (-o)

    def __rsub__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else (-self) + o

    def __mul__(self, other):
        o = _coerce(other)
        if o is None:
            return NotImplemented
        p: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in _poly(o).items():
                m = _mono_mul(m1, m2)
                p[m] = p.get(m, 0) + c1 * c2
        return _make(p)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else floordiv(self, o)

    def __rfloordiv__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else floordiv(o, self)

    def __mod__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else self - o * floordiv(self, o)

    def __rmod__(self, other):
        o = _coerce(other)
        return NotImplemented if o is None else o - self * floordiv(o, self)

    def __divmod__(self, other):
        return self // other, self % other

    def __abs__(self):
        if self.lo >= 0:
            return self
        if self.hi <= 0:
            return -self
        raise UndecidableDimError(
            f"the sign of run-time dim {self.display()} is not known at compile time"
        )

    # -- comparisons ----------------------------------------------------------------
    def _sign_question(self, other, what: str):
        o = _coerce(other)
        if o is None:
            return None, None
        d = self - o
        return d, f"{self.display()} {what} {o.display() if isinstance(o, Dim) else o}"

    def __eq__(self, other):
        if isinstance(other, Dim) and _key(other) == _key(self):
            return True  # structural: dict keys, tuples of atoms
        d, question = self._sign_question(other, "==")
        if question is None:
            return NotImplemented
        if isinstance(d, int):
            return d == 0
        lo, hi = d.bounds
        if lo > 0 or hi < 0 or lo == 0 and _key(other) == "0" and is_computed(d.symbols()):
            return False  # "empty?" of a data-dependent size: its kernels loop 0 times
        poly = dict(d.terms)
        g = _content(poly, constant=False)
        if g and poly.get((), 0) % g:
            return False  # 32*q - 5 is never 0
        raise UndecidableDimError(
            f"{question} depends on the run-time value ({_bounds_text(self)}); "
            "the code asking it cannot take this run-time dim"
        )

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def _order(self, other, what: str, test):
        d, question = self._sign_question(other, what)
        if question is None:
            return NotImplemented
        lo, hi = _bounds(d)
        if test(lo) == test(hi):
            return test(lo)
        raise UndecidableDimError(
            f"{question} depends on the run-time value ({_bounds_text(self)}); "
            "the code asking it cannot take this run-time dim"
        )

    def __lt__(self, other):
        return self._order(other, "<", lambda v: v < 0)

    def __le__(self, other):
        return self._order(other, "<=", lambda v: v <= 0)

    def __gt__(self, other):
        return self._order(other, ">", lambda v: v > 0)

    def __ge__(self, other):
        return self._order(other, ">=", lambda v: v >= 0)

    def __bool__(self) -> bool:
        return self != 0

    def __hash__(self) -> int:
        return self._hash

    def __int__(self) -> int:
        raise UndecidableDimError(
            f"run-time dim {self.display()} ({_bounds_text(self)}) has no compile-time value"
        )

    __index__ = __int__

    # -- text -----------------------------------------------------------------------
    def __str__(self) -> str:
        """The display text; inside :func:`c_rendering` the C expression, like
        ``format`` (emitters write ``str(n)`` as often as ``f"{n}"``)."""
        return self.display() if _C_RENDERING.get() is None else format(self)

    def display(self) -> str:
        """The display text of the contract (``"(x_2 / 4)"``, ``"3*batch"``), always."""
        return _render(self, _display_atom)

    def __repr__(self) -> str:
        return f"Dim({self})"

    def __format__(self, spec: str) -> str:
        """The C expression inside :func:`c_rendering` (so ``f"i < {n}"`` in an emitter
        writes C for a run-time ``n``), the display text elsewhere."""
        active = _C_RENDERING.get()
        if active is None:
            return format(self.display(), spec)
        text = self.c_expr(*active)
        return text if text.startswith("(") or "*" not in text and " " not in text else f"({text})"

    def c_expr(self, table: "SymbolTable", sym_array: str = "S") -> str:
        """C (int64) expression of the value, symbol ``k`` of ``table`` read as
        ``sym_array[k]``; floor division stays exact for negative numerators.

        Raises
        ------
        KeyError
            When a symbol is not in ``table``.
        """
        return _render(self, lambda a, div: _c_atom(a, div, table, sym_array))


_C_RENDERING: ContextVar[tuple["SymbolTable", str] | None] = ContextVar(
    "monolib_dim_c_rendering", default=None
)


@contextmanager
def c_rendering(table: "SymbolTable", sym_array: str = "S") -> Iterator[None]:
    """Within the block, ``format(dim)`` (f-strings) writes :meth:`Dim.c_expr` over
    ``table``, wrapped in parentheses unless it is a single ``S[k]``."""
    token = _C_RENDERING.set((table, sym_array))
    try:
        yield
    finally:
        _C_RENDERING.reset(token)


def same(a, b) -> bool:
    """Structural identity of two dims (never raises): equal ints, or Dims of the same
    canonical form. ``batch`` and ``h`` are not the same even if equal at run time."""
    if isinstance(a, Dim) or isinstance(b, Dim):
        return isinstance(a, Dim) and isinstance(b, Dim) and _key(a) == _key(b)
    return int(a) == int(b)


def same_shape(a, b) -> bool:
    """Same rank and :func:`same` on every axis (never raises)."""
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


def is_one(d) -> bool:
    """True when ``d`` is the int 1. A run-time dim is never taken as 1: it does not
    broadcast (like ``torch.export`` dims), so its strides stay real."""
    return not isinstance(d, Dim) and int(d) == 1


def _text(x: DimLike) -> str:
    """Display text of an int or Dim (never C; a negative int as ``(0 - k)``: the graph
    JSON's expressions have no unary minus)."""
    if isinstance(x, Dim):
        return x.display()
    return str(x) if x >= 0 else f"(0 - {-x})"


def _bounds_text(d: Dim) -> str:
    syms = ", ".join(s.describe() for s in d.symbols())
    own = "" if d.display() in {s.name for s in d.symbols()} else (
        f"; {d.display()} in [{d.lo}, {d.hi}]"
    )
    return syms + own


def is_dim(x) -> bool:
    """True when ``x`` is a run-time :class:`Dim` (not an int)."""
    return isinstance(x, Dim)


def size_hint(x: DimLike) -> int:
    """``x`` itself for an int, its :attr:`Dim.hint` for a Dim: for heuristics (tile
    sizes, thread counts) that need one representative value."""
    return x.hint if isinstance(x, Dim) else int(x)


def floordiv(a: DimLike, b: DimLike) -> DimLike:
    """``a // b`` (Python floor division), simplified.

    Raises
    ------
    ZeroDivisionError
        ``b == 0``.
    UndecidableDimError
        ``b`` a Dim that may be zero or negative.
    """
    if isinstance(b, Dim):
        return _div_by_dim(a, b)
    if b == 0:
        raise ZeroDivisionError(f"{a} // 0")
    if b < 0:
        return floordiv(-a, -b)
    if not isinstance(a, Dim):
        return a // b
    if b == 1:
        return a
    poly = dict(a.terms)
    quotient = {m: c // b for m, c in poly.items() if m and c % b == 0}
    rest = {m: c for m, c in poly.items() if m and c % b}
    const = poly.get((), 0)
    out = _make(quotient) + const // b
    rest[()] = const % b
    g = math.gcd(_content(rest), b)
    if g > 1:  # floor(g*r / g*k) == floor(r / k)
        rest = {m: c // g for m, c in rest.items()}
        b //= g
    r = _make(rest)
    if not isinstance(r, Dim):
        return out + r // b
    lo, hi = r.bounds
    if lo // b == hi // b:
        return out + lo // b
    if hi <= 0:  # floor(r / b) == -ceil(-r / b): ceilings read as (x + b - 1) // b
        return out - floordiv(-r + (b - 1), b)
    if len(r.terms) == 1 and r.terms[0][1] == 1 and len(r.terms[0][0]) == 1:
        (atom, e), = r.terms[0][0]
        if e == 1 and atom[0] == "div" and isinstance(atom[2], int):
            return out + floordiv(atom[1], atom[2] * b)  # (x // 2) // 2 == x // 4
    return out + _single(("div", r, b))


def _div_by_dim(a: DimLike, b: "Dim") -> DimLike:
    if b.lo < 1:
        raise UndecidableDimError(
            f"{a.display() if isinstance(a, Dim) else a} // {b.display()}: the divisor may "
            f"be zero or negative ({_bounds_text(b)})"
        )
    if len(b.terms) == 1:  # exact division by a monomial: (b*3*h*w) // (b*3) == h*w
        (dm, dc), = b.terms
        q: dict[Monomial, int] = {}
        for m, c in _poly(a).items():
            mq = _mono_div(m, dm)
            if mq is None or c % dc:
                break
            q[mq] = c // dc
        else:
            return _make(q)
    if isinstance(a, Dim) and a.hi < b.lo and a.lo >= 0:
        return 0
    return _single(("div", a, b))


def dim_min(a: DimLike, b: DimLike) -> DimLike:
    """``min(a, b)``: the smaller one when decidable, else a ``min`` atom."""
    return _minmax("min", a, b)


def dim_max(a: DimLike, b: DimLike) -> DimLike:
    """``max(a, b)``: the larger one when decidable, else a ``max`` atom."""
    return _minmax("max", a, b)


def _minmax(kind: str, a: DimLike, b: DimLike) -> DimLike:
    lo, hi = _bounds(_coerce(a) - _coerce(b))
    if hi <= 0:
        return a if kind == "min" else b
    if lo >= 0:
        return b if kind == "min" else a
    x, y = sorted((a, b), key=_key)
    return _single((kind, x, y))


def evaluate(x: DimLike, env: Mapping[str, int]) -> int:
    """The value of ``x`` with symbol ``name`` = ``env[name]`` (Python semantics).

    Raises
    ------
    KeyError
        A symbol missing from ``env``.
    """
    if not isinstance(x, Dim):
        return int(x)
    total = 0
    for m, c in x.terms:
        v = c
        for atom, e in m:
            v *= _eval_atom(atom, env) ** e
        total += v
    return total


def _eval_atom(atom: Atom, env: Mapping[str, int]) -> int:
    kind = atom[0]
    if kind == "q":
        return env[atom[1].name] // atom[1].step
    a, b = evaluate(atom[1], env), evaluate(atom[2], env)
    if kind == "div":
        return a // b
    return min(a, b) if kind == "min" else max(a, b)


def free_symbols(shape: Iterable[DimLike]) -> list[Symbol]:
    """The symbols a shape (or any iterable of dims) reads, sorted by name."""
    found: dict[str, Symbol] = {}
    for d in shape:
        if isinstance(d, Dim):
            for s in d.symbols():
                found[s.name] = s
    return [found[n] for n in sorted(found)]


# -- rendering --------------------------------------------------------------------------
def _display_atom(atom: Atom, div: int) -> str:
    kind = atom[0]
    if kind == "q":
        return atom[1].name if div == 1 else f"({atom[1].name} / {div})"
    a, b = _text(atom[1]), _text(atom[2])
    if kind == "div":
        den = f"({b})" if "*" in b else b
        return f"({a} / {den})"
    return f"{kind}({a}, {b})"


def _c_operand(x: DimLike, table: "SymbolTable", sym: str) -> str:
    return x.c_expr(table, sym) if isinstance(x, Dim) else str(x)


def _c_atom(atom: Atom, div: int, table: "SymbolTable", sym: str) -> str:
    kind = atom[0]
    if kind == "q":
        ref = f"{sym}[{table.index(atom[1].name)}]"
        return ref if div == 1 else f"({ref} / {div})"
    a, b = _c_operand(atom[1], table, sym), _c_operand(atom[2], table, sym)
    if kind == "div":
        b = f"({b})" if isinstance(atom[2], Dim) else b
        if _bounds(atom[1])[0] >= 0:
            return f"(({a}) / {b})"
        return f"(({a}) >= 0 ? ({a}) / {b} : -((-({a}) + {b} - 1) / {b}))"
    op = "<" if kind == "min" else ">"
    return f"(({a}) {op} ({b}) ? ({a}) : ({b}))"


def _render(d: Dim, atom_text) -> str:
    """Text of ``d``; ``atom_text(atom, div)`` renders an atom, a ``q`` atom as its
    symbol divided by ``div`` (the rest of its step is folded into the coefficient:
    ``8*q(x)`` with x in steps of 32 reads ``(x / 4)``, ``32*q(x)`` reads ``x``)."""
    parts: list[tuple[int, str]] = []
    for m, coeff in d.terms:
        factors = []
        for atom, e in m:
            for _ in range(e):
                div = 1
                if atom[0] == "q":
                    g = math.gcd(coeff, atom[1].step)
                    coeff //= g
                    div = atom[1].step // g
                factors.append(atom_text(atom, div))
        parts.append((coeff, "*".join(factors)))
    # positive terms first, constants last: the text never starts with a unary minus
    # (the graph JSON's expressions have none: ``64 - h``, ``0 - h``)
    parts.sort(key=lambda p: (p[0] < 0, p[1] == ""))
    out = "" if parts[0][0] > 0 else "0"
    for coeff, body in parts:
        mag = abs(coeff)
        term = body if mag == 1 and body else (f"{mag}*{body}" if body else str(mag))
        if not out:
            out = term
        else:
            out += f" + {term}" if coeff > 0 else f" - {term}"
    return out if len(parts) == 1 and parts[0][0] > 0 else f"({out})"


class SymbolTable:
    """The run-time symbols of one graph, in the order the arena holds their values.

    Raises
    ------
    ShapeError
        :meth:`add` of a name already present with other bounds.
    """

    def __init__(self, symbols: Iterable[Symbol] = ()):
        self._order: list[Symbol] = []
        self._index: dict[str, int] = {}
        for s in symbols:
            self.add(s)

    def add(self, symbol: Symbol) -> Symbol:
        """Add ``symbol`` (once; a second add with the same bounds is a no-op)."""
        old = self._index.get(symbol.name)
        if old is not None:
            if self._order[old] != symbol:
                raise ShapeError(
                    f"dim {symbol.name!r} is declared twice with different bounds: "
                    f"{self._order[old].describe()} and {symbol.describe()}"
                )
            return self._order[old]
        self._index[symbol.name] = len(self._order)
        self._order.append(symbol)
        return symbol

    def index(self, name: str) -> int:
        """Position of symbol ``name`` (the ``k`` of ``S[k]``)."""
        return self._index[name]

    def get(self, name: str) -> Symbol | None:
        """The symbol named ``name``, or None."""
        i = self._index.get(name)
        return None if i is None else self._order[i]

    def __iter__(self) -> Iterator[Symbol]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def as_json(self) -> list[dict]:
        """The graph JSON ``"symbols"`` list."""
        return [s.as_json() for s in self._order]
