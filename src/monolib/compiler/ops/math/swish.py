"""``Swish`` (24) and ``SwiGLU`` (28): the gated SiLU activations of transformer MLPs.

``Swish(x) = x * sigmoid(alpha * x)``; ``SwiGLU(A, B) = Swish(A) * B`` with A and B of
the same shape (the spec applies no broadcasting). Formulas from the ONNX operator
specs; ``sigmoid(t)`` is computed as ``1 / (1 + exp(-t))``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import register
from ...backends.cstyle import c_literal
from .elementwise import Elementwise, bind, cfn

__all__ = ["SwiGLU", "Swish", "swish_expr"]

logger = logging.getLogger(__name__)


def swish_expr(x: str, alpha: float, dt: np.dtype) -> str:
    """C expression of ``x * sigmoid(alpha * x)`` (``x`` a simple C expression)."""
    return f"({x} / ({c_literal(1, dt)} + {cfn('exp', dt)}(-{c_literal(alpha, dt)} * {x})))"


def _swish_np(x: np.ndarray, alpha: float) -> np.ndarray:
    a = np.asarray(alpha, x.dtype)
    return x / (1 + np.exp(-a * x))


@register
class Swish(Elementwise):
    """ONNX ``Swish`` (24): float inputs."""

    op_type, since_version = "Swish", 24
    float_only = True

    def np_fn(self, node: Node, x):
        return _swish_np(x, node.attrs["alpha"])

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return bind(args, [dt], lambda x: swish_expr(x, node.attrs["alpha"], dt))


@register
class SwiGLU(Elementwise):
    """ONNX ``SwiGLU`` (28): ``Swish(A) * B``; float inputs of one shape.

    Raises
    ------
    ShapeError
        When A and B differ in shape.
    """

    op_type, since_version = "SwiGLU", 28
    float_only = True

    def infer(self, node: Node):
        a, b = node.inputs[0], node.inputs[1]
        if a.shape != b.shape:
            raise ShapeError(
                f"SwiGLU (node {node.name!r}): A {list(a.shape)} and B {list(b.shape)} must have one shape"
            )
        return super().infer(node)

    def np_fn(self, node: Node, a, b):
        return _swish_np(a, node.attrs["alpha"]) * b

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        return bind(args, [dt, dt], lambda a, b: f"({swish_expr(a, node.attrs['alpha'], dt)} * {b})")
