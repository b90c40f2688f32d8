"""ONNX ``Shape`` (1, 13, 15 with ``start``/``end``), ``Size`` (1, 13),
``ConstantOfShape`` (9, 20) and ``Range`` (11).

Shapes are static in monolib, so ``Shape`` and ``Size`` outputs are known at compile
time; their ``emit`` stores the constants (the frontend normally folds them). A
``ConstantOfShape``/``Range`` whose inputs are constant is folded through
``reference``; at run time it fills its (compile-time sized) output.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UndecidableDimError, UnsupportedOpError
from ...ir import Node
from ...symbolic import dim_max, is_dim
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from . import constant_of_shape_data, range_data
from .loops import const_ints

__all__ = ["ConstantOfShape", "Range", "Shape", "Size"]

logger = logging.getLogger(__name__)


def _store_constant(ctx: EmitContext, node: Node, array: np.ndarray) -> str:
    """Copy a compile-time array into output 0."""
    y = node.outputs[0]
    if y.size == 0:
        return ""
    src = ctx.param(np.asarray(array, y.dtype).reshape(-1), "const")
    i = ctx.unique("i")
    return f"for (int64_t {i} = 0; {i} < {y.size}; ++{i}) {ctx.ptr(y)}[{i}] = {src}[{i}];"


@register
class Shape(OpDef):
    """``Shape``: the int64 shape of the input, dims ``start..end`` (15+, clamped)."""

    op_type, since_version = "Shape", 1
    also_versions = (23, 24, 25)  # new element types only
    defaults = {"end": None, "start": 0}

    def _value(self, node: Node) -> np.ndarray:
        shape = node.inputs[0].shape
        rank = len(shape)
        start, end = self.attr(node, "start"), self.attr(node, "end")
        end = rank if end is None else end
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        return np.array(shape[start:end], np.int64)

    def infer(self, node: Node) -> list[OutType]:
        return [(self._value(node).shape, np.dtype(np.int64))]

    def reference(self, node: Node, inputs):
        return [self._value(node)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        return _store_constant(ctx, node, self._value(node))


@register
class Size(OpDef):
    """``Size``: the int64 number of elements of the input (a scalar)."""

    op_type, since_version = "Size", 1
    also_versions = (23, 24, 25)  # new element types only

    def infer(self, node: Node) -> list[OutType]:
        return [((), np.dtype(np.int64))]

    def reference(self, node: Node, inputs):
        return [np.array(node.inputs[0].size, np.int64)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        return f"{ctx.ptr(node.outputs[0])}[0] = {c_literal(node.inputs[0].size, np.int64)};"


@register
class ConstantOfShape(OpDef):
    """``ConstantOfShape``: a tensor of shape ``input`` (constant int64) filled with
    the one-element ``value`` attribute (float32 zero by default)."""

    op_type, since_version = "ConstantOfShape", 9
    also_versions = (23, 24, 25)  # new element types only
    defaults = {"value": None}

    def _fill(self, node: Node) -> np.ndarray:
        value = self.attr(node, "value")
        if value is None:
            return np.zeros(1, np.float32)
        return np.asarray(value).reshape(-1)[:1]

    def infer(self, node: Node) -> list[OutType]:
        if node.inputs[0].const is None:  # a run-time shape: user-bounded dims (issue 13)
            return [(constant_of_shape_data.out_shape(node), self._fill(node).dtype)]
        shape = const_ints(node, 0, "input")
        if any(d < 0 for d in shape):
            raise ShapeError(f"ConstantOfShape (node {node.name!r}): negative dim in {shape}")
        return [(tuple(shape), self._fill(node).dtype)]

    def reference(self, node: Node, inputs):
        shape, dtype = self.infer(node)[0]
        return [np.full(shape, self._fill(node)[0], dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        y = node.outputs[0]
        run_time = node.inputs[0].const is None
        if not run_time and y.size == 0:
            return ""
        i = ctx.unique("i")
        val = c_literal(self._fill(node)[0].item(), y.dtype)
        if val.endswith("f") and not any(c in val for c in ".eEIN"):
            val = val[:-1] + ".0f"
        if run_time:
            return constant_of_shape_data.emit(node, ctx, val)
        # blocks of 16K elements on the thread pool (issue 14: a memory-bound fill, e.g.
        # a light model's 151 MB weight matrix written each run); a float written counts 4
        blk, b = 1 << 14, ctx.unique("b")
        body = (f"  const int64_t hi_ = {b} * {blk} + {blk} < {y.size} ? {b} * {blk} + {blk} : {y.size};\n"
                f"  for (int64_t {i} = {b} * {blk}; {i} < hi_; ++{i}) {ctx.ptr(y)}[{i}] = {val};")
        return ctx.parallel_for(b, (y.size + blk - 1) // blk, body, 4 * y.size)


@register
class Range(OpDef):
    """``Range``: ``start, start + delta, ...`` below ``limit``; the three scalar inputs
    must be constant (the output length ``max(ceil((limit - start) / delta), 0)`` is a
    shape). An integer Range whose start or limit is a run-time Dim (computed from a
    run-time shape) has a run-time length and is computed when the op runs."""

    op_type, since_version = "Range", 11
    #: 27 adds float16/bfloat16 and ``stash_type`` (their accumulation type)
    also_versions = (27,)
    defaults = {"stash_type": 1}

    def _scalars(self, node: Node) -> list:
        vals = []
        for i, name in enumerate(("start", "limit", "delta")):
            v = node.input(i)
            if v is None or v.const is None:
                raise ShapeError(
                    f"Range (node {node.name!r}): input {name!r} must be a compile-time constant"
                )
            vals.append(v.const.reshape(-1)[0])
        return vals

    def _run_time(self, node: Node):
        """``(start, delta, length)`` when start or limit is a run-time Dim (an integer
        Range over a shape: position ids), else None.

        Raises
        ------
        UndecidableDimError
            A run-time delta, or a run-time bound of a float Range.
        """
        start, limit, delta = self._scalars(node)
        if not (is_dim(start) or is_dim(limit) or is_dim(delta)):
            return None
        if is_dim(delta) or node.inputs[0].dtype.kind not in "iu" or int(delta) == 0:
            raise UndecidableDimError(
                f"Range (node {node.name!r}): only an integer Range with a constant, nonzero "
                f"delta takes a run-time start or limit (got {start}, {limit}, {delta})"
            )
        delta = int(delta)
        span = limit - start if delta > 0 else start - limit
        return start, delta, dim_max(-(-span // abs(delta)), 0)

    def _value(self, node: Node) -> np.ndarray:
        start, limit, delta = self._scalars(node)
        if delta == 0:
            raise ShapeError(f"Range (node {node.name!r}): delta is 0")
        dt = node.inputs[0].dtype
        n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
        acc = dt
        if dt.itemsize < 4 and dt.kind not in "iub":  # float16/bfloat16 (opset 27)
            if self.attr(node, "stash_type") != 1:
                raise UnsupportedOpError(
                    f"Range (node {node.name!r}): {dt} with stash_type "
                    f"{node.attrs['stash_type']} (only 1, float accumulation)"
                )
            acc = np.dtype(np.float32)
        return (
            acc.type(start) + np.arange(n, dtype=acc) * np.asarray(delta, acc)
        ).astype(dt)

    def infer(self, node: Node) -> list[OutType]:
        if any(v is not None and v.const is None for v in node.inputs):
            return range_data.infer(node)  # run-time values: a computed length (issue 13)
        run_time = self._run_time(node)
        if run_time is not None:
            return [((run_time[2],), node.inputs[0].dtype)]
        return [(self._value(node).shape, node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        return [self._value(node)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        if any(v is not None and v.const is None for v in node.inputs):
            return range_data.emit(node, ctx)
        run_time = self._run_time(node)
        if run_time is None:
            return _store_constant(ctx, node, self._value(node))
        start, delta, n = run_time  # the values computed when the op runs
        y, i = node.outputs[0], ctx.unique("i")
        return (f"for (int64_t {i} = 0; {i} < {n}; ++{i}) "
                f"{ctx.ptr(y)}[{i}] = ({ctype(y.dtype)})({start} + {i} * {delta});")
