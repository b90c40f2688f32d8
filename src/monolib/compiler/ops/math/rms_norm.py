"""``RMSNormalization`` (ONNX 23): ``Y = X / sqrt(mean(X^2) + epsilon) * scale``.

The mean of squares is taken over the dims from ``axis`` on (rows of ``n`` contiguous
elements); ``scale`` broadcasts to those dims. ``stash_type=1`` (the default) asks for
float32 computation, which float32 and float64 inputs already meet or exceed.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OutType, register
from ...backends.cstyle import ctype
from ..tensor.axis import attr_axis
from ..tensor.flat import FlatEpilogueOp
from ..tensor.loops import broadcast_shape
from .elementwise import is_float
from .norm import _row_operand, emit_row_loop

__all__ = ["RMSNormalization"]

logger = logging.getLogger(__name__)


@register
class RMSNormalization(FlatEpilogueOp):
    """ONNX ``RMSNormalization`` 23 (float32/float64).

    Raises
    ------
    ShapeError
        An axis out of range, or a scale that does not broadcast to the normalized dims.
    UnsupportedOpError
        Non-float X.
    """

    op_type, since_version = "RMSNormalization", 23

    def _axis(self, node: Node) -> int:
        return attr_axis(node)

    def infer(self, node: Node) -> list[OutType]:
        x, scale = node.inputs[0], node.inputs[1]
        if not is_float(x.dtype):
            raise UnsupportedOpError(f"RMSNormalization (node {node.name!r}) takes floats, got {x.dtype}")
        norm = tuple(x.shape[self._axis(node) :])
        if broadcast_shape(scale.shape, norm, where=f"RMSNormalization {node.name!r}") != norm:
            raise ShapeError(
                f"RMSNormalization (node {node.name!r}): scale {list(scale.shape)} does not broadcast to {list(norm)}"
            )
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x, scale = inputs[0], inputs[1]
        axes = tuple(range(self._axis(node), x.ndim))
        ms = (x.astype(np.float64) ** 2).mean(axis=axes, keepdims=True)
        y = x / np.sqrt(ms + node.attrs["epsilon"]) * scale
        return [y.astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        if x.size == 0:
            return ""
        a = self._axis(node)
        norm = x.shape[a:]
        n, rows = math.prod(norm), math.prod(x.shape[:a])  # run-time dims stay Dims
        ct = ctype(x.dtype)
        o, j, s, row = (ctx.unique(p) for p in ("o", "j", "ss", "row"))
        sc = _row_operand(ctx, node.inputs[1], norm, j)
        # the sum of squares in double: rows of thousands of float32 values lose
        # digits in a float accumulator
        stats = (
            f"double {s}d = 0;\n"
            f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {s}d += (double){row}[{j}] * {row}[{j}];\n"
            f"const {ct} {s} = ({ct})(1.0 / sqrt({s}d / {n} + {node.attrs['epsilon']!r}));"
        )
        return emit_row_loop(ctx, node, rows, n, (o, j, row), stats, f"({row}[{j}] * {s} * {sc})")
