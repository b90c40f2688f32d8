"""Activations: Relu, LeakyRelu, PRelu, Sigmoid, HardSigmoid, HardSwish, Elu, Selu,
Softplus, Softsign, Gelu.

Formulas from the ONNX operator specs; attribute values (``alpha``, ``beta``,
``gamma``) are baked into the C expression as float literals of the output type.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ...ir import Node
from ..base import register
from ...backends.cstyle import c_literal
from .elementwise import Elementwise, at_least, at_most, bind, cast_expr, cfn, is_float

__all__ = [
    "Elu",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "PRelu",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softplus",
    "Softsign",
    "input_scalar",
]

logger = logging.getLogger(__name__)


def _lit(v: float, node: Node) -> str:
    return c_literal(v, node.outputs[0].dtype)


def input_scalar(node: Node, v: float) -> np.ndarray:
    """An attribute value as a NumPy scalar of input 0's type (keeps float32 math in
    float32 like the C code)."""
    return np.asarray(v, dtype=node.inputs[0].dtype)


def _clamp01(e: str, node: Node) -> str:
    """``min(max(e, 0), 1)`` in C, evaluating ``e`` once."""
    dt = node.outputs[0].dtype
    zero, one = _lit(0, node), _lit(1, node)
    return bind([e], [dt], lambda t: at_most(at_least(t, zero, dt), one, dt))


@register
class Relu(Elementwise):
    """ONNX ``Relu`` (6, 13, 14): ``max(x, 0)``."""

    op_type, since_version = "Relu", 6

    def np_fn(self, node: Node, x):
        return np.maximum(x, np.zeros((), x.dtype))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        zero = _lit(0, node)
        # x < 0 ? 0 : x keeps a NaN (np.maximum does); x > 0 ? x : 0 would make it 0
        out = bind(args, [dt], lambda x: at_least(x, zero, dt))
        return out if is_float(dt) else cast_expr(out, dt)


@register
class LeakyRelu(Elementwise):
    """ONNX ``LeakyRelu`` (6, 16): ``x >= 0 ? x : alpha * x``."""

    op_type, since_version = "LeakyRelu", 6
    float_only = True

    def np_fn(self, node: Node, x):
        return np.where(x >= 0, x, x * input_scalar(node, node.attrs["alpha"]))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        a = _lit(node.attrs["alpha"], node)
        dt = node.outputs[0].dtype
        return bind(args, [dt], lambda x: f"({x} >= 0 ? {x} : {x} * {a})")


@register
class PRelu(Elementwise):
    """ONNX ``PRelu`` (7, 9, 16): ``x >= 0 ? x : slope * x``, slope broadcast to x
    (unidirectional)."""

    op_type, since_version = "PRelu", 7

    def np_fn(self, node: Node, x, slope):
        return np.where(x >= 0, x, x * slope)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return bind(args, [dt, dt], lambda x, s: f"({x} >= 0 ? {x} : {x} * {s})", loads=True)


@register
class Sigmoid(Elementwise):
    """ONNX ``Sigmoid`` (6, 13): ``1 / (1 + exp(-x))``."""

    op_type, since_version = "Sigmoid", 6
    float_only = True

    def np_fn(self, node: Node, x):
        one = np.ones((), x.dtype)
        return one / (one + np.exp(-x))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        if dt == np.float32:  # vmath.h: one scaling instead of ml_expf's two
            return f"ml_logisticf({args[0]})"
        one = _lit(1, node)
        return f"({one} / ({one} + {cfn('exp', dt)}(-{args[0]})))"


@register
class HardSigmoid(Elementwise):
    """ONNX ``HardSigmoid`` (6): ``max(0, min(1, alpha * x + beta))``."""

    op_type, since_version = "HardSigmoid", 6
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        a, b = input_scalar(node, node.attrs["alpha"]), input_scalar(node, node.attrs["beta"])
        return np.clip(x * a + b, 0, 1).astype(x.dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        a, b = _lit(node.attrs["alpha"], node), _lit(node.attrs["beta"], node)
        return _clamp01(f"({args[0]} * {a} + {b})", node)


@register
class HardSwish(Elementwise):
    """ONNX ``HardSwish`` (14): ``x * max(0, min(1, x / 6 + 0.5))``."""

    op_type, since_version = "HardSwish", 14
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        a, b = input_scalar(node, 1 / 6), input_scalar(node, 0.5)
        return x * np.clip(x * a + b, 0, 1).astype(x.dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        a, b = _lit(1 / 6, node), _lit(0.5, node)
        return bind(args, [dt], lambda x: f"({x} * {_clamp01(f'({x} * {a} + {b})', node)})")


@register
class Elu(Elementwise):
    """ONNX ``Elu`` (6): ``x >= 0 ? x : alpha * (exp(x) - 1)``."""

    op_type, since_version = "Elu", 6
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        a = input_scalar(node, node.attrs["alpha"])
        return np.where(x >= 0, x, a * (np.exp(x) - 1))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        a, one = _lit(node.attrs["alpha"], node), _lit(1, node)
        return bind(
            args, [dt], lambda x: f"({x} >= 0 ? {x} : {a} * ({cfn('exp', dt)}({x}) - {one}))"
        )


@register
class Selu(Elementwise):
    """ONNX ``Selu`` (6): ``gamma * (x > 0 ? x : alpha * exp(x) - alpha)``."""

    op_type, since_version = "Selu", 6
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        a, g = input_scalar(node, node.attrs["alpha"]), input_scalar(node, node.attrs["gamma"])
        return np.where(x > 0, g * x, g * (a * np.exp(x) - a))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        a, g = _lit(node.attrs["alpha"], node), _lit(node.attrs["gamma"], node)
        return bind(
            args,
            [dt],
            lambda x: f"({x} > 0 ? {g} * {x} : {g} * ({a} * {cfn('exp', dt)}({x}) - {a}))",
        )


@register
class Softplus(Elementwise):
    """ONNX ``Softplus`` (1): ``log(exp(x) + 1)``, computed as
    ``max(x, 0) + log1p(exp(-|x|))`` so large inputs do not overflow."""

    op_type, since_version = "Softplus", 1
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        zero = _lit(0, node)
        return bind(
            args,
            [dt],
            lambda x: (
                f"(({x} > {zero} ? {x} : {zero}) + "
                f"{cfn('log1p', dt)}({cfn('exp', dt)}(-{cfn('fabs', dt)}({x}))))"
            ),
        )


@register
class Softsign(Elementwise):
    """ONNX ``Softsign`` (1): ``x / (1 + |x|)``."""

    op_type, since_version = "Softsign", 1
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        return x / (1 + np.abs(x))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return bind(args, [dt], lambda x: f"({x} / ({_lit(1, node)} + {cfn('fabs', dt)}({x})))")


@register
class Gelu(Elementwise):
    """ONNX ``Gelu`` (20): ``0.5 x (1 + erf(x / sqrt 2))`` (``approximate="none"``)
    or the tanh approximation (``approximate="tanh"``)."""

    op_type, since_version = "Gelu", 20
    float_only = True

    def np_fn(self, node: Node, x):
        x64 = x.astype(np.float64)
        if self.attr(node, "approximate") == "tanh":
            inner = np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)
            return 0.5 * x64 * (1 + np.tanh(inner))
        from .unary import _np_erf

        return 0.5 * x64 * (1 + _np_erf(x64 / np.sqrt(2)))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        half, one = _lit(0.5, node), _lit(1, node)
        if self.attr(node, "approximate") == "tanh":
            k, c = _lit(float(np.sqrt(2 / np.pi)), node), _lit(0.044715, node)
            return bind(
                args,
                [dt],
                lambda x: (
                    f"({half} * {x} * ({one} + {cfn('tanh', dt)}({k} * ({x} + {c} * {x} * {x} * {x}))))"
                ),
            )
        r = _lit(float(1 / np.sqrt(2)), node)
        return bind(args, [dt], lambda x: f"({half} * {x} * ({one} + {cfn('erf', dt)}({x} * {r})))")
