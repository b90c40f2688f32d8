"""``CumProd`` (ONNX 26): running products along the constant scalar ``axis`` input;
``exclusive=1`` starts from 1 (each output excludes its own element), ``reverse=1``
multiplies from the end. Same layout and loop structure as :mod:`.cumsum`."""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ..base import EmitContext, register
from ..tensor.loops import flat_index_exprs, has_epilogue
from .cumsum import CumSum
from .reduce import acc_ctype

__all__ = ["CumProd"]

logger = logging.getLogger(__name__)


@register
class CumProd(CumSum):
    """``CumProd`` 26 (the axis checks of :class:`CumSum`).

    Raises
    ------
    ShapeError
        When ``axis`` is not a constant in range.
    """

    op_type, since_version = "CumProd", 26

    def reference(self, node: Node, inputs):
        x = inputs[0]
        a = self._axis(node)
        v = np.flip(x, a) if node.attrs["reverse"] else x
        if node.attrs["exclusive"]:
            ones = np.ones_like(np.take(v, [0], axis=a))
            v = np.concatenate([ones, np.delete(v, -1, axis=a)], axis=a) if v.shape[a] else v
        out = np.cumprod(v, axis=a, dtype=x.dtype)
        if node.attrs["reverse"]:
            out = np.flip(out, a)
        return [np.array(out, dtype=x.dtype, order="C")]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        a = self._axis(node)
        outer = int(np.prod(x.shape[:a], dtype=np.int64))
        n = x.shape[a]
        inner = int(np.prod(x.shape[a + 1 :], dtype=np.int64))
        act = acc_ctype(x.dtype)
        acc, o, k, i = ctx.unique("acc"), ctx.unique("o"), ctx.unique("k"), ctx.unique("i")
        kk = f"({n - 1} - {k})" if node.attrs["reverse"] else k
        flat = f"{o}*{n * inner} + {kk}*{inner} + {i}"
        out = f"{acc}[{i}]"
        if has_epilogue(ctx, len(y.shape)):
            out = ctx.output_expr(f"({act}){out}", flat_index_exprs(flat, y.shape))
        store = f"{ctx.ptr(y)}[{flat}] = {out};"
        step = f"{acc}[{i}] *= {ctx.ptr(x)}[{flat}];"
        body = f"{store} {step}" if node.attrs["exclusive"] else f"{step} {store}"
        return (
            f"{act}* {acc} = ({act}*){ctx.scratch(inner * 8)};\n"
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) {{\n"
            f"for (int64_t {i} = 0; {i} < {inner}; ++{i}) {acc}[{i}] = 1;\n"
            f"for (int64_t {k} = 0; {k} < {n}; ++{k})\n"
            f"for (int64_t {i} = 0; {i} < {inner}; ++{i}) {{ {body} }}\n}}"
        )
