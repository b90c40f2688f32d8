"""``com.microsoft`` 8-bit average pools: QLinearGlobalAveragePool and QLinearAveragePool
(inputs ``X, x_scale, x_zero_point, y_scale, y_zero_point``, per-tensor float32 scales,
zero points of X's type; Y uint8 or int8 as X; NCHW, or NHWC with ``channels_last``).

ONNX Runtime's CPU kernels, followed here so the outputs match them bit for bit:

* QLinearGlobalAveragePool (MLAS ``MlasQLinearGlobalAveragePoolNchw``/``Nhwc``): the
  int32 sum of the ``HW`` values minus ``x_zp * HW``, requantized with
  ``scale = x_scale / (y_scale * HW)``: ``saturate(round_half_even(float(sum) * scale)
  + y_zp)``.
* QLinearAveragePool (``qlinear_pool.cc``): each value dequantized
  (``x_scale * (x - x_zp)``), summed in float32 over the window in row-major order
  (window clipped to the input; padding adds nothing), divided by the element count
  (the kernel's size with ``count_include_pad``, else the clipped window's), then
  ``saturate(round_half_even(avg / y_scale + y_zp))``. 1-D and 2-D windows.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, shape_size
from ..base import EmitContext, OpDef, OutType, register
from ..nn._common import geometry
from ..quant._qcommon import check_qlinear_unary

__all__ = ["QLinearAveragePool", "QLinearGlobalAveragePool"]

logger = logging.getLogger(__name__)

MS = "com.microsoft"


def _zp_c(ctx: EmitContext, node: Node, i: int) -> str:
    z = node.input(i)
    return f"(int32_t){ctx.ptr(z)}[0]" if z is not None else "0"


def _zp_np(inputs: list, i: int) -> int:
    return int(np.asarray(inputs[i]).ravel()[0]) if len(inputs) > i and inputs[i] is not None else 0


def _sat_c(expr: str, dtype) -> str:
    info = np.iinfo(dtype)
    ct = "uint8_t" if np.dtype(dtype) == np.uint8 else "int8_t"
    return f"({ct})fmaxf({info.min}.0f, fminf({info.max}.0f, {expr}))"


class _QPool(OpDef):
    domain, since_version = MS, 1
    defaults = {"channels_last": 0}

    def _layout(self, node: Node, shape) -> tuple[int, int, list[int]]:
        """(N, C, spatial sizes) of X."""
        if len(shape) < 3:
            raise ShapeError(
                f"{node.op_type} node {node.name!r}: X must have rank >= 3, got {list(shape)}"
            )
        if self.attr(node, "channels_last"):
            return shape[0], shape[-1], list(shape[1:-1])
        return shape[0], shape[1], list(shape[2:])

    def _shape(self, node: Node, n: int, c: int, spatial: list[int]) -> tuple[int, ...]:
        return (n, *spatial, c) if self.attr(node, "channels_last") else (n, c, *spatial)


@register
class QLinearGlobalAveragePool(_QPool):
    """``com.microsoft.QLinearGlobalAveragePool`` (1): X ``[N, C, *spatial]`` (or
    ``[N, *spatial, C]`` with ``channels_last``) -> Y with the spatial dims 1."""

    op_type = "QLinearGlobalAveragePool"

    def infer(self, node: Node) -> list[OutType]:
        dt = check_qlinear_unary(node)
        n, c, sp = self._layout(node, node.inputs[0].shape)
        return [(self._shape(node, n, c, [1] * len(sp)), dt)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        _, _, sp = self._layout(node, x.shape)
        hw = int(np.prod(sp))
        axes = (
            tuple(range(1, 1 + len(sp)))
            if self.attr(node, "channels_last")
            else tuple(range(2, x.ndim))
        )
        acc = x.astype(np.int64).sum(axis=axes, keepdims=True) - _zp_np(inputs, 2) * hw
        scale = np.float32(np.asarray(inputs[1]).ravel()[0]) / (
            np.float32(np.asarray(inputs[3]).ravel()[0]) * np.float32(hw)
        )
        info = np.iinfo(x.dtype)
        y = np.rint(acc.astype(np.int32).astype(np.float32) * scale) + _zp_np(inputs, 4)
        return [np.clip(y, info.min, info.max).astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        n, c, sp = self._layout(node, x.shape)
        hw = shape_size(sp)  # a Dim with a run-time spatial dim
        last = bool(self.attr(node, "channels_last"))
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        i, j, k = ctx.unique("i"), ctx.unique("j"), ctx.unique("k")
        # NCHW: channel j of image i is contiguous; NHWC: stride C between its values
        at = (
            f"{xp}[({i} * {hw} + {k}) * {c} + {j}]"
            if last
            else f"{xp}[({i} * {c} + {j}) * {hw} + {k}]"
        )
        return (
            "{\n"
            f"  const float sc_ = {ctx.ptr(node.inputs[1])}[0] / ({ctx.ptr(node.inputs[3])}[0] * (float){hw});\n"
            f"  const int32_t xz_ = {_zp_c(ctx, node, 2)}, yz_ = {_zp_c(ctx, node, 4)};\n"
            f"  for (int64_t {i} = 0; {i} < {n}; ++{i})\n"
            f"    for (int64_t {j} = 0; {j} < {c}; ++{j}) {{\n"
            f"      int32_t acc_ = -xz_ * {hw};\n"
            f"      for (int64_t {k} = 0; {k} < {hw}; ++{k}) acc_ += (int32_t){at};\n"
            f"      {yp}[{i} * {c} + {j}] = {_sat_c('(nearbyintf((float)acc_ * sc_) + (float)yz_)', x.dtype)};\n"
            "    }\n"
            "}"
        )


@register
class QLinearAveragePool(_QPool):
    """``com.microsoft.QLinearAveragePool`` (1): 1-D or 2-D average pooling of 8-bit X
    (attributes ``kernel_shape``, ``strides``, ``pads``, ``auto_pad``, ``ceil_mode``,
    ``count_include_pad``, ``channels_last``), Y requantized to ``y_scale``/``y_zero_point``.

    Raises
    ------
    UnsupportedOpError
        For 3-D windows.
    """

    op_type = "QLinearAveragePool"
    defaults = {"channels_last": 0, "ceil_mode": 0, "count_include_pad": 0, "auto_pad": "NOTSET"}

    def _geo(self, node: Node, shape):
        n, c, sp = self._layout(node, shape)
        if len(sp) > 2:
            raise UnsupportedOpError(
                f"QLinearAveragePool node {node.name!r}: {len(sp)}-D windows are not supported"
            )
        kernel = [int(k) for k in node.attrs.get("kernel_shape") or []]
        if len(kernel) != len(sp):
            raise ShapeError(
                f"QLinearAveragePool node {node.name!r}: kernel_shape {kernel} does not match X {list(shape)}"
            )
        return n, c, sp, geometry(node, sp, kernel, bool(self.attr(node, "ceil_mode")))

    def infer(self, node: Node) -> list[OutType]:
        dt = check_qlinear_unary(node)
        n, c, _, geo = self._geo(node, node.inputs[0].shape)
        return [(self._shape(node, n, c, geo.out), dt)]

    @staticmethod
    def _as_2d(sp: list[int], geo) -> tuple[list[int], ...]:
        """(input sizes, output sizes, kernel, strides, begin pads) as 2-D (1-D: H = 1)."""
        if len(sp) == 2:
            return sp, geo.out, geo.kernel, geo.strides, geo.begin
        return (
            [1, sp[0]],
            [1, geo.out[0]],
            [1, geo.kernel[0]],
            [1, geo.strides[0]],
            [0, geo.begin[0]],
        )

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        n, c, sp, geo = self._geo(node, x.shape)
        (H, W), (OH, OW), (KH, KW), (SH, SW), (PT, PL) = self._as_2d(sp, geo)
        last = bool(self.attr(node, "channels_last"))
        xs = np.float32(np.asarray(inputs[1]).ravel()[0])
        ys = np.float32(np.asarray(inputs[3]).ravel()[0])
        xq = (x.astype(np.int32) - _zp_np(inputs, 2)).astype(np.float32) * xs
        xq = np.moveaxis(xq, -1, 1) if last else xq
        xq = xq.reshape(n, c, H, W)
        y = np.empty((n, c, OH, OW), np.float32)
        incl = bool(self.attr(node, "count_include_pad"))
        for oh in range(OH):
            hs = oh * SH - PT
            he, hs = min(hs + KH, H), max(hs, 0)
            for ow in range(OW):
                ws = ow * SW - PL
                we, ws = min(ws + KW, W), max(ws, 0)
                acc = np.zeros((n, c), np.float32)
                for h in range(hs, he):  # float32 sums in ORT's order
                    for w in range(ws, we):
                        acc = acc + xq[:, :, h, w]
                y[:, :, oh, ow] = acc / np.float32(KH * KW if incl else (he - hs) * (we - ws))
        info = np.iinfo(x.dtype)
        q = np.clip(np.rint(y / ys + np.float32(_zp_np(inputs, 4))), info.min, info.max).astype(
            x.dtype
        )
        q = q.reshape((n, c, *geo.out))
        return [np.ascontiguousarray(np.moveaxis(q, 1, -1)) if last else q]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        n, c, sp, geo = self._geo(node, x.shape)
        (H, W), (OH, OW), (KH, KW), (SH, SW), (PT, PL) = self._as_2d(sp, geo)
        last = bool(self.attr(node, "channels_last"))
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        b, ch, oh, ow, h, w = (ctx.unique(s) for s in ("b", "c", "oh", "ow", "h", "w"))
        if last:
            xi, yi = (
                f"(({b} * {H} + {h}) * {W} + {w}) * {c} + {ch}",
                f"(({b} * {OH} + {oh}) * {OW} + {ow}) * {c} + {ch}",
            )
        else:
            xi, yi = (
                f"(({b} * {c} + {ch}) * {H} + {h}) * {W} + {w}",
                f"(({b} * {c} + {ch}) * {OH} + {oh}) * {OW} + {ow}",
            )
        count = (
            f"(float){KH * KW}"
            if self.attr(node, "count_include_pad")
            else "(float)((he_ - hs_) * (we_ - ws_))"
        )
        # X dequantized into float scratch first, as ORT does: each product is rounded
        # on its own (summing the products directly, the C compiler may fuse
        # multiply-adds and round a tie the other way)
        deq, i = f"((float*){ctx.scratch(4 * x.size)})", ctx.unique("i")
        return (
            "{\n"
            f"  const float xs_ = {ctx.ptr(node.inputs[1])}[0], ys_ = {ctx.ptr(node.inputs[3])}[0];\n"
            f"  const int32_t xz_ = {_zp_c(ctx, node, 2)};\n"
            f"  const float yz_ = (float){_zp_c(ctx, node, 4)};\n"
            f"  for (int64_t {i} = 0; {i} < {x.size}; ++{i}) {deq}[{i}] = xs_ * (float)((int32_t){xp}[{i}] - xz_);\n"
            f"  for (int64_t {b} = 0; {b} < {n}; ++{b})\n"
            f"  for (int64_t {ch} = 0; {ch} < {c}; ++{ch})\n"
            f"  for (int64_t {oh} = 0; {oh} < {OH}; ++{oh}) {{\n"
            f"    int64_t hs_ = {oh} * {SH} - {PT}, he_ = hs_ + {KH} < {H} ? hs_ + {KH} : {H};\n"
            "    hs_ = hs_ > 0 ? hs_ : 0;\n"
            f"    for (int64_t {ow} = 0; {ow} < {OW}; ++{ow}) {{\n"
            f"      int64_t ws_ = {ow} * {SW} - {PL}, we_ = ws_ + {KW} < {W} ? ws_ + {KW} : {W};\n"
            "      ws_ = ws_ > 0 ? ws_ : 0;\n"
            "      float acc_ = 0.0f;\n"
            f"      for (int64_t {h} = hs_; {h} < he_; ++{h})\n"
            f"        for (int64_t {w} = ws_; {w} < we_; ++{w})\n"
            f"          acc_ += {deq}[{xi}];\n"
            f"      acc_ /= {count};\n"
            f"      {yp}[{yi}] = {_sat_c('nearbyintf(acc_ / ys_ + yz_)', x.dtype)};\n"
            "    }\n"
            "  }\n"
            "}"
        )
