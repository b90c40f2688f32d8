"""Less common elementwise ops: IsNaN, IsInf (float -> bool), Mish, ThresholdedRelu,
Celu, Shrink (formulas from the ONNX operator specs)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ...ir import Node
from ..base import register
from ...backends.cstyle import c_literal
from .activation import input_scalar
from .elementwise import Elementwise, bind, cast_expr, cfn
from .traits import BoolOutput

__all__ = ["Celu", "IsInf", "IsNaN", "Mish", "Shrink", "ThresholdedRelu"]

logger = logging.getLogger(__name__)


@register
class IsNaN(BoolOutput):
    """ONNX ``IsNaN`` (9, 13, 20): true where x is NaN."""

    op_type, since_version = "IsNaN", 9
    float_only = True

    def np_fn(self, node: Node, x):
        return np.isnan(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return f"((uint8_t)isnan({args[0]}))"


@register
class IsInf(BoolOutput):
    """ONNX ``IsInf`` (10, 20): true where x is +inf (``detect_positive``) or -inf
    (``detect_negative``)."""

    op_type, since_version = "IsInf", 10
    float_only = True

    def np_fn(self, node: Node, x):
        pos = np.isposinf(x) if node.attrs["detect_positive"] else np.zeros(x.shape, bool)
        neg = np.isneginf(x) if node.attrs["detect_negative"] else np.zeros(x.shape, bool)
        return pos | neg

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.inputs[0].dtype
        pos, neg = node.attrs["detect_positive"], node.attrs["detect_negative"]

        def body(x: str) -> str:
            terms = ([f"{x} == INFINITY"] if pos else []) + ([f"{x} == -INFINITY"] if neg else [])
            return f"((uint8_t)({' || '.join(terms) or '0'}))"

        return bind(args, [dt], body)


@register
class Mish(Elementwise):
    """ONNX ``Mish`` (18): ``x * tanh(softplus(x))``."""

    op_type, since_version = "Mish", 18
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        x64 = x.astype(np.float64)
        return x64 * np.tanh(np.log1p(np.exp(x64)))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return bind(
            args,
            [dt],
            lambda x: f"({x} * {cfn('tanh', dt)}({cfn('log1p', dt)}({cfn('exp', dt)}({x}))))",
        )


@register
class ThresholdedRelu(Elementwise):
    """ONNX ``ThresholdedRelu`` (10): ``x > alpha ? x : 0``."""

    op_type, since_version = "ThresholdedRelu", 10
    also_versions = (22,)  # 22 adds bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        return np.where(x > input_scalar(node, node.attrs["alpha"]), x, 0)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        a, zero = c_literal(node.attrs["alpha"], dt), c_literal(0, dt)
        return bind(args, [dt], lambda x: f"({x} > {a} ? {x} : {zero})")


@register
class Celu(Elementwise):
    """ONNX ``Celu`` (12): ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    op_type, since_version = "Celu", 12
    also_versions = (28,)  # 28 adds double, float16, bfloat16 only
    float_only = True

    def np_fn(self, node: Node, x):
        a = input_scalar(node, node.attrs["alpha"])
        return np.maximum(x, 0) + np.minimum(0, a * (np.exp(x / a) - 1))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        a, zero, one = c_literal(node.attrs["alpha"], dt), c_literal(0, dt), c_literal(1, dt)
        exp = cfn("exp", dt)
        return bind(
            args, [dt], lambda x: f"({x} > {zero} ? {x} : {a} * ({exp}({x} / {a}) - {one}))"
        )


@register
class Shrink(Elementwise):
    """ONNX ``Shrink`` (9): ``x < -lambd ? x + bias : (x > lambd ? x - bias : 0)``."""

    op_type, since_version = "Shrink", 9

    def np_fn(self, node: Node, x):
        lam, bias = node.attrs["lambd"], node.attrs["bias"]
        out = np.where(x < -lam, x + bias, np.where(x > lam, x - bias, 0))
        return out.astype(x.dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        lam, bias = node.attrs["lambd"], node.attrs["bias"]
        if dt.kind == "f":
            lam_s, bias_s = c_literal(lam, dt), c_literal(bias, dt)
        else:
            lam_s, bias_s = repr(float(lam)), repr(float(bias))

        def body(x: str) -> str:
            return f"({x} < -{lam_s} ? {x} + {bias_s} : ({x} > {lam_s} ? {x} - {bias_s} : 0))"

        out = bind(args, [dt], body)
        return out if dt.kind == "f" else cast_expr(out, dt)
