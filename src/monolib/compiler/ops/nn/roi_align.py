"""ONNX ``RoiAlign`` (10, 16, 22): X ``[N, C, H, W]``, rois ``[R, 4]`` (x1, y1, x2, y2
in input pixels times ``spatial_scale``), batch_indices ``[R]`` -> Y ``[R, C, OH, OW]``.

Per the ONNX spec and its reference: each output bin averages (``avg``) or takes the
maximum (``max``: of the four weighted corner values of each sample, as the reference
and ONNX Runtime do) of ``sampling_ratio^2`` bilinear samples (``ceil(roi / out)`` per
dim when 0) taken at the centers of a regular sub-grid; ``half_pixel`` (16's default)
shifts the roi by -0.5, ``output_half_pixel`` (10's behaviour) instead floors its size
at 1. Samples outside ``[-1, H] x [-1, W]`` count as 0. rois and batch indices are read
at run time; a batch index out of range is clamped (C cannot raise).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, op_of, register
from ...backends.cstyle import c_literal
from ._common import require_float32

__all__ = ["RoiAlign"]

logger = logging.getLogger(__name__)


def _attrs(node: Node):
    half = op_of(node).attr(node, "coordinate_transformation_mode") == "half_pixel"
    mode = node.attrs["mode"]
    if mode not in ("avg", "max"):
        raise ShapeError(f"RoiAlign (node {node.name!r}): mode {mode!r} is not avg or max")
    return (half, mode, int(node.attrs["output_height"]), int(node.attrs["output_width"]),
            int(node.attrs["sampling_ratio"]), float(node.attrs["spatial_scale"]))


def _corners(y: float, x: float, h: int, w: int):
    """The four (index, weight) pairs of a bilinear sample, or None outside."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return None
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1 - ly, 1 - lx
    return [(yl * w + xl, hy * hx), (yl * w + xh, hy * lx), (yh * w + xl, ly * hx),
            (yh * w + xh, ly * lx)]


