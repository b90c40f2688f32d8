"""``Hardmax`` (1, 11: 2-D coercion at ``axis``; 13: the one dim ``axis``) and
``LpNormalization`` (1: ``x / ||x||_p`` along ``axis``, ``p`` 1 or 2).

Hardmax writes 1 at the first maximum of each row and 0 elsewhere (the spec's tie
rule); both reuse Softmax's ``[outer, n, inner]`` view."""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from ....errors import UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OutType, register
from ...backends.cstyle import c_literal, ctype
from ..tensor.flat import FlatEpilogueOp
from ..tensor.loops import flat_index_exprs, normalize_axis
from .argmax import emit_arg_best
from .elementwise import cfn, is_float
from .softmax import softmax_view

__all__ = ["Hardmax1", "Hardmax13", "LpNormalization"]

logger = logging.getLogger(__name__)


def _column_loop(ctx, outer: int, n: int, inner: int, body) -> str:
    """``for o, i`` around ``body(o, i, at)``; ``at(k)`` is the flat offset of element
    ``k`` of the (o, i) column."""
    o, i = ctx.unique("o"), ctx.unique("i")

    def at(k: str) -> str:
        return f"{o}*{n * inner} + ({k})*{inner} + {i}"

    return (
        f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) for (int64_t {i} = 0; {i} < {inner}; ++{i}) {{\n"
        f"{body(o, i, at)}\n}}"
    )


class _Hardmax(FlatEpilogueOp):
    coerce_2d: ClassVar[bool] = False

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_float(x.dtype):
            raise UnsupportedOpError(f"Hardmax (node {node.name!r}) takes floats, got {x.dtype}")
        softmax_view(x.shape, node.attrs["axis"], self.coerce_2d)
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        outer, n, inner = softmax_view(x.shape, node.attrs["axis"], self.coerce_2d)
        v = x.reshape(outer, n, inner)
        first = np.argmax(v, axis=1)[:, None, :]
        out = (np.arange(n)[None, :, None] == first).astype(x.dtype)
        return [out.reshape(x.shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        outer, n, inner = softmax_view(x.shape, node.attrs["axis"], self.coerce_2d)
        k, best, bi = ctx.unique("k"), ctx.unique("best"), ctx.unique("bi")
        ct = ctype(x.dtype)
        px, py = ctx.ptr(x), ctx.ptr(y)

        def body(o, i, at):
            one = ctx.output_expr(f"({ct})({k} == {bi})", flat_index_exprs(at(k), y.shape))
            # the first maximum, the spec's tie rule
            first_max = emit_arg_best(ct, lambda kk: f"{px}[{at(kk)}]", n, k, best, bi, ">")
            return f"{first_max}\nfor (int64_t {k} = 0; {k} < {n}; ++{k}) {py}[{at(k)}] = {one};"

        return _column_loop(ctx, outer, n, inner, body)


@register
class Hardmax1(_Hardmax):
    """``Hardmax`` 1, 11: over the input coerced to 2-D at ``axis``."""

    op_type, since_version, coerce_2d = "Hardmax", 1, True


@register
class Hardmax13(_Hardmax):
    """``Hardmax`` 13: over the one dim ``axis``."""

    op_type, since_version = "Hardmax", 13


@register
class LpNormalization(FlatEpilogueOp):
    """``LpNormalization``: ``x / ||x||_p`` along ``axis`` (p = 1 or 2; a zero norm
    gives 0, as ONNX Runtime does)."""

    op_type, since_version = "LpNormalization", 1
    also_versions = (22,)  # 22 adds bfloat16 only

    def _view(self, node: Node) -> tuple[int, int, int]:
        x = node.inputs[0]
        where = f"LpNormalization (node {node.name!r})"
        if node.attrs["p"] not in (1, 2) or not is_float(x.dtype):
            raise UnsupportedOpError(
                f"{where}: p must be 1 or 2 on floats, got p={node.attrs['p']}"
            )
        a = normalize_axis(node.attrs["axis"], len(x.shape), where)
        return softmax_view(x.shape, a, False)

    def infer(self, node: Node) -> list[OutType]:
        self._view(node)
        x = node.inputs[0]
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        outer, n, inner = self._view(node)
        v = x.reshape(outer, n, inner)
        norm = (
            np.abs(v).sum(1, keepdims=True)
            if node.attrs["p"] == 1
            else np.sqrt((v * v).sum(1, keepdims=True))
        )
        with np.errstate(all="ignore"):
            out = np.where(norm == 0, 0, v / norm)
        return [out.astype(x.dtype).reshape(x.shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        outer, n, inner = self._view(node)
        dt, ct = x.dtype, ctype(x.dtype)
        k, s = ctx.unique("k"), ctx.unique("s")
        px, py = ctx.ptr(x), ctx.ptr(y)
        zero = c_literal(0, dt)

        def body(o, i, at):
            xv = f"{px}[{at(k)}]"
            acc = f"{cfn('fabs', dt)}({xv})" if node.attrs["p"] == 1 else f"{xv} * {xv}"
            norm = s if node.attrs["p"] == 1 else f"{cfn('sqrt', dt)}({s})"
            val = ctx.output_expr(
                f"({s} == {zero} ? {zero} : {xv} / {s})", flat_index_exprs(at(k), y.shape)
            )
            return (
                f"{ct} {s} = {zero};\n"
                f"for (int64_t {k} = 0; {k} < {n}; ++{k}) {s} += {acc};\n"
                f"{s} = {norm};\n"
                f"for (int64_t {k} = 0; {k} < {n}; ++{k}) {py}[{at(k)}] = {val};"
            )

        return _column_loop(ctx, outer, n, inner, body)
