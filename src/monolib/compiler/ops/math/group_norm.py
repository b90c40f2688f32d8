"""``GroupNormalization`` (ONNX 21) and ``MeanVarianceNormalization`` (9, 13).

GroupNormalization: X ``[N, C, D...]``; the channels split into ``num_groups`` groups,
each (n, group) -- a contiguous row of ``C/G * prod(D)`` elements -- normalized with
its mean and biased variance, ``(x - mean) / sqrt(var + epsilon)``, then scaled and
shifted per channel (``scale``/``bias`` ``[C]``; version 18, per group, is deprecated
and refused by the ONNX checker). The row
statistics are :func:`.norm.emit_row_stats` (two passes, as LayerNormalization).

MeanVarianceNormalization: ``(X - mean) / sqrt(mean((X - mean)^2))`` over ``axes``
(default ``[0, 2, 3]``), following the ONNX function body: no epsilon, so a constant
slice divides 0 by 0 (NaN), as the function body does. Statistics in double.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype
from ..tensor.loops import contiguous_strides, emit_loops, linear_offset, normalize_axis
from .elementwise import is_float
from .norm import emit_row_loop, emit_row_stats

__all__ = ["GroupNormalization", "MeanVarianceNormalization"]

logger = logging.getLogger(__name__)


@register
class GroupNormalization(OpDef):
    """ONNX ``GroupNormalization`` 21 (``stash_type`` 1, float32 statistics, is what
    float32/float64 inputs get).

    Raises
    ------
    ShapeError
        ``num_groups`` not dividing C, or scale/bias not of C elements.
    """

    op_type, since_version = "GroupNormalization", 21
    defaults = {"num_groups": None}

    def _groups(self, node: Node) -> int:
        x = node.inputs[0]
        g = self.attr(node, "num_groups")
        where = f"GroupNormalization (node {node.name!r})"
        if len(x.shape) < 2 or not g or x.shape[1] % g:
            raise ShapeError(f"{where}: num_groups {g} must divide C of {list(x.shape)}")
        want = x.shape[1]
        for v in node.inputs[1:3]:
            if v.size != want:
                raise ShapeError(f"{where}: scale and bias must have {want} elements")
        return int(g)

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_float(x.dtype):
            raise UnsupportedOpError(f"GroupNormalization (node {node.name!r}) takes floats")
        self._groups(node)
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x, scale, bias = inputs
        g = self._groups(node)
        n, c = x.shape[:2]
        v = x.reshape(n, g, -1).astype(np.float64)
        mean = v.mean(axis=2, keepdims=True)
        var = ((v - mean) ** 2).mean(axis=2, keepdims=True)
        y = ((v - mean) / np.sqrt(var + node.attrs["epsilon"])).reshape(x.shape)
        shp = (1, c) + (1,) * (x.ndim - 2)
        return [(y * scale.reshape(shp) + bias.reshape(shp)).astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        if x.size == 0:
            return ""
        g = self._groups(node)
        n, c = x.shape[:2]
        sp = math.prod(x.shape[2:])  # run-time dims stay Dims
        row_len = c // g * sp
        o, j, m, inv, row = (ctx.unique(p) for p in ("o", "j", "mean", "inv", "row"))
        p = f"(({o} % {g})*{c // g} + {j} / {sp})"  # the channel of element j of row o
        sc, bi = ctx.ptr(node.inputs[1]), ctx.ptr(node.inputs[2])
        stats = emit_row_stats(ctx, row, row_len, x.dtype, node.attrs["epsilon"], m, inv)
        # GroupNormalization takes no epilogue: emit_row_loop stores val as it is
        val = f"({row}[{j}] - {m}) * {inv} * {sc}[{p}] + {bi}[{p}]"
        return emit_row_loop(ctx, node, n * g, row_len, (o, j, row), stats, val)


@register
class MeanVarianceNormalization(OpDef):
    """ONNX ``MeanVarianceNormalization`` (9; 13 adds bfloat16 only)."""

    op_type, since_version = "MeanVarianceNormalization", 9
    also_versions = (13,)

    def _axes(self, node: Node) -> list[int]:
        rank = len(node.inputs[0].shape)
        axes = node.attrs["axes"] or [0, 2, 3]  # an empty list as before: the default
        return sorted({normalize_axis(a, rank, f"MeanVarianceNormalization (node {node.name!r})")
                       for a in axes})

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_float(x.dtype):
            raise UnsupportedOpError(f"MeanVarianceNormalization (node {node.name!r}) takes floats")
        self._axes(node)
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        axes = tuple(self._axes(node))
        mean = x.mean(axis=axes, keepdims=True)
        sd = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True))
        return [((x - mean) / sd).astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        axes = self._axes(node)
        shape = x.shape
        kept = [d for d in range(len(shape)) if d not in axes]
        gshape = [shape[d] for d in kept]
        ngroups = math.prod(gshape)
        cnt = math.prod(shape[d] for d in axes)
        gst = dict(zip(kept, contiguous_strides(gshape)))
        gstrides = [gst.get(d, 0) for d in range(len(shape))]
        xst = contiguous_strides(shape)
        dt = x.dtype
        ct = ctype(dt)
        mean, var = ctx.unique("mean"), ctx.unique("var")
        xp, yp = ctx.ptr(x), ctx.ptr(y)

        def each(stmt):
            return emit_loops(ctx, shape, lambda idx: stmt(linear_offset(idx, xst), linear_offset(idx, gstrides)))

        return "\n".join(
            [
                f"double* {mean} = (double*){ctx.scratch(8 * ngroups)};",
                f"double* {var} = (double*){ctx.scratch(8 * ngroups)};",
                f"for (int64_t g = 0; g < {ngroups}; ++g) {{ {mean}[g] = 0; {var}[g] = 0; }}",
                each(lambda xo, go: f"{mean}[{go}] += {xp}[{xo}];"),
                f"for (int64_t g = 0; g < {ngroups}; ++g) {mean}[g] /= {cnt};",
                each(lambda xo, go: f"{{ double d = {xp}[{xo}] - {mean}[{go}]; {var}[{go}] += d * d; }}"),
                f"for (int64_t g = 0; g < {ngroups}; ++g) {var}[g] = 1.0 / sqrt({var}[g] / {cnt});",
                each(lambda xo, go: f"{yp}[{xo}] = ({ct})(({xp}[{xo}] - {mean}[{go}]) * {var}[{go}]);"),
            ]
        )
