"""DynamicQuantizeLinear (11): float32 to uint8 with a scale and zero point computed
from the data.

ONNX spec (and its reference evaluator, in float32): ``min = minimum(0, min(x))``,
``max = maximum(0, max(x))``, ``y_scale = (max - min) / 255`` (``1 / 255`` when
``max == min``: the reference evaluator's choice, ONNX Runtime takes ``1``; either way
every ``y`` is then 0), ``y_zero_point = round(saturate(0 - min / y_scale))``,
``y = saturate(round(x / y_scale) + y_zero_point)``, rounding half to even. NaN inputs
are ignored by min/max (as ``fminf``/``fmaxf``) and quantize to 0.

Lowering: ``ml_dynamic_quantize`` of ``dql.h``: a vectorised min/max pass, then a
vectorised quantize pass (division by the scale kept, so ``y`` equals ONNX Runtime's),
each split over the thread pool when large.
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
        ctx.include("dql.h")
        return f"ml_dynamic_quantize({ctx.ptr(x)}, {x.size}, {ctx.ptr(y)}, {ctx.ptr(ys)}, {ctx.ptr(yz)});"
