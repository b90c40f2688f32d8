"""ONNX ``Expand`` (8, 13) and ``Tile`` (6, 13).

``Expand`` broadcasts the input to ``broadcast(input.shape, shape)`` (the ``shape``
input must be constant); it is a copy with zero strides along broadcast dims.
A run-time ``shape`` / ``repeats`` (issue 13) goes to :mod:`.expand_data` (sizes
bounded by the user's ``max_sizes``).
``Tile`` repeats the input ``repeats[d]`` times along each dim: the output dim
``d`` is walked as ``[repeats[d], in.shape[d]]``, a copy whose source stride along the
repeat loop is zero.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from . import expand_data
from ._computed import is_runtime
from .loops import (
    broadcast_shape,
    broadcast_strides,
    const_ints,
    contiguous_strides,
    emit_copy,
    has_epilogue,
)

__all__ = ["Expand", "Tile"]

logger = logging.getLogger(__name__)


def _groups(node: Node):
    rank = len(node.outputs[0].shape)
    return [[], list(range(rank - 1)), [rank - 1]] if rank else [[], [], []]


@register
class Expand(OpDef):
    """``Expand``: NumPy broadcast of the input to ``shape``."""

    op_type, since_version = "Expand", 8

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if is_runtime(node.input(1)):
            return expand_data.expand_infer(node)
        shape = const_ints(node, 1, "shape")
        out = broadcast_shape(x.shape, shape, where=f"Expand (node {node.name!r})")
        return [(out, x.dtype)]

    def reference(self, node: Node, inputs):
        shape = self.infer(node)[0][0]
        return [np.array(np.broadcast_to(inputs[0], shape), order="C")]

    def epilogue_groups(self, node: Node):
        return None if is_runtime(node.input(1)) else _groups(node)

    def emit(self, node: Node, ctx: EmitContext) -> str:
        if is_runtime(node.input(1)):
            return expand_data.expand_emit(node, ctx)
        x, y = node.inputs[0], node.outputs[0]
        index = (lambda idx: idx) if has_epilogue(ctx, len(y.shape)) else None
        return emit_copy(
            ctx,
            y.shape,
            ctx.ptr(y),
            (contiguous_strides(y.shape), 0),
            ctx.ptr(x),
            (broadcast_strides(x.shape, y.shape), 0),
            index,
        )


@register
class Tile(OpDef):
    """``Tile``: repeat along each dim (``repeats`` input, constant, one per dim).

    Raises
    ------
    ShapeError
        When ``repeats`` has the wrong length or a negative entry.
    """

    op_type, since_version = "Tile", 6

    def _repeats(self, node: Node) -> list[int]:
        reps = const_ints(node, 1, "repeats")
        x = node.inputs[0]
        if len(reps) != len(x.shape) or any(r < 0 for r in reps):
            raise ShapeError(
                f"Tile (node {node.name!r}): repeats {reps} for a rank-{len(x.shape)} input"
            )
        return reps

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if is_runtime(node.input(1)):
            return expand_data.tile_infer(node)
        return [(tuple(d * r for d, r in zip(x.shape, self._repeats(node))), x.dtype)]

    def reference(self, node: Node, inputs):
        return [np.tile(inputs[0], self._repeats(node))]

    def epilogue_groups(self, node: Node):
        return None if is_runtime(node.input(1)) else _groups(node)

    def emit(self, node: Node, ctx: EmitContext) -> str:
        if is_runtime(node.input(1)):
            return expand_data.tile_emit(node, ctx)
        x, y = node.inputs[0], node.outputs[0]
        reps = self._repeats(node)
        ost, ist = contiguous_strides(y.shape), contiguous_strides(x.shape)
        shape, dst, src = [], [], []
        for d, (n, r) in enumerate(zip(x.shape, reps)):
            shape += [r, n]
            dst += [n * ost[d], ost[d]]
            src += [0, ist[d]]
        index = None
        if has_epilogue(ctx, len(y.shape)):
            index = lambda idx: [
                f"({idx[2 * d]}*{n} + {idx[2 * d + 1]})" for d, n in enumerate(x.shape)
            ]
        return emit_copy(ctx, shape, ctx.ptr(y), (dst, 0), ctx.ptr(x), (src, 0), index)
