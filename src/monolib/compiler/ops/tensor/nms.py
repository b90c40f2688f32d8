"""ONNX ``NonMaxSuppression`` (10, 11) (ONNX operator spec, "NonMaxSuppression"):
boxes ``[B, N, 4]``, scores ``[B, C, N]``, optional ``max_output_boxes_per_class``
(int64, default 0), ``iou_threshold`` (float, default 0), ``score_threshold`` (float,
absent: no filtering) -> selected ``[K, 3]`` int64 (batch, class, box).

All inputs constant: folded at compile time (:meth:`NonMaxSuppression.reference`).
Otherwise ``K`` is a computed dim (issue 13) bounded by ``min(max_output, N) x C x B``
when ``max_output_boxes_per_class`` is a constant, ``N x C x B`` when it is a run-time
input; ``nms.h`` (``ml_nms``) selects on the run-time data and writes ``K``. The rule
is ONNX Runtime's: candidates with ``score > score_threshold``, descending score (equal
scores: lower box index first), IoU in float32 ``> iou_threshold`` suppresses, boxes of
zero area or without overlap never do.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...backends.cstyle import c_literal
from ...ir import Node
from ...symbolic import Dim, dim_min
from ..base import EmitContext, OpDef, OutType, register
from ._computed import count_dim, is_runtime, upper

__all__ = ["NonMaxSuppression"]

logger = logging.getLogger(__name__)


def _corners(box: np.ndarray, center: bool) -> np.ndarray:
    """``[x0, y0, x1, y1]`` (float32, ordered) of one box."""
    b = box.astype(np.float32)
    if center:
        hw, hh = b[2] / np.float32(2), b[3] / np.float32(2)
        return np.array([b[0] - hw, b[1] - hh, b[0] + hw, b[1] + hh], np.float32)
    return np.array([min(b[1], b[3]), min(b[0], b[2]), max(b[1], b[3]), max(b[0], b[2])],
                    np.float32)


def _suppresses(a: np.ndarray, b: np.ndarray, iou: np.float32) -> bool:
    """IoU of corner boxes ``a``, ``b`` (float32) above ``iou``; zero-area boxes and
    boxes without overlap never suppress."""
    ix0, ix1 = max(a[0], b[0]), min(a[2], b[2])
    iy0, iy1 = max(a[1], b[1]), min(a[3], b[3])
    if ix1 <= ix0 or iy1 <= iy0:
        return False
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a, area_b = (a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1])
    union = area_a + area_b - inter
    if inter <= 0 or area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(np.float32(inter / union) > iou)


@register
class NonMaxSuppression(OpDef):
    """``NonMaxSuppression`` with run-time or constant inputs (module docstring).

    Raises
    ------
    ShapeError
        When boxes is not ``[B, N, 4]`` or scores not ``[B, C, N]`` with the same B, N.
    """

    op_type, since_version = "NonMaxSuppression", 10
    also_versions = (11,)  # 11 only documents the corner order

    def _dims(self, node: Node):
        boxes, scores = node.inputs[0], node.inputs[1]
        where = f"NonMaxSuppression (node {node.name!r})"
        if len(boxes.shape) != 3 or len(scores.shape) != 3:
            raise ShapeError(f"{where}: boxes must be [B, N, 4] and scores [B, C, N], got "
                             f"{list(boxes.shape)} and {list(scores.shape)}")
        return boxes.shape[0], scores.shape[1], boxes.shape[1]

    def _const(self, node: Node, i: int):
        v = node.input(i)
        if v is None or v.const is None or v.const.size == 0:
            return None
        return np.asarray(v.const).reshape(-1)[0]

    def infer(self, node: Node) -> list[OutType]:
        if not any(is_runtime(v) for v in node.inputs):
            out = self.reference(node, [None if v is None else v.const for v in node.inputs])
            return [(out[0].shape, np.dtype(np.int64))]
        B, C, N = self._dims(node)
        limit = N
        if not is_runtime(node.input(2)):
            m = self._const(node, 2)
            limit = 0 if m is None or int(m) <= 0 else dim_min(N, int(m))
        count = count_dim(node, 0, 0, "selected", upper(limit) * upper(C) * upper(B))
        return [((count, 3), np.dtype(np.int64))]

    def reference(self, node: Node, inputs):
        boxes, scores = np.asarray(inputs[0], np.float32), np.asarray(inputs[1], np.float32)
        get = lambda i: (np.asarray(inputs[i]).reshape(-1)[0] if len(inputs) > i
                         and inputs[i] is not None and np.asarray(inputs[i]).size else None)
        limit = max(int(get(2) or 0), 0)
        iou = np.float32(get(3) if get(3) is not None else 0.0)
        thr = get(4)
        center = bool(node.attrs["center_point_box"])
        out = []
        for b in range(boxes.shape[0]):
            corners = [_corners(box, center) for box in boxes[b]]
            for c in range(scores.shape[1]):
                s = scores[b, c]
                cand = [i for i in range(s.size) if thr is None or s[i] > np.float32(thr)]
                cand.sort(key=lambda i: (-s[i], i))
                kept: list[int] = []
                for i in cand:
                    if len(kept) >= limit:
                        break
                    if not any(_suppresses(corners[j], corners[i], iou) for j in kept):
                        kept.append(i)
                out += [(b, c, i) for i in kept]
        return [np.array(out, np.int64).reshape(-1, 3)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        B, C, N = self._dims(node)
        y = node.outputs[0]
        count = y.shape[0]
        if not isinstance(count, Dim):
            return ""  # max_output_boxes_per_class is a constant <= 0: nothing selected
        ctx.include("nms.h")

        def scalar(i: int, default: str, cast: str) -> str:
            v = node.input(i)
            if v is None or (v.const is not None and v.const.size == 0):
                return default
            if v.const is not None:
                return c_literal(np.asarray(v.const).reshape(-1)[0], v.dtype)
            return f"({cast}){ctx.ptr(v)}[0]"

        max_out = scalar(2, "0", "int64_t")
        iou = scalar(3, "0.0f", "float")
        has_thr = "0" if scalar(4, "", "float") == "" else "1"
        thr = scalar(4, "0.0f", "float")
        n_hi = upper(N)
        keys = ctx.scratch(8 * n_hi)
        corners = ctx.scratch(16 * n_hi)
        kept = ctx.scratch(8 * n_hi)
        k = ctx.unique("nsel")
        center = int(bool(node.attrs["center_point_box"]))
        return "\n".join([
            "{",
            (f"  int64_t {k} = ml_nms({ctx.ptr(node.inputs[0])}, {ctx.ptr(node.inputs[1])}, "
            f"{B}, {C}, {N}, {max_out}, {iou}, {has_thr}, {thr}, {center}, {ctx.ptr(y)},"),
            f"    (uint64_t*){keys}, (float*){corners}, (int64_t*){kept});",
            f"  {ctx.set_symbol(count, k)}",
            "}",
        ])
