"""``LRN`` (ONNX 1, 13): local response normalization across channels.

For X ``[N, C, D...]``: ``square_sum[n, c, d] = sum(X[n, i, d]^2)`` over channels ``i``
in ``[c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]`` (clipped to ``[0, C)``),
then ``Y = X / (bias + alpha / size * square_sum) ^ beta`` (ONNX operator spec). The
emitter sums, for each element, the squares of the (at most ``size``) channels
around it, plane by plane over contiguous rows (the planes on the thread pool), and
takes beta 0.75 / 0.5 / 1 by square roots and a divide instead of pow (issue 14: the
old per-element powf over a channel-strided walk took 20 ms of GoogLeNet's 51 at 1
thread).
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
        beta = float(node.attrs["beta"])
        k = c_literal(node.attrs["bias"], dt)
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        p, j, i0, w = (ctx.unique(q) for q in ("p", "j", "i", "w"))
        t = f"({k} + {a} * s_[{j}])"
        # x / t^beta: the usual betas by square roots (correctly rounded, some ten times
        # cheaper than pow), any other by pow
        sq = cfn("sqrt", dt)
        scale = {
            0.75: f"xc_[{j}] / (q_ * {sq}(q_))",
            0.5: f"xc_[{j}] / q_",
            1.0: f"xc_[{j}] / {t}",
        }.get(beta, f"xc_[{j}] / {cfn('pow', dt)}({t}, {c_literal(beta, dt)})")
        root = f"const {ct} q_ = {sq}{t}; " if beta in (0.75, 0.5) else ""
        # plane p = (o, ch) of y: blocks of 64 elements, the window's squares summed per
        # element in channel order (directly: a running sum would drift by the rounding
        # of each add and subtract), contiguous rows; the planes on the thread pool
        body = "\n".join(
            [
                f"  const int64_t o_ = {p} / {c}, ch_ = {p} % {c};",
                f"  const int64_t w0_ = ch_ - {lo} < 0 ? 0 : ch_ - {lo};",
                f"  const int64_t w1_ = ch_ + {hi} < {c} ? ch_ + {hi} : {c} - 1;",
                f"  const {ct}* xo_ = {xp} + o_ * {c * inner};",
                f"  for (int64_t {i0} = 0; {i0} < {inner}; {i0} += 64) {{",
                f"    const int64_t m_ = {inner} - {i0} < 64 ? {inner} - {i0} : 64;",
                f"    {ct} s_[64];",
                f"    for (int64_t {j} = 0; {j} < m_; ++{j}) s_[{j}] = 0;",
                f"    for (int64_t {w} = w0_; {w} <= w1_; ++{w}) {{",
                f"      const {ct}* xw_ = xo_ + {w} * {inner} + {i0};",
                f"      for (int64_t {j} = 0; {j} < m_; ++{j}) s_[{j}] += xw_[{j}] * xw_[{j}];",
                "    }",
                f"    const {ct}* xc_ = xo_ + ch_ * {inner} + {i0};",
                f"    {ct}* yc_ = {yp} + {p} * {inner} + {i0};",
                f"    for (int64_t {j} = 0; {j} < m_; ++{j}) {{ {root}yc_[{j}] = {scale}; }}",
                "  }",
            ]
        )
        return ctx.parallel_for(p, n * c, body, n * c * inner * (size + 16))
