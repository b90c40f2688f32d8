"""ONNX ``Gather`` (11, 13): ``out = data`` indexed along ``axis`` by ``indices``
(any rank; negative indices count from the end).

Output shape ``data.shape[:axis] + indices.shape + data.shape[axis+1:]``. The emitted
loop copies one contiguous run of ``prod(data.shape[axis+1:])`` elements per index.
An out-of-range index at run time is clamped into range (C cannot raise; this keeps a
bad index from reading outside the tensor); constant indices are checked at compile
time.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OutType, register
from .axis import attr_axis, split_at_axis
from .flat import FlatEpilogueOp
from .loops import flat_index_exprs, has_epilogue

__all__ = ["Gather", "clamped_index"]

logger = logging.getLogger(__name__)


def clamped_index(t: str, src: str, dim: int) -> str:
    """C statements declaring ``int64_t t``: the index read by expression ``src``
    (negative counts from the end) clamped into ``[0, dim)``, so that a bad run-time
    index never reads outside the tensor (C cannot raise)."""
    return (
        f"int64_t {t} = (int64_t){src};\n"
        f"if ({t} < 0) {t} += {dim};\n"
        f"if ({t} < 0) {t} = 0; else if ({t} >= {dim}) {t} = {dim - 1};"
    )


@register
class Gather(FlatEpilogueOp):
    """``Gather`` along ``axis``.

    Raises
    ------
    ShapeError
        For a constant index out of ``[-dim, dim)`` or non-integer indices.
    """

    op_type, since_version = "Gather", 1

    def _axis(self, node: Node) -> int:
        return attr_axis(node)

    def infer(self, node: Node) -> list[OutType]:
        data, idx = node.inputs[0], node.inputs[1]
        a = self._axis(node)
        where = f"Gather (node {node.name!r})"
        if idx.dtype.kind not in "iu":
            raise ShapeError(f"{where}: indices must be int32/int64, got {idx.dtype}")
        if idx.is_const and idx.size:
            dim = data.shape[a]
            if idx.const.min() < -dim or idx.const.max() >= dim:
                raise ShapeError(f"{where}: index out of range [-{dim}, {dim})")
        return [(data.shape[:a] + idx.shape + data.shape[a + 1 :], data.dtype)]

    def reference(self, node: Node, inputs):
        data, idx = inputs
        a = self._axis(node)
        dim = data.shape[a]
        idx = np.where(idx < 0, idx + dim, idx)
        return [np.array(np.take(data, idx.astype(np.int64), axis=a), order="C")]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        data, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
        if y.size == 0:
            return ""
        outer, dim, inner = split_at_axis(data.shape, self._axis(node))
        n = idx.size
        o, k, j, t = ctx.unique("o"), ctx.unique("k"), ctx.unique("j"), ctx.unique("ix")
        flat = f"({o}*{n} + {k})*{inner} + {j}"
        src = f"{ctx.ptr(data)}[({o}*{dim} + {t})*{inner} + {j}]"
        if has_epilogue(ctx, len(y.shape)):
            src = ctx.output_expr(src, flat_index_exprs(flat, y.shape))
        return (
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) for (int64_t {k} = 0; {k} < {n}; ++{k}) {{\n"
            f"{clamped_index(t, f'{ctx.ptr(idx)}[{k}]', dim)}\n"
            f"for (int64_t {j} = 0; {j} < {inner}; ++{j}) {ctx.ptr(y)}[{flat}] = {src};\n}}"
        )
