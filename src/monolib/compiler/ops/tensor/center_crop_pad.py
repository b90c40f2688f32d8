"""ONNX ``CenterCropPad`` (18): each listed axis is cropped or zero-padded to the
target length, centered (an odd difference puts the extra element at the end, as the
ONNX reference does). The target ``shape`` must be a compile-time constant."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import const_ints, contiguous_strides, emit_copy, normalize_axis

__all__ = ["CenterCropPad"]

logger = logging.getLogger(__name__)


@register
class CenterCropPad(OpDef):
    """``CenterCropPad``: X (any type) and constant int ``shape`` (one value per axis
    of ``axes``, default all) -> Y of the target lengths.

    Raises
    ------
    ShapeError
        When ``shape`` is not constant or its length does not match the axes.
    """

    op_type, since_version = "CenterCropPad", 18
    defaults = {"axes": None}

    def _plan(self, node: Node):
        """(output shape, input start per dim, output start per dim, copied lengths)."""
        x = node.inputs[0]
        rank = len(x.shape)
        target = const_ints(node, 1, "shape")
        axes = self.attr(node, "axes") or list(range(rank))
        axes = [normalize_axis(int(a), rank, f"CenterCropPad (node {node.name!r})") for a in axes]
        if target is None or len(target) != len(axes) or any(t < 0 for t in target):
            raise ShapeError(f"CenterCropPad (node {node.name!r}): shape {target} does not "
                             f"give a length >= 0 for each of the axes {axes}")
        out, src, dst, n = list(x.shape), [0] * rank, [0] * rank, list(x.shape)
        for a, t in zip(axes, target):
            dim = x.shape[a]
            out[a] = t
            if t < dim:
                src[a], n[a] = (dim - t) // 2, t
            elif t > dim:
                dst[a] = (t - dim) // 2
        return tuple(out), src, dst, n

    def infer(self, node: Node) -> list[OutType]:
        return [(self._plan(node)[0], node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        out, src, dst, n = self._plan(node)
        y = np.zeros(out, x.dtype)
        y[tuple(slice(d, d + k) for d, k in zip(dst, n))] = \
            x[tuple(slice(s, s + k) for s, k in zip(src, n))]
        return [y]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        out, src, dst, n = self._plan(node)
        if y.size == 0:
            return ""
        code = ""
        if tuple(n) != tuple(out):  # some padding: zero the output first
            code = f"memset({ctx.ptr(y)}, 0, {y.size * y.dtype.itemsize});\n"
        xs, ys = contiguous_strides(x.shape), contiguous_strides(out)
        xoff = sum(s * st for s, st in zip(src, xs))
        yoff = sum(d * st for d, st in zip(dst, ys))
        return code + emit_copy(ctx, n, ctx.ptr(y), (ys, yoff), ctx.ptr(x), (xs, xoff))
