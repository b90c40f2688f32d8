"""``com.microsoft`` QLinearSoftmax: softmax of 8-bit X into 8-bit Y, computed as ONNX
Runtime's CPU kernel (``qlinear_softmax.cc``) does, so the outputs match it bit for bit.

Inputs ``X, X_scale, x_zero_point?, y_scale, y_zero_point``; attributes ``opset``
(required: below 13 the softmax runs over the flattened dims from ``axis`` on, from 13
over ``axis`` alone) and ``axis`` (default 1 below opset 13, else -1).

ORT's algorithm (float32 table): with ``D`` the reduced length,
``shift = max(0, log(FLT_MAX / D) - 5) / X_scale`` (double) and a 256-entry table
``t[i] = float(exp((i - 255 + shift) * X_scale))`` (int8: stored at ``uint8(i - 128)``),
each row looks its values up aligned to the row maximum (uint8: ``t[255 - max + x]``,
int8: ``t[uint8(127 - max + x)]``), sums them in float32 in order, and writes
``round_half_even(t * floor(1 / y_scale) / sum) + y_zero_point``, saturated (uint8: capped
at 255; int8: to [-128, 127], as ORT 1.32 gives; older sources wrapped past 127). X's zero point does not enter (softmax is shift-invariant); a
row whose sum is 0 is left unwritten, as ORT leaves it.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node, shape_size
from ..base import EmitContext, OpDef, OutType, register
from ..quant._qcommon import check_qlinear_unary

__all__ = ["QLinearSoftmax"]

logger = logging.getLogger(__name__)

_FLT_MAX = np.float32(np.finfo(np.float32).max)


@register
class QLinearSoftmax(OpDef):
    """``com.microsoft.QLinearSoftmax`` (1): X uint8 or int8 (any rank >= 1), Y the same
    type and shape; float32 scalar scales, scalar zero points.

    Raises
    ------
    UnsupportedOpError
        Other types, non-scalar scales or zero points.
    CompileError
        Without the ``opset`` attribute.
    """

    domain, op_type, since_version = "com.microsoft", "QLinearSoftmax", 1
    defaults = {"axis": None}

    def _dims(self, node: Node, shape) -> tuple[int, int, int]:
        """(outer, D, inner): element (o, d, i) at ``(o * D + d) * inner + i``."""
        rank = len(shape)
        opset = int(self.attr(node, "opset"))
        axis = self.attr(node, "axis")
        axis = (1 if opset < 13 else -1) if axis is None else int(axis)
        if not -rank <= axis < rank:
            raise ShapeError(
                f"QLinearSoftmax node {node.name!r}: axis {axis} out of range for rank {rank}"
            )
        axis %= rank
        outer = shape_size(shape[:axis])  # Dims with run-time dims (issue 12)
        if opset < 13:
            return outer, shape_size(shape[axis:]), 1
        return outer, shape[axis], shape_size(shape[axis + 1 :])

    def infer(self, node: Node) -> list[OutType]:
        check_qlinear_unary(node)
        x = node.inputs[0]
        self._dims(node, x.shape)
        return [(x.shape, x.dtype)]

    @staticmethod
    def _table(xs: np.float32, d: int, signed: bool) -> np.ndarray:
        shift = np.log(np.float64(_FLT_MAX / np.float32(d)))
        shift = max(0.0, shift - 5.0) / np.float64(xs)
        i = np.arange(256, dtype=np.float64)
        vals = np.exp((i - 255 + shift) * np.float64(xs)).astype(np.float32)
        table = np.empty(256, np.float32)
        table[((np.arange(256) - 128) if signed else np.arange(256)).astype(np.uint8)] = vals
        return table

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        outer, d, inner = self._dims(node, x.shape)
        signed = x.dtype == np.int8
        table = self._table(np.float32(np.asarray(inputs[1]).ravel()[0]), d, signed)
        ysf = np.floor(np.float32(1.0) / np.float32(np.asarray(inputs[3]).ravel()[0]))
        yz = (
            int(np.asarray(inputs[4]).ravel()[0])
            if len(inputs) > 4 and inputs[4] is not None
            else 0
        )
        xv = x.reshape(outer, d, inner).astype(np.int32)
        xmax = xv.max(axis=1, keepdims=True)
        idx = ((127 - xmax + xv) & 255) if signed else (255 - xmax + xv)
        t = table[idx]
        vsum = np.zeros((outer, 1, inner), np.float32)
        for k in range(d):  # float32 sums in order
            vsum = vsum + t[:, k : k + 1, :]
        with np.errstate(all="ignore"):
            vq = np.rint((t * ysf) / vsum).astype(np.int64) + yz
        y = (
            np.clip(vq, -128, 127).astype(np.int8)
            if signed
            else np.minimum(vq, 255).astype(np.uint8)
        )
        return [y.reshape(x.shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        outer, d, inner = self._dims(node, x.shape)
        if x.size == 0:
            return ""
        signed = x.dtype == np.int8
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        yz = node.input(4)
        yz_c = f"(int32_t){ctx.ptr(yz)}[0]" if yz is not None else "0"
        o, i, k = ctx.unique("o"), ctx.unique("i"), ctx.unique("k")
        at = f"(({o}) * {d} + {k}) * {inner} + {i}"
        if signed:
            idx = f"(uint8_t)(127 - mx_ + (int32_t){xp}[{at}])"
            store = f"{yp}[{at}] = (int8_t)(vq_ > 127 ? 127 : (vq_ < -128 ? -128 : vq_));"
            tbl_at = "(uint8_t)(j_ - 128)"
        else:
            idx = f"(255 - mx_ + (int32_t){xp}[{at}])"
            store = f"{yp}[{at}] = (uint8_t)(vq_ > 255 ? 255 : vq_);"
            tbl_at = "j_"
        return (
            "{\n"
            "  float tbl_[256];\n"
            f"  const float xs_ = {ctx.ptr(node.inputs[1])}[0];\n"
            f"  double sh_ = log((double)(3.40282347e+38f / (float){d}));\n"
            "  sh_ = (sh_ - 5.0 > 0.0 ? sh_ - 5.0 : 0.0) / (double)xs_;\n"
            f"  for (int j_ = 0; j_ < 256; ++j_) tbl_[{tbl_at}] = (float)exp(((double)j_ - 255 + sh_) * (double)xs_);\n"
            f"  const float ysf_ = floorf(1.0f / {ctx.ptr(node.inputs[3])}[0]);\n"
            f"  const int32_t yz_ = {yz_c};\n"
            f"  for (int64_t {o} = 0; {o} < {outer}; ++{o})\n"
            f"    for (int64_t {i} = 0; {i} < {inner}; ++{i}) {{\n"
            f"      int64_t {k} = 0;\n"
            f"      int32_t mx_ = {xp}[{at}];\n"
            f"      for ({k} = 1; {k} < {d}; ++{k}) if ({xp}[{at}] > mx_) mx_ = {xp}[{at}];\n"
            "      float vsum_ = 0.0f;\n"
            f"      for ({k} = 0; {k} < {d}; ++{k}) vsum_ += tbl_[{idx}];\n"
            "      if (vsum_ == 0.0f) continue; /* ORT leaves such a row unwritten */\n"
            f"      for ({k} = 0; {k} < {d}; ++{k}) {{\n"
            f"        int32_t vq_ = (int32_t)nearbyintf((tbl_[{idx}] * ysf_) / vsum_) + yz_;\n"
            f"        {store}\n"
            "      }\n"
            "    }\n"
            "}"
        )
