"""``com.microsoft`` QLinearConcat: 8-bit tensors, each with its own scale and zero
point, concatenated along ``axis`` into Y's quantization.

Inputs: ``Y_scale, Y_zero_point``, then ``(X_i, X_i_scale, X_i_zero_point)`` per tensor
(float32 scalar scales, zero points of Y's type). ONNX Runtime's kernel
(``qlinear_concat.cc``) requantizes each input through a 256-entry table built by
dequantizing (``x_scale * (x - x_zp)``) and quantizing with MLAS
(``saturate(round_half_even(v / y_scale) + y_zp)``); an input whose scale and zero point
equal Y's is copied, which that formula gives too. Here the same formula per element.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, shape_size
from ..base import EmitContext, OpDef, OutType, register

__all__ = ["QLinearConcat"]

logger = logging.getLogger(__name__)

_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


@register
class QLinearConcat(OpDef):
    """``com.microsoft.QLinearConcat`` (1): attribute ``axis`` (required, may be
    negative); Y uint8 or int8 with the inputs' shapes joined along ``axis``.

    Raises
    ------
    UnsupportedOpError
        For other types, non-scalar scales or zero points.
    ShapeError
        When the inputs' ranks or other dims differ.
    """

    domain, op_type, since_version = "com.microsoft", "QLinearConcat", 1

    def _parts(self, node: Node):
        ins = node.inputs
        if len(ins) < 5 or (len(ins) - 2) % 3:
            raise ShapeError(
                f"QLinearConcat node {node.name!r}: expected Y_scale, Y_zero_point and triples, got {len(ins)} inputs"
            )
        return [tuple(ins[k : k + 3]) for k in range(2, len(ins), 3)]

    def _axis(self, node: Node, rank: int) -> int:
        axis = int(self.attr(node, "axis"))
        if not -rank <= axis < rank:
            raise ShapeError(
                f"QLinearConcat node {node.name!r}: axis {axis} out of range for rank {rank}"
            )
        return axis % rank

    def infer(self, node: Node) -> list[OutType]:
        ys, yz = node.inputs[0], node.inputs[1]
        dt = yz.dtype
        if dt not in _Q8:
            raise UnsupportedOpError(
                f"QLinearConcat node {node.name!r}: Y_zero_point is {dt}; expected uint8 or int8"
            )
        scalars = [ys, yz] + [v for x, s, z in self._parts(node) for v in (s, z)]
        if any(v is None or v.size != 1 for v in scalars):
            raise UnsupportedOpError(
                f"QLinearConcat node {node.name!r}: every scale and zero point must be a scalar"
            )
        parts = self._parts(node)
        first = parts[0][0].shape
        axis = self._axis(node, len(first))
        total = 0
        for x, _, z in parts:
            if x.dtype != dt or z.dtype != dt:
                raise UnsupportedOpError(
                    f"QLinearConcat node {node.name!r}: input {x.name!r} is {x.dtype}; expected {dt}"
                )
            if len(x.shape) != len(first) or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, first)) if i != axis
            ):
                raise ShapeError(
                    f"QLinearConcat node {node.name!r}: shapes {list(first)} and {list(x.shape)} differ off axis {axis}"
                )
            total += x.shape[axis]
        out = list(first)
        out[axis] = total
        return [(tuple(out), dt)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        ys, yz = (
            np.float32(np.asarray(inputs[0]).ravel()[0]),
            np.float32(np.asarray(inputs[1]).ravel()[0]),
        )
        info = np.iinfo(inputs[1].dtype)
        outs = []
        for k in range(2, len(inputs), 3):
            x, xs, xz = inputs[k : k + 3]
            v = np.float32(np.asarray(xs).ravel()[0]) * (
                x.astype(np.int32) - int(np.asarray(xz).ravel()[0])
            ).astype(np.float32)
            outs.append(np.clip(np.rint(v / ys) + yz, info.min, info.max).astype(inputs[1].dtype))
        return [np.concatenate(outs, axis=self._axis(node, outs[0].ndim))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        y = node.outputs[0]
        axis = self._axis(node, len(y.shape))
        outer = shape_size(y.shape[:axis])  # Dims with run-time dims (issue 12)
        y_inner = shape_size(y.shape[axis:])
        info = np.iinfo(y.dtype)
        ct = "uint8_t" if y.dtype == np.uint8 else "int8_t"
        lines = [
            "{",
            f"  const float ys_ = {ctx.ptr(node.inputs[0])}[0], yz_ = (float){ctx.ptr(node.inputs[1])}[0];",
        ]
        off = 0
        for x, xs, xz in self._parts(node):
            inner = shape_size(x.shape[axis:])
            o, i = ctx.unique("o"), ctx.unique("i")
            lines += [
                "  {",
                f"    const float xs_ = {ctx.ptr(xs)}[0];",
                f"    const int32_t xz_ = (int32_t){ctx.ptr(xz)}[0];",
                f"    for (int64_t {o} = 0; {o} < {outer}; ++{o})",
                f"      for (int64_t {i} = 0; {i} < {inner}; ++{i}) {{",
                f"        float v_ = nearbyintf(xs_ * (float)((int32_t){ctx.ptr(x)}[{o} * {inner} + {i}] - xz_) / ys_) + yz_;",
                f"        {ctx.ptr(y)}[{o} * {y_inner} + {off} + {i}] = ({ct})fmaxf({info.min}.0f, fminf({info.max}.0f, v_));",
                "      }",
                "  }",
            ]
            off += inner
        lines.append("}")
        return "\n".join(lines)
