"""The user's shape requests -> input shapes of ints and run-time :class:`Dim` s.

``compile(model, shapes=, dims=, opt_shapes=)`` (issue 12, "Interface"):

* ``shapes={"x": ((1, 8), 3, (32, 1280, 32), (32, 1280, 32))}``: per axis an int
  (static) or ``(lo, hi)`` / ``(lo, hi, step)`` (a run-time dim);
* ``dims={"batch": (1, 8)}``: binds every axis whose ONNX ``dim_param`` is ``batch``;
* ``opt_shapes={"x": [(1, 3, 640, 640), ...]}``: hot shapes, each a specialization.

A run-time dim is named after the model's ``dim_param`` when it has one, else
``<input>_<axis>``, made a C identifier either way (:func:`c_identifier`); axes that
share a name share the symbol (equal at run time). Every error is a :class:`~monolib.errors.ShapeError` naming the input,
the axis and what is wrong.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ShapeError
from ..symbolic import Dim, Symbol, SymbolTable, evaluate

__all__ = [
    "DimSpec",
    "axis_symbol_name",
    "bound_of",
    "c_identifier",
    "input_dims",
    "parse_dims",
    "specializations",
]

logger = logging.getLogger(__name__)

#: one axis as the user gives it: a static size, or (lo, hi[, step])
DimSpec = Any


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def bound_of(spec: Sequence[Any], where: str) -> tuple[int, int, int]:
    """``(lo, hi)`` or ``(lo, hi, step)`` as ``(lo, hi, step)``.

    Raises
    ------
    ShapeError
        Not 2 or 3 ints, ``lo < 1``, ``lo > hi``, ``step < 1``, or no multiple of
        ``step`` within the bounds (``where`` names the input and axis or the dim).
    """
    try:
        parts = tuple(spec)
    except TypeError:
        parts = ()
    if len(parts) not in (2, 3) or not all(_is_int(p) for p in parts):
        raise ShapeError(
            f"{where}: {spec!r} is neither an int nor (lo, hi) / (lo, hi, step) of ints"
        )
    lo, hi, step = (int(p) for p in (*parts, 1)[:3])
    if lo < 1 or lo > hi or step < 1:
        raise ShapeError(f"{where}: bounds {spec!r} need 1 <= lo <= hi and step >= 1")
    if -(-lo // step) * step > hi:
        raise ShapeError(f"{where}: no multiple of {step} lies in [{lo}, {hi}]")
    return lo, hi, step


def parse_dims(dims: Mapping[str, Any] | None) -> dict[str, Symbol]:
    """``dims={"batch": (1, 8)}`` -> name -> :class:`Symbol`.

    Raises
    ------
    ShapeError
        A malformed bound (the dim named).
    """
    out = {}
    for name, spec in (dims or {}).items():
        lo, hi, step = bound_of(spec, f"dims[{name!r}]")
        out[str(name)] = Symbol(str(name), lo, hi, step)
    return out


def axis_symbol_name(input_name: str, axis: int) -> str:
    """``<input>_<axis>`` as a C identifier (``"x:0"``, axis 2 -> ``"x_0_2"``)."""
    return c_identifier(f"{input_name}_{axis}")


def c_identifier(name: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_]`` made ``_`` (and ``d_``
    before a leading digit): symbol names are C identifiers in the graph JSON, so a
    PaddlePaddle ``p2o.DynamicDimension.1`` is the symbol ``p2o_DynamicDimension_1``."""
    name = re.sub(r"\W", "_", name, flags=re.ASCII)
    return name if name and not name[0].isdigit() else f"d_{name}"


