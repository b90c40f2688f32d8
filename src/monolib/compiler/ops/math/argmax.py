"""ONNX ``ArgMax`` and ``ArgMin`` (versions 11, 12, 13): the int64 index of the
largest (smallest) element along ``axis``; the first occurrence, or the last with
``select_last_index=1`` (12+)."""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from ...ir import Node
from ...symbolic import is_dim
from ..base import EmitContext, OutType, register
from ...backends.cstyle import ctype
from ..tensor.axis import attr_axis, split_at_axis
from ..tensor.flat import FlatEpilogueOp
from ..tensor.loops import flat_index_exprs

__all__ = ["ArgMax", "ArgMin", "emit_arg_best"]

logger = logging.getLogger(__name__)


def emit_arg_best(ct: str, elem, n: int, k: str, best: str, bi: str, cmp: str) -> str:
    """C statements declaring ``best`` (C type ``ct``) and ``int64_t bi``: the value and
    the index of the best of the ``n`` elements ``elem(k)`` (a C expression of the
    index expression ``k``), where an element is better when ``elem(k) cmp best``: with
    ``>`` (``<``) the first largest (smallest), with ``>=`` (``<=``) the last."""
    return (
        f"{ct} {best} = {elem('0')}; int64_t {bi} = 0;\n"
        f"for (int64_t {k} = 1; {k} < {n}; ++{k}) if ({elem(k)} {cmp} {best}) {{ {best} = {elem(k)}; {bi} = {k}; }}"
    )


class _Arg(FlatEpilogueOp):
    better: ClassVar[str] = ">"
    defaults = {"select_last_index": 0}

    def _view(self, node: Node) -> tuple:
        a = attr_axis(node)
        outer, n, inner = split_at_axis(node.inputs[0].shape, a)
        return a, outer, n, inner  # n: an int, or a run-time Dim (never 0)

    def infer(self, node: Node) -> list[OutType]:
        a, _, _, _ = self._view(node)
        shape = list(node.inputs[0].shape)
        if node.attrs["keepdims"]:
            shape[a] = 1
        else:
            del shape[a]
        return [(tuple(shape), np.dtype(np.int64))]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        a, _, n, _ = self._view(node)
        fn = np.argmax if self.better == ">" else np.argmin
        if self.attr(node, "select_last_index"):
            idx = n - 1 - fn(np.flip(x, a), axis=a)
        else:
            idx = fn(x, axis=a)
        return [np.asarray(idx, np.int64).reshape(self.infer(node)[0][0])]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        _, outer, n, inner = self._view(node)
        if any(not is_dim(d) and d == 0 for d in (*y.shape, n)):  # nothing to compute
            return ""
        cmp = self.better + ("=" if self.attr(node, "select_last_index") else "")
        o, i, k, best, bi = (ctx.unique(p) for p in ("o", "i", "k", "best", "bi"))
        px = ctx.ptr(x)
        at = lambda kk: f"{px}[{o}*{n * inner} + {kk}*{inner} + {i}]"
        flat = f"{o}*{inner} + {i}"
        store = ctx.output_expr(bi, flat_index_exprs(flat, y.shape))
        return (
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) for (int64_t {i} = 0; {i} < {inner}; ++{i}) {{\n"
            f"{emit_arg_best(ctype(x.dtype), at, n, k, best, bi, cmp)}\n"
            f"{ctx.ptr(y)}[{flat}] = {store};\n}}"
        )


@register
class ArgMax(_Arg):
    """``ArgMax``: index of the maximum along ``axis``."""

    op_type, since_version = "ArgMax", 11


@register
class ArgMin(_Arg):
    """``ArgMin``: index of the minimum along ``axis``."""

    op_type, since_version, better = "ArgMin", 11, "<"
