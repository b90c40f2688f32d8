"""ONNX ``DeformConv`` (19, 22), 2-D: a convolution whose kernel taps are moved by
learned offsets. X ``[N, C, H, W]``, W ``[M, C/group, kH, kW]``, offset ``[N,
offset_group*kH*kW*2, OH, OW]`` ((dy, dx) per tap), optional B ``[M]`` and mask ``[N,
offset_group*kH*kW, OH, OW]`` -> Y ``[N, M, OH, OW]``.

Tap (i, j) of output (oh, ow) samples X bilinearly at ``(oh*sh - pad_top + i*dh + dy,
ow*sw - pad_left + j*dw + dx)``, corners outside the image reading 0 (the ONNX
reference: GridSample, align_corners, zeros padding), times the mask. Lowered as a
deformable im2col into ``[C*kH*kW, OH*OW]`` per image, then one multiply-accumulate
per output channel row.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ._common import attr_ints, require_float32

__all__ = ["DeformConv"]

logger = logging.getLogger(__name__)


def _geo(node: Node):
    x, w, off = node.inputs[0], node.inputs[1], node.inputs[2]
    where = f"DeformConv (node {node.name!r})"
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ShapeError(f"{where}: only 2-D is supported; X {list(x.shape)}, W {list(w.shape)}")
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group, og = int(node.attrs["group"]), int(node.attrs["offset_group"])
    st = attr_ints(node, "strides", [1, 1])
    dl = attr_ints(node, "dilations", [1, 1])
    pd = attr_ints(node, "pads", [0, 0, 0, 0])
    oh = (h + pd[0] + pd[2] - ((kh - 1) * dl[0] + 1)) // st[0] + 1
    ow = (wd + pd[1] + pd[3] - ((kw - 1) * dl[1] + 1)) // st[1] + 1
    mask = node.input(4)
    b = node.input(3)
    if (c != cg * group or m % group or c % og or tuple(off.shape) != (n, og * kh * kw * 2, oh, ow)
            or (mask is not None and tuple(mask.shape) != (n, og * kh * kw, oh, ow))
            or (b is not None and tuple(b.shape) != (m,))):
        raise ShapeError(f"{where}: X {list(x.shape)}, W {list(w.shape)}, offset "
                         f"{list(off.shape)}, group {group}, offset_group {og} disagree "
                         f"(output {oh}x{ow})")
    return n, c, h, wd, m, cg, kh, kw, group, og, st, dl, pd, oh, ow


def _bilinear(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Samples of ``img [H, W]`` at float positions; corners outside read 0."""
    h, w = img.shape
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    out = np.zeros(y.shape)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            wt = (1 - np.abs(y - yy)) * (1 - np.abs(x - xx))
            ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            out += np.where(ok, wt * img[np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)], 0)
    return out