def input_dims(
    name: str,
    declared: Sequence[int | str | None] | None,
    given: Sequence[DimSpec] | None,
    bound: Mapping[str, Symbol],
    table: SymbolTable,
) -> tuple[int | Dim, ...]:
    """The shape of input ``name``: ints and run-time dims (symbols added to ``table``).

    Parameters
    ----------
    declared : list or None
        The model's declared dims (int, ``dim_param`` str, None for unknown); None when
        the rank is unknown.
    given : sequence or None
        The user's ``shapes[name]``.
    bound : dict
        ``parse_dims(dims)``.

    Raises
    ------
    ShapeError
        A rank or static dim contradicting the model, a malformed entry, a dynamic dim
        with no value or bounds, one name declared with two bounds.
    """
    if given is None:
        if declared is None:
            raise ShapeError(
                f"input {name!r} has no declared shape; give it with shapes={{{name!r}: (...)}}"
            )
        given = [None] * len(declared)
    else:
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
            raise ShapeError(f"input {name!r}: shape {given!r} is not a sequence")
        if declared is not None and len(declared) != len(given):
            raise ShapeError(
                f"input {name!r}: shape {tuple(given)} has rank {len(given)}, "
                f"the model declares rank {len(declared)} ({_fmt(declared)})"
            )
    out: list[int | Dim] = []
    for axis, g in enumerate(given):
        d = declared[axis] if declared is not None else None
        where = f"input {name!r}, axis {axis}"
        if g is not None and not _is_int(g) and (
            isinstance(g, (str, bytes)) or not isinstance(g, Sequence)
        ):
            raise ShapeError(
                f"input {name!r}: shape {tuple(given)!r} is not a sequence of ints and "
                f"(lo, hi[, step]) bounds (axis {axis}: {g!r})"
            )
        if _is_int(g):
            g = int(g)
            if g < 0:
                raise ShapeError(f"input {name!r}: shape {tuple(given)} has a negative dim (axis {axis})")
            if isinstance(d, int) and d != g:
                raise ShapeError(
                    f"input {name!r}: dim {axis} is {g} in the given shape {tuple(given)}, "
                    f"but the model declares {d} ({_fmt(declared)})"
                )
            out.append(g)
            continue
        if g is None and isinstance(d, int):
            out.append(d)
            continue
        # ``dims=`` binds the model's own dim_param; the symbol is its C identifier
        key = d if isinstance(d, str) else axis_symbol_name(name, axis)
        sym_name = c_identifier(key)
        if g is None:
            if key not in bound:
                what = f"symbolic {d!r}" if isinstance(d, str) else "unknown"
                bind = f" or dims={{{d!r}: (lo, hi)}}" if isinstance(d, str) else ""
                raise ShapeError(
                    f"input {name!r}: dim {axis} ({what}) is dynamic ({_fmt(declared)}); "
                    "give its size or "
                    f"bounds with shapes={{{name!r}: (...)}}{bind}"
                )
            sym = _renamed(bound[key], sym_name)
        else:
            if isinstance(d, int):
                raise ShapeError(
                    f"{where}: bounds {g!r} given, but the model declares the static size {d}"
                )
            lo, hi, step = bound_of(g, where)
            sym = Symbol(sym_name, lo, hi, step)
            if key in bound and _renamed(bound[key], sym_name) != sym:
                raise ShapeError(
                    f"{where}: bounds {g!r} contradict dims[{key!r}] ({bound[key].describe()})"
                )
        old = table.get(sym.name)
        if old is not None and old != sym:
            raise ShapeError(
                f"{where}: dim {sym.name!r} is bounded twice, {old.describe()} and "
                f"{sym.describe()} (axes that share a name are equal at run time)"
            )
        out.append(Dim.of(table.add(sym)))
    return tuple(out)


def _renamed(sym: Symbol, name: str) -> Symbol:
    return sym if sym.name == name else Symbol(name, sym.lo, sym.hi, sym.step)


def specializations(
    opt_shapes: Mapping[str, Sequence[Sequence[int]]] | None,
    shapes: Mapping[str, tuple[int | Dim, ...]],
    table: SymbolTable,
) -> list[dict[str, int]]:
    """``opt_shapes`` -> one ``{symbol: value}`` per specialization.

    The k-th shape of every input named forms specialization k (every list the same
    length); together they must fix every symbol of the graph.

    Raises
    ------
    ShapeError
        An input that is not a runtime input, a shape of the wrong rank, a static dim
        differing, a value out of bounds or off step, two values for one symbol, lists
        of different lengths, a symbol left unset.
    """
    if not opt_shapes:
        return []
    lists = {}
    for name, entries in opt_shapes.items():
        if name not in shapes:
            raise ShapeError(f"opt_shapes: {name!r} is not a runtime input (inputs: {list(shapes)})")
        entries = list(entries)
        if entries and _is_int(entries[0]):
            entries = [entries]  # one shape given bare
        lists[name] = entries
    counts = {len(v) for v in lists.values()}
    if len(counts) != 1:
        raise ShapeError(
            f"opt_shapes: every input needs the same number of shapes, got "
            f"{ {k: len(v) for k, v in lists.items()} }"
        )
    out = []
    for k in range(counts.pop()):
        values: dict[str, int] = {}
        for name, entries in lists.items():
            _bind_opt(name, entries[k], shapes[name], values, k)
        missing = [s.name for s in table if s.name not in values]
        if missing:
            raise ShapeError(
                f"opt_shapes entry {k}: run-time dim(s) {missing} are not fixed by the "
                "shapes given (name every input that carries them)"
            )
        if values not in out:
            out.append(values)
    if not table and out:
        raise ShapeError("opt_shapes: the model has no run-time dims to specialize")
    return out


def _bind_opt(name, shape, dims, values: dict[str, int], k: int) -> None:
    where = f"opt_shapes[{name!r}][{k}]"
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"{where}: {shape!r} is not a sequence of ints") from None
    if len(shape) != len(dims):
        raise ShapeError(f"{where}: shape {shape} has rank {len(shape)}, the input {len(dims)}")
    for axis, (v, d) in enumerate(zip(shape, dims)):
        if not isinstance(d, Dim):
            if v != d:
                raise ShapeError(f"{where}, axis {axis}: {v} given, the input's size is {d}")
            continue
        (sym,) = d.symbols()
        if not sym.contains(v):
            raise ShapeError(
                f"{where}, axis {axis} ({sym.name}): {v} is outside {sym.describe()}"
            )
        if values.setdefault(sym.name, v) != v:
            raise ShapeError(
                f"{where}, axis {axis}: dim {sym.name!r} is {values[sym.name]} elsewhere "
                f"in this entry, {v} here"
            )
        assert evaluate(d, values) == v


def _fmt(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
