"""Row normalizations: ``LayerNormalization`` (17) and ``InstanceNormalization`` (6).

Both normalize rows of ``n`` contiguous elements: ``(x - mean) / sqrt(var + eps)``
with the biased variance, then scale and shift. LayerNormalization's rows are the
dims from ``axis`` on, with ``Scale``/``B`` broadcast to them; InstanceNormalization's
rows are the spatial dims of one (batch, channel), scaled per channel. The mean and
the variance are computed in two passes (``math_reduce.h`` for float32), as ONNX
Runtime does, so large offsets do not cancel. Any dim may be a run-time dim (issue 12):
row counts and lengths render as their C, and a constant Scale/B broadcast along a
run-time axis is read with stride 0 instead of being expanded at compile time.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, Value, is_static
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from ...symbolic import is_dim, same, same_shape
from ..tensor.axis import attr_axis
from ..tensor.flat import FlatEpilogueOp
from ..tensor.loops import (
    broadcast_shape,
    broadcast_strides,
    flat_index_exprs,
    linear_offset,
)
from .elementwise import cfn, is_float

__all__ = ["InstanceNormalization", "LayerNormalization", "emit_row_loop", "emit_row_stats"]

logger = logging.getLogger(__name__)


def emit_row_stats(
    ctx: EmitContext, row: str, n: int, dtype, eps: float, mean: str, inv: str
) -> str:
    """C statements declaring ``mean`` and ``inv`` (= 1/sqrt(var + eps)) of the ``n``
    contiguous elements at pointer ``row`` (``n`` an int or a run-time Dim)."""
    ct = ctype(dtype)
    if np.dtype(dtype) == np.float32:
        ctx.include("math_reduce.h")
        fn = f"(({ct})({n}))" if is_dim(n) else c_literal(n, dtype)
        return (
            f"{ct} {mean} = ml_rsum_f32({row}, {n}) / {fn};\n"
            f"{ct} {inv} = 1.0f / sqrtf(ml_rsumsq_f32({row}, {n}, {mean}) / {fn} + {c_literal(eps, dtype)});"
        )
    j = ctx.unique("j")
    return (
        f"{ct} {mean} = 0, {inv} = 0;\n"
        f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {mean} += {row}[{j}];\n"
        f"{mean} /= {n};\n"
        f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {{ {ct} d = {row}[{j}] - {mean}; {inv} += d * d; }}\n"
        f"{inv} = 1 / {cfn('sqrt', dtype)}({inv} / {n} + {c_literal(eps, dtype)});"
    )


def emit_row_loop(
    ctx: EmitContext,
    node: Node,
    rows: int,
    n: int,
    names: tuple[str, str, str],
    stats: str,
    value: str,
    after: tuple[str, ...] = (),
) -> str:
    """C loop over ``rows`` contiguous rows of ``n`` elements of ``node``'s input 0 that
    writes output 0 at the same positions (through its epilogue, if any).

    Parameters
    ----------
    names : (str, str, str)
        C names of the row index ``o``, the element index ``j`` and the ``const``
        pointer to row ``o``.
    stats : str
        C statements opening each row (its statistics, e.g. :func:`emit_row_stats`).
    value : str
        C expression of element ``j`` of row ``o`` of the output.
    after : tuple of str
        C statements closing each row (e.g. storing the statistics).
    """
    x, y = node.inputs[0], node.outputs[0]
    o, j, row = names
    flat = f"{o}*{n} + {j}"
    body = "\n".join(
        [
            f"const {ctype(x.dtype)}* {row} = {ctx.ptr(x)} + {o}*{n};",
            stats,
            (
                f"for (int64_t {j} = 0; {j} < {n}; ++{j}) "
                f"{ctx.ptr(y)}[{flat}] = {ctx.output_expr(value, flat_index_exprs(flat, y.shape))};"
            ),
            *after,
        ]
    )
    # rows are independent (each writes its own outputs and statistics): on the pool
    # when large (InstanceNorm over 64 planes of 128 x 128 ran 0.21 ms at any thread
    # count); three passes over a row, some 12 units of work an element
    return ctx.parallel_for(o, rows, body, rows * n * 12)


def _row_operand(ctx: EmitContext, v: Value | None, norm_shape, j: str) -> str:
    """C expression of parameter ``v`` (broadcast to ``norm_shape``) at flat position
    ``j`` of a row; ``""`` when ``v`` is omitted."""
    if v is None:
        return ""
    if same(v.size, math.prod(norm_shape)):  # broadcasting only added 1s: same layout
        return f"{ctx.ptr(v)}[{j}]"
    if v.is_const and is_static(norm_shape):
        full = np.ascontiguousarray(np.broadcast_to(v.const.reshape(v.shape), norm_shape))
        return f"{ctx.param(full.reshape(-1), 'ln_param')}[{j}]"
    strides = broadcast_strides(v.shape, norm_shape)
    return f"{ctx.ptr(v)}[{linear_offset(flat_index_exprs(j, norm_shape), strides)}]"


@register
class LayerNormalization(FlatEpilogueOp):
    """``LayerNormalization`` 17: normalize over dims ``axis..``; outputs Y and the
    optional Mean and InvStdDev (shape ``X.shape[:axis] + [1] * (rank - axis)``).

    Raises
    ------
    ShapeError
        When Scale or B does not broadcast to the normalized shape.
    """

    op_type, since_version = "LayerNormalization", 17

    def _axis(self, node: Node) -> int:
        return attr_axis(node)

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_float(x.dtype):
            raise UnsupportedOpError(
                f"LayerNormalization (node {node.name!r}) takes floats, got {x.dtype}"
            )
        a = self._axis(node)
        norm = x.shape[a:]
        for v in node.inputs[1:3]:
            if v is not None and not same_shape(
                broadcast_shape(v.shape, norm, where=f"LayerNormalization {node.name!r}"), norm
            ):
                raise ShapeError(
                    f"LayerNormalization (node {node.name!r}): {list(v.shape)} does not broadcast to {list(norm)}"
                )
        stat = x.shape[:a] + (1,) * (len(x.shape) - a)
        types = [(x.shape, x.dtype), (stat, np.dtype(np.float32)), (stat, np.dtype(np.float32))]
        return types[: max(len(node.outputs), 1)]

    def reference(self, node: Node, inputs):
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        a = self._axis(node)
        axes = tuple(range(a, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(var + np.asarray(node.attrs["epsilon"], x.dtype))
        y = (x - mean) * inv * scale
        if bias is not None:
            y = y + bias
        outs = [y.astype(x.dtype), mean.astype(np.float32), inv.astype(np.float32)]
        return outs[: max(len(node.outputs), 1)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        if x.size == 0:
            return ""
        a = self._axis(node)
        norm = x.shape[a:]
        n, rows = math.prod(norm), math.prod(x.shape[:a])
        o, j, m, inv, row = (ctx.unique(p) for p in ("o", "j", "mean", "inv", "row"))
        sc = _row_operand(ctx, node.input(1), norm, j)
        bi = _row_operand(ctx, node.input(2), norm, j)
        val = f"({row}[{j}] - {m}) * {inv} * {sc}" + (f" + {bi}" if bi else "")
        stats = emit_row_stats(ctx, row, n, x.dtype, node.attrs["epsilon"], m, inv)
        after = []
        if len(node.outputs) > 1 and node.outputs[1] is not None:
            after.append(f"{ctx.ptr(node.outputs[1])}[{o}] = (float){m};")
        if len(node.outputs) > 2 and node.outputs[2] is not None:
            after.append(f"{ctx.ptr(node.outputs[2])}[{o}] = (float){inv};")
        return emit_row_loop(ctx, node, rows, n, (o, j, row), stats, f"({val})", tuple(after))


@register
class InstanceNormalization(OpDef):
    """``InstanceNormalization`` 6: X ``[N, C, D...]``, scale and B ``[C]``; each
    (n, c) plane normalized over its spatial dims."""

    op_type, since_version = "InstanceNormalization", 6
    also_versions = (22,)  # 22 adds bfloat16 only

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_float(x.dtype) or len(x.shape) < 3:
            raise ShapeError(
                f"InstanceNormalization (node {node.name!r}): X must be float [N, C, D...], got {x.dtype}{list(x.shape)}"
            )
        for v in node.inputs[1:3]:
            if v.size != x.shape[1]:
                raise ShapeError(
                    f"InstanceNormalization (node {node.name!r}): scale and B must have {x.shape[1]} elements"
                )
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x, scale, bias = inputs
        axes = tuple(range(2, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        shp = (1, -1) + (1,) * (x.ndim - 2)
        y = (x - mean) / np.sqrt(var + np.asarray(node.attrs["epsilon"], x.dtype)) * scale.reshape(
            shp
        ) + bias.reshape(shp)
        return [y.astype(x.dtype)]

    def epilogue_groups(self, node: Node):
        return [[0], [1], list(range(2, len(node.outputs[0].shape)))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        c = x.shape[1]
        n = math.prod(x.shape[2:])
        if x.size == 0:
            return ""
        o, j, m, inv, row = (ctx.unique(p) for p in ("o", "j", "mean", "inv", "row"))
        sc, bi = ctx.ptr(node.inputs[1]), ctx.ptr(node.inputs[2])
        val = f"(({row}[{j}] - {m}) * {inv} * {sc}[{o} % {c}] + {bi}[{o} % {c}])"
        stats = emit_row_stats(ctx, row, n, x.dtype, node.attrs["epsilon"], m, inv)
        return emit_row_loop(ctx, node, x.shape[0] * c, n, (o, j, row), stats, val)
