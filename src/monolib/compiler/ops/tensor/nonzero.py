"""ONNX ``NonZero`` (9, 13): the int64 ``[rank, count]`` indices of the nonzero
elements of X, row-major (ONNX operator spec, "NonZero").

A constant X folds at compile time (the node disappears). A run-time X gives a
data-dependent ``count`` (issue 13): a computed symbol bounded by X's element count at
its upper bounds; the kernel counts, writes row ``r`` at ``r * count``, and stores the
count into the symbol's slot for the ops after it.
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node, shape_size
from ...symbolic import Dim
from ..base import EmitContext, OpDef, OutType, register
from ._computed import count_dim, is_runtime

__all__ = ["NonZero"]

logger = logging.getLogger(__name__)


@register
class NonZero(OpDef):
    """``NonZero``: X (any dtype; NaN counts as nonzero, -0.0 as zero) -> int64
    ``[rank(X), count]``; a scalar X gives ``[0, count]`` (count 0 or 1)."""

    op_type, since_version = "NonZero", 9
    also_versions = (13,)  # 13 only added types

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_runtime(x):
            return [(self.reference(node, [x.const])[0].shape, np.dtype(np.int64))]
        count = count_dim(node, 0, 1, "count", shape_size(x.shape))
        return [((len(x.shape), count), np.dtype(np.int64))]

    def reference(self, node: Node, inputs):
        x = np.asarray(inputs[0])
        if x.ndim == 0:  # numpy refuses 0-d; ONNX: [0, 1] or [0, 0]
            return [np.zeros((0, int(bool(x))), np.int64)]
        return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        rank, count = y.shape
        n = shape_size(x.shape)
        if not isinstance(count, Dim):
            return ""  # X holds no element at any size: nothing to index
        xs, ys = ctx.ptr(x), ctx.ptr(y)
        i, c, r, k = (ctx.unique(s) for s in ("i", "cnt", "r", "k"))
        digits = []
        for d in reversed(range(rank)):
            digits.append(f"      {ys}[{d} * {c} + {k}] = {r} % {x.shape[d]}; {r} /= {x.shape[d]};")
        return "\n".join([
            "{",
            f"  int64_t {c} = 0;",
            f"  for (int64_t {i} = 0; {i} < {n}; ++{i}) {c} += {xs}[{i}] != 0;",
            f"  for (int64_t {i} = 0, {k} = 0; {i} < {n}; ++{i}) {{",
            f"    if ({xs}[{i}] != 0) {{",
            f"      int64_t {r} = {i}; (void){r};",
            *digits,
            f"      ++{k};",
            "    }",
            "  }",
            f"  {ctx.set_symbol(count, c)}",
            "}",
        ])
