"""``LRN`` (ONNX 1, 13): local response normalization across channels.

For X ``[N, C, D...]``: ``square_sum[n, c, d] = sum(X[n, i, d]^2)`` over channels ``i``
in ``[c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]`` (clipped to ``[0, C)``),
then ``Y = X / (bias + alpha / size * square_sum) ^ beta`` (ONNX operator spec). The
emitter sums, for each element, the squares of the (at most ``size``) channels
around it.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from .elementwise import cfn, is_float

__all__ = ["LRN"]

logger = logging.getLogger(__name__)


@register
class LRN(OpDef):
    """ONNX ``LRN`` (1; 13 adds bfloat16 only). float32/float64 X of rank >= 3.

    Raises
    ------
    ShapeError
        X of rank below 3 or ``size`` below 1.
    UnsupportedOpError
        A non-float X.
    """

    op_type, since_version = "LRN", 1
    also_versions = (13,)

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_float(x.dtype):
            raise UnsupportedOpError(f"LRN (node {node.name!r}) takes floats, got {x.dtype}")
        if len(x.shape) < 3 or node.attrs["size"] < 1:
            raise ShapeError(
                f"LRN (node {node.name!r}): X must be [N, C, D...] and size >= 1, "
                f"got {list(x.shape)}, size {node.attrs['size']}"
            )
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        size = node.attrs["size"]
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        sq = x.astype(np.float64) ** 2
        c = x.shape[1]
        acc = np.zeros_like(sq)
        for ch in range(c):
            acc[:, ch] = sq[:, max(0, ch - lo) : min(c, ch + hi + 1)].sum(axis=1)
        a, b, k = node.attrs["alpha"], node.attrs["beta"], node.attrs["bias"]
        return [(x / (k + a / size * acc) ** b).astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        dt = x.dtype
        ct = ctype(dt)
        n, c = x.shape[0], x.shape[1]
        inner = x.size // (n * c)
        size = node.attrs["size"]
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        a = c_literal(node.attrs["alpha"] / size, dt)
        b, k = c_literal(node.attrs["beta"], dt), c_literal(node.attrs["bias"], dt)
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        o, i, ch, s, w = (ctx.unique(p) for p in ("o", "i", "c", "s", "w"))
        pw = cfn("pow", dt)
        at = f"[({o}*{c} + ({{}}))*{inner} + {i}]"
        # the window is summed directly (size is small, 3 to 7 in practice): a running
        # sum would drift by the rounding of each add and subtract
        return "\n".join(
            [
                f"for (int64_t {o} = 0; {o} < {n}; ++{o}) for (int64_t {i} = 0; {i} < {inner}; ++{i})",
                f"for (int64_t {ch} = 0; {ch} < {c}; ++{ch}) {{",
                f"  {ct} {s} = 0;",
                (f"  for (int64_t {w} = {ch} - {lo} < 0 ? 0 : {ch} - {lo}; {w} <= {ch} + {hi} && {w} < {c}; ++{w})"
                f" {{ {ct} v = {xp}{at.format(w)}; {s} += v * v; }}"),
                f"  {yp}{at.format(ch)} = {xp}{at.format(ch)} / {pw}({k} + {a} * {s}, {b});",
                "}",
            ]
        )
