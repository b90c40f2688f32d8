"""ONNX ``GatherND`` (11, 12, 13): ``out[p] = data[idx[p]]`` where each ``idx[p]`` names
the ``q = indices.shape[-1]`` leading coordinates of a slice ``data.shape[q:]``; output
shape ``indices.shape[:-1] + data.shape[q:]``. With ``batch_dims = b`` (12+) the first
b dims of data and indices are batch dims walked together: each index tuple addresses
``data[batch]`` and the output shape is ``indices.shape[:-1] + data.shape[b + q:]``.
Negative indices count from the end; runtime out-of-range ones are clamped (C cannot
raise)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node, shape_size
from ...symbolic import is_dim
from ..base import EmitContext, OutType, register
from .flat import FlatEpilogueOp
from .gather import clamped_index
from .loops import contiguous_strides, flat_index_exprs, has_epilogue

__all__ = ["GatherND"]

logger = logging.getLogger(__name__)


@register
class GatherND(FlatEpilogueOp):
    """``GatherND`` with any ``batch_dims``.

    Raises
    ------
    ShapeError
        When ``indices.shape[-1]`` exceeds the data rank left after the batch dims, or
        the batch dims of data and indices differ.
    """

    op_type, since_version = "GatherND", 11
    defaults = {"batch_dims": 0}

    def _q(self, node: Node) -> int:
        x, idx = node.inputs[0], node.inputs[1]
        b = int(self.attr(node, "batch_dims") or 0)
        if (not idx.shape or b < 0 or b >= min(len(x.shape), len(idx.shape))
                or idx.shape[-1] > len(x.shape) - b or x.shape[:b] != idx.shape[:b]):
            raise ShapeError(
                f"GatherND (node {node.name!r}): indices {list(idx.shape)} for data "
                f"{list(x.shape)} with batch_dims {b}"
            )
        return idx.shape[-1]

    def infer(self, node: Node) -> list[OutType]:
        x, idx = node.inputs[0], node.inputs[1]
        q = self._q(node)
        b = int(self.attr(node, "batch_dims") or 0)
        return [(idx.shape[:-1] + x.shape[b + q:], x.dtype)]

    def reference(self, node: Node, inputs):
        x, idx = inputs
        q = self._q(node)
        b = int(self.attr(node, "batch_dims") or 0)
        shape = self.infer(node)[0][0]
        out = np.empty(shape, x.dtype)
        for p in np.ndindex(*idx.shape[:-1]):
            xb = x[p[:b]]
            t = tuple(int(v) + (xb.shape[d] if v < 0 else 0) for d, v in enumerate(idx[p][:q]))
            out[p] = xb[t]
        return [out]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
        if any(not is_dim(d) and d == 0 for d in y.shape):  # a run-time dim is >= 1
            return ""
        q = self._q(node)
        b = int(self.attr(node, "batch_dims") or 0)
        xs = contiguous_strides(x.shape)
        inner = shape_size(x.shape[b + q:])  # sizes keep their run-time Dims
        n = idx.size // max(q, 1)
        per_batch = n // shape_size(idx.shape[:b]) if b else n
        batch_stride = shape_size(x.shape[b:])
        p, j, base = ctx.unique("p"), ctx.unique("j"), ctx.unique("base")
        start = f"({p} / {per_batch}) * {batch_stride}" if b else "0"
        lines = [f"for (int64_t {p} = 0; {p} < {n}; ++{p}) {{", f"int64_t {base} = {start};"]
        for d in range(q):
            t = ctx.unique("ix")
            dim = x.shape[b + d]
            lines += [
                clamped_index(t, f"{ctx.ptr(idx)}[{p}*{q} + {d}]", dim),
                f"{base} += {t}*{xs[b + d]};",
            ]
        flat = f"{p}*{inner} + {j}"
        val = f"{ctx.ptr(x)}[{base} + {j}]"
        if has_epilogue(ctx, len(y.shape)):
            val = ctx.output_expr(val, flat_index_exprs(flat, y.shape))
        lines += [f"for (int64_t {j} = 0; {j} < {inner}; ++{j}) {ctx.ptr(y)}[{flat}] = {val};", "}"]
        return "\n".join(lines)
