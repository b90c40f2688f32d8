"""ONNX ``Compress`` (9, 11, 28) (ONNX operator spec, "Compress"): the slices of the
input along ``axis`` (or the elements of the flattened input when ``axis`` is absent)
whose ``condition`` is true; a ``condition`` shorter than the dim selects among its
first ``len(condition)`` slices.

A constant ``condition``: the kept indices are a table in the params and the output
size is static. A run-time ``condition`` (issue 13): the output dim is a computed symbol
bounded by ``min(len(condition), dim)``; the kernel collects the kept indices, copies
the slices and writes the count.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node, shape_size
from ...symbolic import Dim, dim_min
from ..base import EmitContext, OpDef, OutType, register
from ._computed import count_dim, is_runtime, upper
from .loops import normalize_axis

__all__ = ["Compress"]

logger = logging.getLogger(__name__)


@register
class Compress(OpDef):
    """``Compress``: input, bool ``condition`` (1-D) -> the kept slices.

    Raises
    ------
    ShapeError
        When a constant ``condition`` is longer than the compressed dim, or
        ``condition`` is not 1-D.
    """

    op_type, since_version = "Compress", 9
    also_versions = (11, 28)  # 11: negative axis; 28: bfloat16
    defaults = {"axis": None}

    def _axis(self, node: Node) -> int | None:
        axis = self.attr(node, "axis")
        if axis is None:
            return None
        where = f"Compress (node {node.name!r})"
        return normalize_axis(int(axis), len(node.inputs[0].shape), where)

    def _dim(self, node: Node):
        x, axis = node.inputs[0], self._axis(node)
        return shape_size(x.shape) if axis is None else x.shape[axis]

    def _keep(self, node: Node) -> np.ndarray:
        cond = np.asarray(node.inputs[1].const).reshape(-1).astype(bool)
        n = self._dim(node)
        if not isinstance(n, Dim) and cond.size > n:
            raise ShapeError(f"Compress (node {node.name!r}): condition has {cond.size} "
                             f"values for a dim of {n}")
        return np.nonzero(cond)[0].astype(np.int64)

    def _out_shape(self, node: Node, kept) -> tuple:
        x, axis = node.inputs[0], self._axis(node)
        return (kept,) if axis is None else (*x.shape[:axis], kept, *x.shape[axis + 1:])

    def infer(self, node: Node) -> list[OutType]:
        x, cond = node.inputs[0], node.inputs[1]
        if len(cond.shape) != 1:
            raise ShapeError(f"Compress (node {node.name!r}): condition must be 1-D, "
                             f"got {list(cond.shape)}")
        if not is_runtime(cond):
            return [(self._out_shape(node, self._keep(node).size), x.dtype)]
        axis = 0 if self._axis(node) is None else self._axis(node)
        kept = count_dim(node, 0, axis, "kept", dim_min(cond.shape[0], self._dim(node)))
        return [(self._out_shape(node, kept), x.dtype)]

    def reference(self, node: Node, inputs):
        x, cond = inputs[0], np.asarray(inputs[1]).reshape(-1).astype(bool)
        axis = self._axis(node)
        keep = np.nonzero(cond)[0]
        return [x.reshape(-1)[keep] if axis is None else np.take(x, keep, axis=axis)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, cond, y = node.inputs[0], node.inputs[1], node.outputs[0]
        axis = self._axis(node)
        outer = 1 if axis is None else shape_size(x.shape[:axis])
        inner = 1 if axis is None else shape_size(x.shape[axis + 1:])
        n = self._dim(node)
        size = x.dtype.itemsize
        if not is_runtime(cond):
            keep = self._keep(node)
            if keep.size == 0:
                return ""
            table, count, lines = ctx.param(keep, "compress_keep"), keep.size, []
        else:
            kept = y.shape[0 if axis is None else axis]
            if not isinstance(kept, Dim):
                return ""  # condition or dim is empty: nothing is kept
            table, count = f"((int64_t*){ctx.scratch(8 * upper(n))})", ctx.unique("nkeep")
            j, m = ctx.unique("j"), ctx.unique("m")
            lines = [
                f"int64_t {count} = 0;",
                f"{{ const int64_t {m} = {dim_min(cond.shape[0], n)};",
                (f"  for (int64_t {j} = 0; {j} < {m}; ++{j}) "
                f"if ({ctx.ptr(cond)}[{j}]) {table}[{count}++] = {j}; }}"),
                ctx.set_symbol(kept, count),
            ]
        o, k = ctx.unique("o"), ctx.unique("k")
        dst, src = f"({o} * {count} + {k}) * {inner}", f"({o} * {n} + {table}[{k}]) * {inner}"
        copy = (f"{ctx.ptr(y)}[{dst}] = {ctx.ptr(x)}[{src}];" if isinstance(inner, int)
                and inner == 1 else  # one element: no memcpy call per element
                f"memcpy({ctx.ptr(y)} + {dst}, {ctx.ptr(x)} + {src}, {inner} * {size});")
        return "\n".join([
            "{",
            *lines,
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o})",
            f"  for (int64_t {k} = 0; {k} < {count}; ++{k})",
            f"    {copy}",
            "}",
        ])
