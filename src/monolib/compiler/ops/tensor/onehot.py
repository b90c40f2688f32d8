"""ONNX ``OneHot`` (9, 11): ``indices`` (any numeric type), constant scalar ``depth``,
``values = [off, on]``; the output inserts a dim of size ``depth`` at ``axis`` and
holds ``on`` where the (negative-wrapped) index equals the position, else ``off``.
Out-of-range indices give a row of ``off``. A run-time ``depth`` (issue 13) goes to
:mod:`.onehot_data` (bounded by the user's ``max_sizes``)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from . import onehot_data
from .loops import contiguous_strides, emit_loops, linear_offset, normalize_axis

__all__ = ["OneHot"]

logger = logging.getLogger(__name__)


@register
class OneHot(OpDef):
    """``OneHot``.

    Raises
    ------
    ShapeError
        When ``depth`` is not a positive compile-time constant or ``values`` does not
        have two elements.
    """

    op_type, since_version = "OneHot", 9
    also_versions = (28,)  # 28 adds bfloat16 values only

    def _depth(self, node: Node) -> int:
        v = node.inputs[1]
        if v.const is None or v.size != 1 or float(v.const.reshape(-1)[0]) < 1:
            raise ShapeError(
                f"OneHot (node {node.name!r}): depth must be a positive constant scalar"
            )
        return int(v.const.reshape(-1)[0])

    def _axis(self, node: Node) -> int:
        rank = len(node.inputs[0].shape) + 1
        return normalize_axis(node.attrs["axis"], rank, f"OneHot (node {node.name!r})")

    def infer(self, node: Node) -> list[OutType]:
        idx, values = node.inputs[0], node.inputs[2]
        if values.size != 2:
            raise ShapeError(f"OneHot (node {node.name!r}): values must have 2 elements")
        a = self._axis(node)
        if node.inputs[1].const is None and node.inputs[1].size == 1:
            return [(onehot_data.out_shape(node, a), values.dtype)]
        shape = list(idx.shape)
        shape.insert(a, self._depth(node))
        return [(tuple(shape), values.dtype)]

    def reference(self, node: Node, inputs):
        idx, _, values = inputs
        depth, a = self._depth(node), self._axis(node)
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + depth, idx)
        pos = np.arange(depth).reshape((-1,) + (1,) * (idx.ndim - a))
        hot = np.expand_dims(idx, a) == pos
        off, on = values.reshape(-1)
        return [np.where(hot, on, off).astype(values.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        idx, values, y = node.inputs[0], node.inputs[2], node.outputs[0]
        if node.inputs[1].const is None:
            return onehot_data.emit(node, ctx, self._axis(node))
        depth, a = self._depth(node), self._axis(node)
        ist = contiguous_strides(idx.shape)
        ost = contiguous_strides(y.shape)
        vals = ctx.ptr(values)

        def body(o: list[str]) -> str:
            t = ctx.unique("ix")
            src = o[:a] + o[a + 1 :]
            return (
                f"int64_t {t} = (int64_t){ctx.ptr(idx)}[{linear_offset(src, ist)}];\n"
                f"if ({t} < 0) {t} += {depth};\n"
                f"{ctx.ptr(y)}[{linear_offset(o, ost)}] = {t} == {o[a]} ? {vals}[1] : {vals}[0];"
            )

        return emit_loops(ctx, y.shape, body)
