"""Binary and variadic arithmetic: Add, Sub, Mul, Div, Mod, Pow, Max, Min, Sum, Mean.

Semantics follow the ONNX operator specs (opsets 7..14 for the binary ops, 8..13 for
the variadic ones): NumPy multidirectional broadcasting; integer ``Div`` truncates
toward zero like C (and like ONNX Runtime); integer ``Mod`` with ``fmod=0`` takes the
sign of the divisor like Python.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import reduce

import numpy as np

from ....errors import UnsupportedOpError
from ...ir import Node
from ..base import register
from ...backends.cstyle import c_literal, ctype
from .elementwise import (
    Elementwise,
    bind,
    cast_expr,
    cfn,
    const_scalar,
    is_float,
)
from .traits import SameDtype, UfuncBinary

__all__ = ["Add", "Div", "Max", "Mean", "Min", "Mod", "Mul", "Pow", "Sub", "Sum"]

logger = logging.getLogger(__name__)


def _safe_div(a: str, b: str, dtype: np.dtype, op: str) -> str:
    """C integer ``a / b`` or ``a % b`` that never traps: ``x / 0`` and ``x % 0`` give
    0; for signed types ``b == -1`` is done without dividing (``INT_MIN / -1``
    raises SIGFPE on x86): ``-a`` wrapped through unsigned, and 0 for ``%``."""
    dt = np.dtype(dtype)
    if dt.kind == "u" or dt.itemsize < 4:
        return f"({b} == 0 ? 0 : {a} {op} {b})"
    neg = f"({ctype(dt)})(0 - (u{ctype(dt)}){a})" if op == "/" else "0"
    return f"({b} == 0 ? 0 : ({b} == -1 ? {neg} : {a} {op} {b}))"


def _narrow(expr: str, dtype: np.dtype) -> str:
    """Cast back to ``dtype`` where C's integer promotion widened the result."""
    dt = np.dtype(dtype)
    if dt.kind in "iub" and dt.itemsize < 4:
        return cast_expr(expr, dt)
    return expr


class _Binary(SameDtype, UfuncBinary):
    """A binary op ``a <sym> b`` with one type T."""

    sym = "+"
    ufunc = staticmethod(np.add)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        a, b = args
        return _narrow(f"({a} {self.sym} {b})", node.outputs[0].dtype)


@register
class Add(_Binary):
    """ONNX ``Add`` (7, 13, 14): ``A + B`` with broadcasting."""

    op_type = "Add"
    since_version = 7


@register
class Sub(_Binary):
    """ONNX ``Sub`` (7, 13, 14): ``A - B`` with broadcasting."""

    op_type = "Sub"
    since_version = 7
    sym = "-"
    ufunc = staticmethod(np.subtract)


