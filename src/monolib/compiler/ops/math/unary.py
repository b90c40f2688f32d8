"""Unary math: Sqrt, Exp, Log, Erf, Tanh, Sin, Cos, Neg, Abs, Floor, Ceil, Round,
Reciprocal, Sign.

Each follows its ONNX operator spec (versions 6..13; later versions only widen the
types). Float ops call the C99 ``<math.h>`` function of the element type (``expf``
for float32), so results match ONNX Runtime to a few ULP.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import numpy as np

from ...ir import Node
from ..base import register
from ...backends.cstyle import c_literal
from .elementwise import Elementwise, bind, cast_expr, cfn, is_float

__all__ = [
    "Abs",
    "Ceil",
    "Cos",
    "Erf",
    "Exp",
    "Floor",
    "Log",
    "Neg",
    "Reciprocal",
    "Round",
    "Sign",
    "Sin",
    "Sqrt",
    "Tanh",
]

logger = logging.getLogger(__name__)

_np_erf = np.vectorize(math.erf, otypes=[np.float64])


class _MathFn(Elementwise):
    """``y = f(x)`` for float x through the C function ``cname``."""

    float_only = True
    cname = ""
    ufunc: Callable = staticmethod(np.sqrt)

    def np_fn(self, node: Node, x):
        return self.ufunc(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return f"{cfn(self.cname, node.outputs[0].dtype)}({args[0]})"


@register
class Sqrt(_MathFn):
    """ONNX ``Sqrt`` (6, 13): square root (NaN for negative input)."""

    op_type, since_version, cname = "Sqrt", 6, "sqrt"
    ufunc = staticmethod(np.sqrt)


@register
class Exp(_MathFn):
    """ONNX ``Exp`` (6, 13): natural exponential."""

    op_type, since_version, cname = "Exp", 6, "exp"
    ufunc = staticmethod(np.exp)


@register
class Log(_MathFn):
    """ONNX ``Log`` (6, 13): natural logarithm."""

    op_type, since_version, cname = "Log", 6, "log"
    ufunc = staticmethod(np.log)


@register
class Tanh(_MathFn):
    """ONNX ``Tanh`` (6, 13): hyperbolic tangent."""

    op_type, since_version, cname = "Tanh", 6, "tanh"
    ufunc = staticmethod(np.tanh)


@register
class Sin(_MathFn):
    """ONNX ``Sin`` (7): sine (radians)."""

    op_type, since_version, cname = "Sin", 7, "sin"
    also_versions = (22,)  # 22 adds bfloat16 only
    ufunc = staticmethod(np.sin)


@register
class Cos(_MathFn):
    """ONNX ``Cos`` (7): cosine (radians)."""

    op_type, since_version, cname = "Cos", 7, "cos"
    also_versions = (22,)  # 22 adds bfloat16 only
    ufunc = staticmethod(np.cos)


@register
class Floor(_MathFn):
    """ONNX ``Floor`` (6, 13): round toward minus infinity."""

    op_type, since_version, cname = "Floor", 6, "floor"
    ufunc = staticmethod(np.floor)


@register
class Ceil(_MathFn):
    """ONNX ``Ceil`` (6, 13): round toward plus infinity."""

    op_type, since_version, cname = "Ceil", 6, "ceil"
    ufunc = staticmethod(np.ceil)


@register
class Round(_MathFn):
    """ONNX ``Round`` (11): round half to even (``nearbyint`` in the default
    rounding mode; ``np.round``)."""

    op_type, since_version, cname = "Round", 11, "nearbyint"
    also_versions = (22,)  # 22 adds bfloat16 only
    ufunc = staticmethod(np.round)


@register
class Erf(_MathFn):
    """ONNX ``Erf`` (9, 13): the error function."""

    op_type, since_version, cname = "Erf", 9, "erf"

    def np_fn(self, node: Node, x):
        return _np_erf(x.astype(np.float64))


@register
class Reciprocal(Elementwise):
    """ONNX ``Reciprocal`` (6, 13): ``1 / x``."""

    op_type, since_version = "Reciprocal", 6
    float_only = True

    def np_fn(self, node: Node, x):
        return np.reciprocal(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return f"({c_literal(1, node.outputs[0].dtype)} / {args[0]})"


@register
class Neg(Elementwise):
    """ONNX ``Neg`` (6, 13): ``-x`` (signed types and floats)."""

    op_type, since_version = "Neg", 6

    def np_fn(self, node: Node, x):
        return np.negative(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return f"(-{args[0]})" if is_float(dt) else cast_expr(f"-{args[0]}", dt)


@register
class Abs(Elementwise):
    """ONNX ``Abs`` (6, 13): ``|x|``."""

    op_type, since_version = "Abs", 6

    def np_fn(self, node: Node, x):
        return np.abs(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        if is_float(dt):
            return f"{cfn('fabs', dt)}({args[0]})"
        if dt.kind == "u":
            return args[0]
        return bind(args, [dt], lambda x: cast_expr(f"{x} < 0 ? -{x} : {x}", dt))


@register
class Sign(Elementwise):
    """ONNX ``Sign`` (9, 13): -1, 0 or 1 (0 for NaN... as NumPy: NaN stays NaN)."""

    op_type, since_version = "Sign", 9

    def np_fn(self, node: Node, x):
        return np.sign(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        if is_float(dt):
            one = c_literal(1, dt)
            return bind(args, [dt], lambda x: f"({x} > 0 ? {one} : ({x} < 0 ? -{one} : {x}))")
        return bind(args, [dt], lambda x: cast_expr(f"({x} > 0) - ({x} < 0)", dt))