@register
class RoiAlign(OpDef):
    """``RoiAlign``; float32.

    Raises
    ------
    ShapeError
        When X is not 4-D, rois not ``[R, 4]`` or batch_indices not ``[R]``.
    """

    op_type, since_version = "RoiAlign", 10
    #: version 10 has no coordinate_transformation_mode: it computes output_half_pixel
    defaults = {"coordinate_transformation_mode": "output_half_pixel"}
    also_versions = (16, 22)  # 16: coordinate_transformation_mode; 22: types

    def infer(self, node: Node) -> list[OutType]:
        x, rois, bi = node.inputs[:3]
        if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 4 or \
                tuple(bi.shape) != (rois.shape[0],):
            raise ShapeError(f"RoiAlign (node {node.name!r}): X {list(x.shape)}, rois "
                             f"{list(rois.shape)}, batch_indices {list(bi.shape)}")
        _, _, oh, ow, _, _ = _attrs(node)
        return [((rois.shape[0], x.shape[1], oh, ow), x.dtype)]

    def reference(self, node: Node, inputs):
        x, rois, bi = inputs
        half, mode, oh, ow, ratio, scale = _attrs(node)
        n, c, h, w = x.shape
        y = np.zeros((rois.shape[0], c, oh, ow), np.float64)
        off = 0.5 if half else 0.0
        for r, roi in enumerate(rois.astype(np.float64)):
            x0, y0, x1, y1 = (v * scale - off for v in roi)
            rw, rh = x1 - x0, y1 - y0
            if not half:
                rw, rh = max(rw, 1.0), max(rh, 1.0)
            bh, bw = rh / oh, rw / ow
            gh = ratio if ratio > 0 else math.ceil(rh / oh)
            gw = ratio if ratio > 0 else math.ceil(rw / ow)
            plane = x[int(np.clip(bi[r], 0, n - 1))].reshape(c, -1).astype(np.float64)
            for ph in range(oh):
                for pw in range(ow):
                    vals = []
                    for iy in range(gh):
                        for ix in range(gw):
                            pts = _corners(y0 + ph * bh + (iy + 0.5) * bh / gh,
                                           x0 + pw * bw + (ix + 0.5) * bw / gw, h, w)
                            pts = pts or [(0, 0.0)] * 4
                            terms = np.stack([wt * plane[:, i] for i, wt in pts])
                            vals.append(terms.sum(0) if mode == "avg" else terms.max(0))
                    if not vals:
                        continue
                    v = np.stack(vals)
                    y[r, :, ph, pw] = v.sum(0) / max(gh * gw, 1) if mode == "avg" else v.max(0)
        return [y.astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0, 1)
        x, rois, bi = node.inputs[:3]
        y = node.outputs[0]
        half, mode, oh, ow, ratio, scale = _attrs(node)
        n, c, h, w = x.shape
        if y.size == 0:
            return ""
        off = 0.5 if half else 0.0
        floor1 = "" if half else "if (rw < 1.0f) rw = 1.0f; if (rh < 1.0f) rh = 1.0f;"
        grid = (f"int64_t gh = {ratio}, gw = {ratio};" if ratio > 0 else
                f"int64_t gh = (int64_t)ceilf(rh / {oh}), gw = (int64_t)ceilf(rw / {ow});")
        if mode == "avg":
            acc0, sample, fin = "0.0f", "acc += s1 + s2 + s3 + s4;", "acc / (float)(cnt > 0 ? cnt : 1)"
        else:
            acc0 = "0.0f"
            sample = ("{ float m = fmaxf(fmaxf(s1, s2), fmaxf(s3, s4)); "
                      "acc = first ? m : fmaxf(acc, m); first = 0; }")
            fin = "acc"
        return (
            "{\n"
            f"  const float* xs = {ctx.ptr(x)}; const float* rs = {ctx.ptr(rois)};\n"
            f"  float* ys = {ctx.ptr(y)};\n"
            f"  for (int64_t r = 0; r < {rois.shape[0]}; ++r) {{\n"
            f"    int64_t b = (int64_t){ctx.ptr(bi)}[r]; b = b < 0 ? 0 : (b >= {n} ? {n - 1} : b);\n"
            f"    float x0 = rs[r * 4] * {c_literal(scale, np.float32)} - {c_literal(off, np.float32)}, y0 = rs[r * 4 + 1] * {c_literal(scale, np.float32)} - {c_literal(off, np.float32)};\n"
            f"    float rw = rs[r * 4 + 2] * {c_literal(scale, np.float32)} - {c_literal(off, np.float32)} - x0, rh = rs[r * 4 + 3] * {c_literal(scale, np.float32)} - {c_literal(off, np.float32)} - y0;\n"
            f"    {floor1}\n"
            f"    float bh = rh / {oh}, bw = rw / {ow};\n"
            f"    {grid}\n"
            "    int64_t cnt = gh * gw;\n"
            f"    for (int64_t ch = 0; ch < {c}; ++ch) {{\n"
            f"      const float* p = xs + (b * {c} + ch) * {h * w};\n"
            f"      for (int64_t ph = 0; ph < {oh}; ++ph)\n"
            f"      for (int64_t pw = 0; pw < {ow}; ++pw) {{\n"
            f"        float acc = {acc0}; int first = 1; (void)first;\n"
            "        for (int64_t iy = 0; iy < gh; ++iy)\n"
            "        for (int64_t ix = 0; ix < gw; ++ix) {\n"
            "          float yy = y0 + ph * bh + (iy + 0.5f) * bh / gh;\n"
            "          float xx = x0 + pw * bw + (ix + 0.5f) * bw / gw;\n"
            "          float s1 = 0, s2 = 0, s3 = 0, s4 = 0;\n"
            f"          if (!(yy < -1.0f || yy > {h} || xx < -1.0f || xx > {w})) {{\n"
            "            if (yy < 0) yy = 0; if (xx < 0) xx = 0;\n"
            "            int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh, xh;\n"
            f"            if (yl >= {h - 1}) {{ yl = yh = {h - 1}; yy = (float)yl; }} else yh = yl + 1;\n"
            f"            if (xl >= {w - 1}) {{ xl = xh = {w - 1}; xx = (float)xl; }} else xh = xl + 1;\n"
            "            float ly = yy - yl, lx = xx - xl, hy = 1 - ly, hx = 1 - lx;\n"
            f"            s1 = hy * hx * p[yl * {w} + xl]; s2 = hy * lx * p[yl * {w} + xh];\n"
            f"            s3 = ly * hx * p[yh * {w} + xl]; s4 = ly * lx * p[yh * {w} + xh];\n"
            "          }\n"
            f"          {sample}\n"
            "        }\n"
            f"        ys[((r * {c} + ch) * {oh} + ph) * {ow} + pw] = {fin};\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}"
        )