@register
class Mul(_Binary):
    """ONNX ``Mul`` (7, 13, 14): ``A * B`` with broadcasting."""

    op_type = "Mul"
    since_version = 7
    sym = "*"
    ufunc = staticmethod(np.multiply)


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncated toward zero (C semantics); ``x / 0`` gives 0 and
    ``INT_MIN / -1`` wraps to ``INT_MIN`` like the emitted C."""
    a, b = np.broadcast_arrays(a, b)
    safe = np.where(b == 0, 1, b).astype(a.dtype)
    q = np.floor_divide(a, safe)
    r = a - q * safe
    q = np.where((r != 0) & ((a < 0) != (safe < 0)), q + 1, q)
    return np.where(b == 0, 0, q).astype(a.dtype)


@register
class Div(_Binary):
    """ONNX ``Div`` (7, 13, 14): ``A / B``; integer division truncates toward zero
    (C and ONNX Runtime); an integer division by zero gives 0 instead of a trap."""

    op_type = "Div"
    since_version = 7
    sym = "/"

    def np_fn(self, node: Node, a, b):
        if is_float(a.dtype):
            return np.divide(a, b)
        return _int_div(a, b)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        if is_float(dt):
            return f"({args[0]} / {args[1]})"
        return bind(args, [dt, dt], lambda a, b: _narrow(_safe_div(a, b, dt, "/"), dt))


@register
class Mod(_Binary):
    """ONNX ``Mod`` (10, 13): with ``fmod=0`` (integers only) the result takes the
    divisor's sign (Python ``%``); with ``fmod=1`` the dividend's (C ``fmod``).
    A modulus by zero gives 0."""

    op_type = "Mod"
    since_version = 10
    #: 28 defines ``fmod=0`` for floats: ``a - floor(a / b) * b`` (handled below)
    also_versions = (28,)

    def infer(self, node: Node):
        if is_float(node.inputs[0].dtype) and not node.attrs["fmod"] and node.opset < 28:
            raise UnsupportedOpError(
                f"Mod (node {node.name!r}): fmod=0 is not defined for floats before opset 28 (ONNX spec)"
            )
        return super().infer(node)

    def np_fn(self, node: Node, a, b):
        if is_float(a.dtype) and not node.attrs["fmod"]:
            return np.mod(a, b)  # Python's float %: the sign of b, the spec's cases
        if node.attrs["fmod"]:
            if is_float(a.dtype):
                return np.fmod(a, b)
            a, b = np.broadcast_arrays(a, b)
            safe = np.where(b == 0, 1, b)
            return np.where(b == 0, 0, np.fmod(a, safe))
        a, b = np.broadcast_arrays(a, b)
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, np.mod(a, safe))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        if is_float(dt) and not node.attrs["fmod"]:

            def float_mod(a: str, b: str) -> str:
                r = f"{cfn('fmod', dt)}({a}, {b})"
                sign0 = f"{cfn('copysign', dt)}({c_literal(0, dt)}, {b})"
                return bind(
                    [r], [dt], lambda m: f"({m} == 0 ? {sign0} : (({m} < 0) != ({b} < 0) ? {m} + {b} : {m}))"
                )

            return bind(args, [dt, dt], float_mod)
        if is_float(dt):
            return f"{cfn('fmod', dt)}({args[0]}, {args[1]})"
        if node.attrs["fmod"]:
            return bind(args, [dt, dt], lambda a, b: _narrow(_safe_div(a, b, dt, "%"), dt))

        def python_mod(a: str, b: str) -> str:
            r = _safe_div(a, b, dt, "%")
            return bind(
                [r],
                [dt],
                lambda m: _narrow(
                    f"(({m} != 0 && (({m} < 0) != ({b} < 0))) ? {m} + {b} : {m})", dt
                ),
            )

        return bind(args, [dt, dt], python_mod)


_POW_SPECIAL = {
    1.0: lambda x, dt: x,
    2.0: lambda x, dt: f"({x} * {x})",
    3.0: lambda x, dt: f"({x} * {x} * {x})",
    0.5: lambda x, dt: f"{cfn('sqrt', dt)}({x})",
    -1.0: lambda x, dt: f"({c_literal(1, dt)} / {x})",
    0.0: lambda x, dt: c_literal(1, dt),
}


@register
class Pow(Elementwise):
    """ONNX ``Pow`` (7, 12, 13, 15): ``X ** Y``; the output has X's type. A constant
    exponent of 0, 0.5, 1, 2, 3 or -1 is computed without ``pow``."""

    op_type = "Pow"
    since_version = 7

    def np_fn(self, node: Node, x, y):
        if is_float(x.dtype):
            return np.power(x, y.astype(x.dtype))
        if is_float(y.dtype):
            return np.power(x.astype(np.float64), y).astype(x.dtype)
        return np.power(x, y.astype(x.dtype))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        e = const_scalar(node.inputs[1])
        if is_float(dt):
            if e is not None and float(e) in _POW_SPECIAL:
                return bind(args[:1], [dt], lambda x: _POW_SPECIAL[float(e)](x, dt))
            return f"{cfn('pow', dt)}({args[0]}, ({'float' if dt == np.float32 else 'double'})({args[1]}))"
        return cast_expr(f"pow((double)({args[0]}), (double)({args[1]}))", dt)


class _Variadic(SameDtype):
    """A variadic op folding its inputs left to right."""

    def combine(self, a: str, b: str, dt: np.dtype) -> str:
        raise NotImplementedError

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return reduce(lambda a, b: self.combine(a, b, dt), args)


class _Extreme(_Variadic):
    """Max or Min: keeps ``x`` where ``x <sym> y``; a NaN in either input gives NaN."""

    sym = ">"
    ufunc = staticmethod(np.maximum)

    def np_fn(self, node: Node, *xs):
        return reduce(self.ufunc, xs)

    def combine(self, a: str, b: str, dt: np.dtype) -> str:
        # NaN propagates as in np.maximum and ORT: x != x is false for integers; `|`,
        # not `||`: no branch, so the compiler can make it a vector compare and blend
        return bind(
            [a, b], [dt, dt], lambda x, y: f"((({x} {self.sym} {y}) | ({x} != {x})) ? {x} : {y})",
            loads=True,
        )


@register
class Max(_Extreme):
    """ONNX ``Max`` (8, 12, 13): elementwise maximum of 1..N broadcast inputs."""

    op_type = "Max"
    since_version = 8


@register
class Min(_Extreme):
    """ONNX ``Min`` (8, 12, 13): elementwise minimum of 1..N broadcast inputs."""

    op_type = "Min"
    since_version = 8
    sym = "<"
    ufunc = staticmethod(np.minimum)


@register
class Sum(_Variadic):
    """ONNX ``Sum`` (8, 13): elementwise sum of 1..N broadcast inputs."""

    op_type = "Sum"
    since_version = 8

    def np_fn(self, node: Node, *xs):
        return reduce(np.add, xs)

    def combine(self, a: str, b: str, dt: np.dtype) -> str:
        return _narrow(f"({a} + {b})", dt)


@register
class Mean(_Variadic):
    """ONNX ``Mean`` (8, 13): elementwise mean of 1..N broadcast float inputs."""

    op_type = "Mean"
    since_version = 8
    float_only = True

    def np_fn(self, node: Node, *xs):
        return reduce(np.add, xs) / np.asarray(len(xs), dtype=xs[0].dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        total = " + ".join(args)
        return f"(({total}) / {c_literal(len(args), dt)})"
