"""ONNX ``Trilu`` (14): keep the upper (``upper=1``: ``j - i >= k``) or lower
(``j - i <= k``) triangle of the last two dims, zero elsewhere; ``k`` is an optional
constant scalar input (default 0)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype
from .loops import const_ints, contiguous_strides, emit_loops, has_epilogue, linear_offset

__all__ = ["Trilu"]

logger = logging.getLogger(__name__)


@register
class Trilu(OpDef):
    """``Trilu`` on ``[..., N, M]``."""

    op_type, since_version = "Trilu", 14

    def _k(self, node: Node) -> int:
        k = const_ints(node, 1, "k")
        return k[0] if k else 0

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if len(x.shape) < 2:
            raise ShapeError(f"Trilu (node {node.name!r}): needs rank >= 2, got {list(x.shape)}")
        self._k(node)
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        fn = np.triu if node.attrs["upper"] else np.tril
        return [fn(inputs[0], self._k(node))]

    def epilogue_groups(self, node: Node):
        rank = len(node.outputs[0].shape)
        return [[], list(range(rank - 1)), [rank - 1]]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        k = self._k(node)
        st = contiguous_strides(x.shape)
        epi = has_epilogue(ctx, len(y.shape))
        cmp = ">=" if node.attrs["upper"] else "<="

        def body(o: list[str]) -> str:
            off = linear_offset(o, st)
            i, j = o[-2], o[-1]
            val = f"(({j} - {i}) {cmp} {k} ? {ctx.ptr(x)}[{off}] : ({ctype(y.dtype)})0)"
            if epi:
                val = ctx.output_expr(val, o)
            return f"{ctx.ptr(y)}[{off}] = {val};"

        return emit_loops(ctx, y.shape, body)
