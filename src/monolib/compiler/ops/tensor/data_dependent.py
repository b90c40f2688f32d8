"""Operators whose output SHAPE depends on input values: Unique (11,
28), Compress (9, 11, 28) and NonMaxSuppression (10, 11).

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

__all__ = ["Compress", "NonMaxSuppression", "Unique"]

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


def _iou_over(a: np.ndarray, b: np.ndarray, center: bool, threshold: float) -> bool:
    """True when boxes ``a`` and ``b`` overlap by IoU > threshold (ONNX's rule: boxes
    of zero area or disjoint boxes never suppress)."""
    if center:
        (ax, ay, aw, ah), (bx, by, bw, bh) = a, b
        a = np.array([ay - ah / 2, ax - aw / 2, ay + ah / 2, ax + aw / 2])
        b = np.array([by - bh / 2, bx - bw / 2, by + bh / 2, bx + bw / 2])
    ay0, ay1 = sorted((a[0], a[2]))
    ax0, ax1 = sorted((a[1], a[3]))
    by0, by1 = sorted((b[0], b[2]))
    bx0, bx1 = sorted((b[1], b[3]))
    iw, ih = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    if iw <= 0 or ih <= 0:
        return False
    inter = iw * ih
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > threshold


@register
class NonMaxSuppression(_Folded):
    """``NonMaxSuppression``: constant boxes ``[B, N, 4]``, scores ``[B, C, N]`` and
    thresholds -> selected ``[K, 3]`` (batch, class, box), per batch and class greedy
    by descending score (ties: lower index first), at most max_output_boxes_per_class."""

    op_type, since_version = "NonMaxSuppression", 10
    also_versions = (11,)
    deciding = ("boxes", "scores", "max_output_boxes_per_class", "iou_threshold",
                "score_threshold")

    def reference(self, node: Node, inputs):
        boxes, scores = inputs[0], inputs[1]
        get = lambda i, d: (float(np.asarray(inputs[i]).reshape(-1)[0])
                            if len(inputs) > i and inputs[i] is not None
                            and np.asarray(inputs[i]).size else d)
        limit = max(int(get(2, 0)), 0)
        iou, score_min = get(3, 0.0), get(4, None)
        center = bool(node.attrs["center_point_box"])
        out = []
        for b in range(boxes.shape[0]):
            for c in range(scores.shape[1]):
                s = scores[b, c]
                cand = [i for i in range(s.size) if score_min is None or s[i] > score_min]
                cand.sort(key=lambda i: (-s[i], i))
                kept: list[int] = []
                for i in cand:
                    if len(kept) >= limit:
                        break
                    if not any(_iou_over(boxes[b, i], boxes[b, j], center, iou) for j in kept):
                        kept.append(i)
                out += [(b, c, i) for i in kept]
        return [np.array(out, np.int64).reshape(-1, 3)]