@register
class DeformConv(OpDef):
    """``DeformConv`` (2-D, float32).

    Raises
    ------
    ShapeError
        Other than 2-D, or shapes that disagree with the attributes.
    """

    op_type, since_version = "DeformConv", 19
    also_versions = (22,)  # 22 only added types

    def infer(self, node: Node) -> list[OutType]:
        n, *_, m, _, _, _, _, _, _, _, _, oh, ow = _geo(node)
        return [((n, m, oh, ow), node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        x, w, off = inputs[:3]
        b = inputs[3] if len(inputs) > 3 else None
        mask = inputs[4] if len(inputs) > 4 else None
        n, c, _, _, m, cg, kh, kw, group, og, st, dl, pd, oh, ow = _geo(node)
        off = off.reshape(n, og, kh, kw, 2, oh, ow).astype(np.float64)
        mk = np.ones((n, og, kh, kw, oh, ow)) if mask is None else mask.reshape(
            n, og, kh, kw, oh, ow)
        base_y = (np.arange(oh) * st[0] - pd[0])[:, None]
        base_x = (np.arange(ow) * st[1] - pd[1])[None, :]
        cols = np.zeros((n, c, kh, kw, oh, ow))
        for b_ in range(n):
            for ch in range(c):
                g = ch // (c // og)
                for i in range(kh):
                    for j in range(kw):
                        yy = base_y + i * dl[0] + off[b_, g, i, j, 0]
                        xx = base_x + j * dl[1] + off[b_, g, i, j, 1]
                        cols[b_, ch, i, j] = _bilinear(x[b_, ch], yy, xx) * mk[b_, g, i, j]
        y = np.zeros((n, m, oh, ow))
        mg = m // group
        for g in range(group):
            wg = w[g * mg:(g + 1) * mg].reshape(mg, -1).astype(np.float64)
            cg_cols = cols[:, g * cg:(g + 1) * cg].reshape(n, -1, oh * ow)
            y[:, g * mg:(g + 1) * mg] = np.einsum("mk,nkp->nmp", wg, cg_cols).reshape(
                n, mg, oh, ow)
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        return [y.astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0, 1, 2, 3, 4)
        x, w, off, y = node.inputs[0], node.inputs[1], node.inputs[2], node.outputs[0]
        b, mask = node.input(3), node.input(4)
        n, c, h, wd, m, cg, kh, kw, group, og, st, dl, pd, oh, ow = _geo(node)
        if y.size == 0:
            return ""
        k, p = kh * kw, oh * ow
        cols = f"((float*){ctx.scratch(4 * c * k * p)})"
        mval = (f"{ctx.ptr(mask)}[((bn * {og} + g) * {k} + t) * {p} + q]"
                if mask is not None else "1.0f")
        init = f"{ctx.ptr(b)}[oc]" if b is not None else "0.0f"
        mg = m // group
        return (
            "{\n"
            f"  const float* xs = {ctx.ptr(x)}; const float* os = {ctx.ptr(off)};\n"
            f"  const float* ws = {ctx.ptr(w)}; float* ys = {ctx.ptr(y)};\n"
            f"  for (int64_t bn = 0; bn < {n}; ++bn) {{\n"
            f"    for (int64_t ch = 0; ch < {c}; ++ch) {{\n"
            f"      const int64_t g = ch / {c // og};\n"
            f"      const float* img = xs + (bn * {c} + ch) * {h * wd};\n"
            f"      for (int64_t t = 0; t < {k}; ++t)\n"
            f"      for (int64_t q = 0; q < {p}; ++q) {{\n"
            f"        const float* o2 = os + (((bn * {og} + g) * {k} + t) * 2) * {p} + q;\n"
            f"        float yy = (float)((q / {ow}) * {st[0]} - {pd[0]} + (t / {kw}) * {dl[0]}) + o2[0];\n"
            f"        float xx = (float)((q % {ow}) * {st[1]} - {pd[1]} + (t % {kw}) * {dl[1]}) + o2[{p}];\n"
            "        float y0 = floorf(yy), x0 = floorf(xx), v = 0.0f;\n"
            "        int64_t iy = (int64_t)y0, ix = (int64_t)x0;\n"
            "        float ly = yy - y0, lx = xx - x0;\n"
            f"        if (iy >= 0 && iy < {h} && ix >= 0 && ix < {wd}) v += (1 - ly) * (1 - lx) * img[iy * {wd} + ix];\n"
            f"        if (iy >= 0 && iy < {h} && ix + 1 >= 0 && ix + 1 < {wd}) v += (1 - ly) * lx * img[iy * {wd} + ix + 1];\n"
            f"        if (iy + 1 >= 0 && iy + 1 < {h} && ix >= 0 && ix < {wd}) v += ly * (1 - lx) * img[(iy + 1) * {wd} + ix];\n"
            f"        if (iy + 1 >= 0 && iy + 1 < {h} && ix + 1 >= 0 && ix + 1 < {wd}) v += ly * lx * img[(iy + 1) * {wd} + ix + 1];\n"
            f"        {cols}[(ch * {k} + t) * {p} + q] = v * {mval};\n"
            "      }\n"
            "    }\n"
            f"    for (int64_t oc = 0; oc < {m}; ++oc) {{\n"
            f"      float* yo = ys + (bn * {m} + oc) * {p};\n"
            f"      for (int64_t q = 0; q < {p}; ++q) yo[q] = {init};\n"
            f"      const float* cg0 = {cols} + (oc / {mg}) * {cg * k * p};\n"
            f"      for (int64_t r = 0; r < {cg * k}; ++r) {{\n"
            f"        const float wv = ws[oc * {cg * k} + r]; const float* cr = cg0 + r * {p};\n"
            f"        for (int64_t q = 0; q < {p}; ++q) yo[q] += wv * cr[q];\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}"
        )
