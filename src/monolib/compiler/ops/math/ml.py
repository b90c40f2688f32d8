"""Two ``ai.onnx.ml`` (version 1) operators: Binarizer and ArrayFeatureExtractor.

Binarizer: ``Y = X > threshold ? 1 : 0`` in X's type. ArrayFeatureExtractor: the
elements of the last axis of X at the int64 ``indices`` (read at run time; an index out
of range is clamped, C cannot raise): Y ``[..., len(indices)]``, or ``[1,
len(indices)]`` for a 1-D X (ONNX Runtime's and the reference's shape).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal

__all__ = ["ArrayFeatureExtractor", "Binarizer"]

logger = logging.getLogger(__name__)

ML = "ai.onnx.ml"


@register
class Binarizer(OpDef):
    """``Binarizer``: X (float or int) -> 0/1 of the same type and shape."""

    op_type, domain, since_version = "Binarizer", ML, 1

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        return [(tuple(x.shape), x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        return [(x > node.attrs["threshold"]).astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        t = c_literal(node.attrs["threshold"], np.float64)
        return (f"for (int64_t i = 0; i < {x.size}; ++i) "
                f"{ctx.ptr(y)}[i] = (double){ctx.ptr(x)}[i] > {t} ? 1 : 0;")


@register
class ArrayFeatureExtractor(OpDef):
    """``ArrayFeatureExtractor``: X ``[..., N]``, indices (int64, any shape) -> Y
    ``[..., K]`` with K the number of indices.

    Raises
    ------
    ShapeError
        When X is a scalar or has an empty last axis.
    """

    op_type, domain, since_version = "ArrayFeatureExtractor", ML, 1

    def infer(self, node: Node) -> list[OutType]:
        x, idx = node.inputs[0], node.inputs[1]
        if not x.shape or x.shape[-1] == 0:
            raise ShapeError(f"ArrayFeatureExtractor (node {node.name!r}): X {list(x.shape)} "
                             "has no last axis to select from")
        k = int(np.prod(idx.shape, dtype=np.int64))
        return [(((1, k) if len(x.shape) == 1 else (*x.shape[:-1], k)), x.dtype)]

    def reference(self, node: Node, inputs):
        x, idx = inputs
        n = x.shape[-1]
        sel = np.clip(idx.reshape(-1), 0, n - 1)
        return [x[..., sel].reshape(self.infer(node)[0][0])]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
        n, k = x.shape[-1], int(np.prod(idx.shape, dtype=np.int64))
        outer = x.size // n
        if y.size == 0:
            return ""
        return (
            f"for (int64_t o = 0; o < {outer}; ++o)\n"
            f"for (int64_t j = 0; j < {k}; ++j) {{\n"
            f"  int64_t s = {ctx.ptr(idx)}[j]; s = s < 0 ? 0 : (s >= {n} ? {n - 1} : s);\n"
            f"  {ctx.ptr(y)}[o * {k} + j] = {ctx.ptr(x)}[o * {n} + s];\n"
            "}"
        )
