"""ONNX ``CumSum`` (11, 14): running sums along the constant scalar ``axis`` input;
``exclusive=1`` starts from 0 (each output excludes its own element), ``reverse=1``
sums from the end. The emitter keeps one running sum per inner position, so the
innermost loop is contiguous."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OutType, register
from ..tensor.loops import flat_index_exprs, has_epilogue, normalize_axis
from ..tensor.axis import split_at_axis
from ..tensor.flat import FlatEpilogueOp
from .reduce import acc_ctype

__all__ = ["CumSum"]

logger = logging.getLogger(__name__)


@register
class CumSum(FlatEpilogueOp):
    """``CumSum``.

    Raises
    ------
    ShapeError
        When ``axis`` is not a constant in range.
    """

    op_type, since_version = "CumSum", 11
    #: how emit folds an element into the running value, and the value it starts from
    #: (CumProd sets ``*=`` and 1)
    combine, identity = "+=", 0

    def _axis(self, node: Node) -> int:
        v = node.inputs[1]
        if v.const is None or v.size != 1:
            raise ShapeError(f"CumSum (node {node.name!r}): axis must be a constant scalar")
        rank = len(node.inputs[0].shape)
        return normalize_axis(int(v.const.reshape(-1)[0]), rank, f"CumSum (node {node.name!r})")

    def infer(self, node: Node) -> list[OutType]:
        self._axis(node)
        x = node.inputs[0]
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        a = self._axis(node)
        v = np.flip(x, a) if node.attrs["reverse"] else x
        out = np.cumsum(v, axis=a, dtype=x.dtype)
        if node.attrs["exclusive"]:
            out = out - v
        if node.attrs["reverse"]:
            out = np.flip(out, a)
        return [np.array(out, dtype=x.dtype, order="C")]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        outer, n, inner = split_at_axis(x.shape, self._axis(node))
        act = acc_ctype(x.dtype)
        acc, o, k, i = ctx.unique("acc"), ctx.unique("o"), ctx.unique("k"), ctx.unique("i")
        kk = f"({n - 1} - {k})" if node.attrs["reverse"] else k
        flat = f"{o}*{n * inner} + {kk}*{inner} + {i}"
        val = f"{ctx.ptr(x)}[{flat}]"
        out = f"{acc}[{i}]"
        if has_epilogue(ctx, len(y.shape)):
            out = ctx.output_expr(f"({act}){out}", flat_index_exprs(flat, y.shape))
        store = f"{ctx.ptr(y)}[{flat}] = {out};"
        step = f"{acc}[{i}] {self.combine} {val};"
        body = f"{store} {step}" if node.attrs["exclusive"] else f"{step} {store}"
        return (
            f"{act}* {acc} = ({act}*){ctx.scratch(inner * 8)};\n"
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) {{\n"
            f"for (int64_t {i} = 0; {i} < {inner}; ++{i}) {acc}[{i}] = {self.identity};\n"
            f"for (int64_t {k} = 0; {k} < {n}; ++{k})\n"
            f"for (int64_t {i} = 0; {i} < {inner}; ++{i}) {{ {body} }}\n}}"
        )
