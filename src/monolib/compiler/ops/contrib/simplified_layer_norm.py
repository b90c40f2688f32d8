"""``SimplifiedLayerNormalization``: ONNX Runtime's RMS normalization, the partner of
``com.microsoft.SkipSimplifiedLayerNormalization`` that its transformer optimizer writes
for LLaMA/T5-style models.

ONNX Runtime registers it in the default ONNX domain (version 1; ONNX itself has no
such op, its later ``RMSNormalization`` 23 is the same formula):
``Y = X / sqrt(mean(X^2) + epsilon) * scale`` over the dims from ``axis`` on (default
-1), ``epsilon`` 1e-5, ``stash_type`` 1 (float32 statistics, which float32 meets);
optional output ``inv_std_var`` (float32, ``X.shape[:axis] + [1] * (rank - axis)``).
``scale`` has the normalized dims' elements. The row code is SkipSimplifiedLayer-
Normalization's (``skip_layer_norm.emit_normalized_rows``, reading X's rows in place);
output 0 takes a fused epilogue.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, shape_size
from ...symbolic import same
from ..base import EmitContext, OutType, register
from ..math.elementwise import is_float
from ..tensor.axis import normalize_axis
from ..tensor.flat import FlatEpilogueOp
from .skip_layer_norm import emit_normalized_rows, normalize_rows

__all__ = ["SimplifiedLayerNormalization"]

logger = logging.getLogger(__name__)


@register
class SimplifiedLayerNormalization(FlatEpilogueOp):
    """ONNX Runtime's ``SimplifiedLayerNormalization`` (default domain, 1); float.

    Raises
    ------
    ShapeError
        An axis out of range, or a scale without the normalized dims' element count.
    UnsupportedOpError
        Non-float X.
    """

    op_type, since_version = "SimplifiedLayerNormalization", 1
    defaults = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def _axis(self, node: Node) -> int:
        where = f"SimplifiedLayerNormalization (node {node.name!r})"
        return normalize_axis(self.attr(node, "axis"), len(node.inputs[0].shape), where)

    def infer(self, node: Node) -> list[OutType]:
        x, scale = node.inputs[0], node.inputs[1]
        where = f"SimplifiedLayerNormalization (node {node.name!r})"
        if not is_float(x.dtype):
            raise UnsupportedOpError(f"{where} takes floats, got {x.dtype}")
        a = self._axis(node)
        if not same(scale.size, shape_size(x.shape[a:])):
            raise ShapeError(f"{where}: scale {list(scale.shape)} does not fit dims {list(x.shape[a:])}")
        stat = tuple(x.shape[:a]) + (1,) * (len(x.shape) - a)
        types = [(x.shape, x.dtype), (stat, np.dtype(np.float32))]
        return types[: max(len(node.outputs), 1)]

    def reference(self, node: Node, inputs):
        x, scale = inputs[0], inputs[1]
        a = self._axis(node)
        rows = (math.prod(x.shape[:a]), math.prod(x.shape[a:]))
        y, _, inv = normalize_rows(x.reshape(rows), scale.reshape(-1), None,
                                   float(self.attr(node, "epsilon")), True)
        stat = x.shape[:a] + (1,) * (x.ndim - a)
        return [y.reshape(x.shape), inv.reshape(stat)][: max(len(node.outputs), 1)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        if x.size == 0:
            return ""
        a = self._axis(node)
        inv = node.outputs[1] if len(node.outputs) > 1 else None
        return emit_normalized_rows(
            ctx, node, shape_size(x.shape[:a]), shape_size(x.shape[a:]), "", None, node.inputs[1],
            None, (None, inv), float(self.attr(node, "epsilon")), True, source=x,
        )
