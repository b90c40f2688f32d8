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
from .flat import FlatEpilogueOp
from .loops import flat_index_exprs, has_epilogue, normalize_axis

__all__ = ["Gather"]

logger = logging.getLogger(__name__)


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
        return normalize_axis(
            node.attrs["axis"], len(node.inputs[0].shape), f"Gather (node {node.name!r})"
        )

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
        a = self._axis(node)
        outer = int(np.prod(data.shape[:a], dtype=np.int64))
        dim = data.shape[a]
        inner = int(np.prod(data.shape[a + 1 :], dtype=np.int64))
        n = idx.size
        o, k, j, t = ctx.unique("o"), ctx.unique("k"), ctx.unique("j"), ctx.unique("ix")
        flat = f"({o}*{n} + {k})*{inner} + {j}"
        src = f"{ctx.ptr(data)}[({o}*{dim} + {t})*{inner} + {j}]"
        if has_epilogue(ctx, len(y.shape)):
            src = ctx.output_expr(src, flat_index_exprs(flat, y.shape))
        return (
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) for (int64_t {k} = 0; {k} < {n}; ++{k}) {{\n"
            f"int64_t {t} = (int64_t){ctx.ptr(idx)}[{k}];\n"
            f"if ({t} < 0) {t} += {dim};\n"
            f"if ({t} < 0) {t} = 0; else if ({t} >= {dim}) {t} = {dim - 1};\n"
            f"for (int64_t {j} = 0; {j} < {inner}; ++{j}) {ctx.ptr(y)}[{flat}] = {src};\n}}"
        )
