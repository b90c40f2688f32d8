"""Operators whose output SHAPE depends on input values: Unique (11,
28) and Compress (9, 11, 28).

monolib compiles static shapes, so the value-deciding input must be a compile-time
constant (an initializer, or computed from constants): NonZero's and Unique's input X
(the node then folds away), all of NonMaxSuppression's inputs (likewise),
Compress's ``condition`` (the data stays a run-time input:
the kept indices become a table and the node a gather). Otherwise ``infer`` raises an
:class:`UnsupportedOpError` naming the node and the input, before any code is emitted.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import normalize_axis

__all__ = ["Compress", "Unique"]

logger = logging.getLogger(__name__)


def _need_const(node: Node, i: int, what: str) -> np.ndarray:
    v = node.input(i)
    if v is None or v.const is None:
        raise UnsupportedOpError(
            f"{node.op_type} (node {node.name!r}): the output shape depends on the values "
            f"of input {what!r}; monolib compiles static shapes, so {what!r} must be a "
            "compile-time constant (an initializer or computed from constants)"
        )
    return v.const


class _Folded(OpDef):
    """An op computed at compile time only: infer runs the reference on the constants."""

    #: the inputs that must be constant, by name
    deciding: tuple[str, ...] = ("X",)

    def infer(self, node: Node) -> list[OutType]:
        for i, name in enumerate(self.deciding):
            if node.input(i) is not None or i == 0:
                _need_const(node, i, name)
        outs = self.reference(node, [v.const if v is not None else None for v in node.inputs])
        return [(o.shape, o.dtype) for o in outs][: len(node.outputs)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        _need_const(node, 0, "X")  # folded before emission; reaching here is a bug
        raise UnsupportedOpError(f"{node.op_type} (node {node.name!r}) was not folded")


@register
class Unique(_Folded):
    """``Unique``: constant X -> Y (unique values or slices along ``axis``, sorted or in
    order of first occurrence), indices, inverse_indices, counts (int64)."""

    op_type, since_version = "Unique", 11
    also_versions = (28,)  # 28 only added bfloat16
    defaults = {"axis": None}

    def reference(self, node: Node, inputs):
        x = inputs[0]
        axis = self.attr(node, "axis")
        if axis is not None:
            axis = normalize_axis(int(axis), x.ndim, f"Unique (node {node.name!r})")
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                              return_counts=True, axis=axis)
        if not node.attrs["sorted"]:  # order of first occurrence
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = np.take(y, order, axis=0 if axis is None else axis)
            first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
        i64 = lambda a: np.asarray(a, np.int64).reshape(-1)
        return [y, i64(first), i64(inverse), i64(counts)]


@register
class Compress(OpDef):
    """``Compress``: input, constant bool ``condition`` -> the slices along ``axis``
    (or elements of the flattened input) whose condition is true.

    Raises
    ------
    UnsupportedOpError
        When ``condition`` is not a compile-time constant.
    ShapeError
        When ``condition`` is longer than the compressed dim.
    """

    op_type, since_version = "Compress", 9
    also_versions = (11, 28)  # 11: negative axis; 28: bfloat16
    defaults = {"axis": None}

    def _keep(self, node: Node) -> tuple[np.ndarray, int | None]:
        x = node.inputs[0]
        cond = np.asarray(_need_const(node, 1, "condition")).reshape(-1).astype(bool)
        axis = self.attr(node, "axis")
        n = x.size if axis is None else None
        if axis is not None:
            axis = normalize_axis(int(axis), len(x.shape), f"Compress (node {node.name!r})")
            n = x.shape[axis]
        if cond.size > n:
            raise ShapeError(f"Compress (node {node.name!r}): condition has {cond.size} "
                             f"values for a dim of {n}")
        return np.nonzero(cond)[0].astype(np.int64), axis

    def infer(self, node: Node) -> list[OutType]:
        keep, axis = self._keep(node)
        x = node.inputs[0]
        shape = (keep.size,) if axis is None else \
            (*x.shape[:axis], keep.size, *x.shape[axis + 1:])
        return [(shape, x.dtype)]

    def reference(self, node: Node, inputs):
        keep, axis = self._keep(node)
        x = inputs[0]
        return [x.reshape(-1)[keep] if axis is None else np.take(x, keep, axis=axis)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        keep, axis = self._keep(node)
        x, y = node.inputs[0], node.outputs[0]
        if y.size == 0:
            return ""
        table = ctx.param(keep, "compress_keep")
        if axis is None:
            return (f"for (int64_t i = 0; i < {keep.size}; ++i) "
                    f"{ctx.ptr(y)}[i] = {ctx.ptr(x)}[{table}[i]];")
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
        n = x.shape[axis]
        return (
            f"for (int64_t o = 0; o < {outer}; ++o)\n"
            f"for (int64_t k = 0; k < {keep.size}; ++k)\n"
            f"  memcpy({ctx.ptr(y)} + (o * {keep.size} + k) * {inner}, "
            f"{ctx.ptr(x)} + (o * {n} + {table}[k]) * {inner}, {inner * x.dtype.itemsize});"
        )
