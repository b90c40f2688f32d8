"""ONNX ``GatherElements`` (11, 13): ``out[i0, .., ia, ..] = data[i0, .., idx[i0, .., ia, ..], ..]``
along ``axis``; the output has the indices' shape. Negative indices count from the
end; an out-of-range runtime index is clamped (C cannot raise), a constant one is a
compile-time error."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import contiguous_strides, emit_loops, has_epilogue, linear_offset, normalize_axis

__all__ = ["GatherElements"]

logger = logging.getLogger(__name__)


@register
class GatherElements(OpDef):
    """``GatherElements``.

    Raises
    ------
    ShapeError
        For ranks that differ, an indices dim larger than data's (other than
        ``axis``), or a constant index out of range.
    """

    op_type, since_version = "GatherElements", 11

    def _axis(self, node: Node) -> int:
        where = f"GatherElements (node {node.name!r})"
        data, idx = node.inputs[0], node.inputs[1]
        a = normalize_axis(node.attrs["axis"], len(data.shape), where)
        if len(idx.shape) != len(data.shape) or any(
            i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != a
        ):
            raise ShapeError(
                f"{where}: indices {list(idx.shape)} do not fit data {list(data.shape)}"
            )
        if idx.is_const and idx.size:
            dim = data.shape[a]
            if idx.const.min() < -dim or idx.const.max() >= dim:
                raise ShapeError(f"{where}: index out of range [-{dim}, {dim})")
        return a

    def infer(self, node: Node) -> list[OutType]:
        self._axis(node)
        return [(node.inputs[1].shape, node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        data, idx = inputs
        a = self._axis(node)
        idx = np.where(idx < 0, idx + data.shape[a], idx).astype(np.int64)
        # indices may be smaller than data along the other dims: use that corner of data
        corner = tuple(slice(None) if d == a else slice(0, n) for d, n in enumerate(idx.shape))
        return [np.take_along_axis(data[corner], idx, axis=a)]

    def epilogue_groups(self, node: Node):
        rank = len(node.outputs[0].shape)
        return [[], list(range(rank - 1)), [rank - 1]] if rank else [[], [], []]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        data, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
        a = self._axis(node)
        dim = data.shape[a]
        dst = contiguous_strides(y.shape)
        dstr = contiguous_strides(data.shape)
        epi = has_epilogue(ctx, len(y.shape))

        def body(o: list[str]) -> str:
            t = ctx.unique("ix")
            src = [t if d == a else v for d, v in enumerate(o)]
            val = f"{ctx.ptr(data)}[{linear_offset(src, dstr)}]"
            if epi:
                val = ctx.output_expr(val, o)
            off = linear_offset(o, dst)
            return (
                f"int64_t {t} = (int64_t){ctx.ptr(idx)}[{off}];\n"
                f"if ({t} < 0) {t} += {dim};\n"
                f"if ({t} < 0) {t} = 0; else if ({t} >= {dim}) {t} = {dim - 1};\n"
                f"{ctx.ptr(y)}[{off}] = {val};"
            )

        return emit_loops(ctx, y.shape, body)
