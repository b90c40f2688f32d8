"""DynamicQuantizeLinear (11): float32 to uint8 with a scale and zero point computed
from the data.

ONNX spec (and its reference evaluator, in float32): ``min = minimum(0, min(x))``,
``max = maximum(0, max(x))``, ``y_scale = (max - min) / 255`` (``1 / 255`` when
``max == min``: the reference evaluator's choice, ONNX Runtime takes ``1``; either way
every ``y`` is then 0), ``y_zero_point = round(saturate(0 - min / y_scale))``,
``y = saturate(round(x / y_scale) + y_zero_point)``, rounding half to even. NaN inputs
are ignored by min/max (as ``fminf``/``fmaxf``) and quantize to 0.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register

__all__ = ["DynamicQuantizeLinear"]

logger = logging.getLogger(__name__)


@register
class DynamicQuantizeLinear(OpDef):
    """ONNX ``DynamicQuantizeLinear``: x float32 (any shape) -> y uint8 (same shape),
    y_scale float32 ``[]``, y_zero_point uint8 ``[]``."""

    op_type, since_version = "DynamicQuantizeLinear", 11
    foldable = True

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if x.dtype != np.float32:
            raise UnsupportedOpError(
                f"DynamicQuantizeLinear node {node.name!r}: x is {x.dtype}; only float32 is supported"
            )
        return [(x.shape, np.dtype(np.uint8)), ((), np.dtype(np.float32)), ((), np.dtype(np.uint8))]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0].astype(np.float32)
        finite = x[~np.isnan(x)]
        mx = np.float32(max(0.0, float(finite.max()) if finite.size else 0.0))
        mn = np.float32(min(0.0, float(finite.min()) if finite.size else 0.0))
        scale = np.float32(1.0 if mx == mn else mx - mn) / np.float32(255)
        zp = np.rint(np.clip(np.float32(0) - mn / scale, 0, 255))
        y = np.nan_to_num(np.clip(np.rint(x / scale) + zp, 0, 255), nan=0.0).astype(np.uint8)
        return [y, np.array(scale, np.float32), np.array(zp, np.uint8)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, (y, ys, yz) = node.inputs[0], node.outputs
        n = x.size
        xp, yp = ctx.ptr(x), ctx.ptr(y)
        i = ctx.unique("i")
        return (
            "{\n"
            "  float mn_ = 0.0f, mx_ = 0.0f;\n"
            f"  for (int64_t {i} = 0; {i} < {n}; ++{i}) {{ mn_ = fminf(mn_, {xp}[{i}]); "
            f"mx_ = fmaxf(mx_, {xp}[{i}]); }}\n"
            "  float s_ = (mx_ == mn_ ? 1.0f : mx_ - mn_) / 255.0f;\n"
            "  float z_ = 0.0f - mn_ / s_;\n"
            "  z_ = nearbyintf(z_ < 0.0f ? 0.0f : (z_ > 255.0f ? 255.0f : z_));\n"
            f"  {ctx.ptr(ys)}[0] = s_;\n"
            f"  {ctx.ptr(yz)}[0] = (uint8_t)z_;\n"
            f"  for (int64_t {i} = 0; {i} < {n}; ++{i}) {{\n"
            f"    float q_ = nearbyintf({xp}[{i}] / s_) + z_;\n"
            f"    {yp}[{i}] = (uint8_t)(q_ >= 255.0f ? 255.0f : (q_ > 0.0f ? q_ : 0.0f)); /* NaN -> 0 */\n"
            "  }\n"
            "}"
        )
