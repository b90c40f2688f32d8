"""``EyeLike`` (ONNX 9, 22): a 2-D tensor shaped like the input with ones on diagonal
``k`` (``k > 0`` above the main one) and zeros elsewhere, of type ``dtype`` (default:
the input's). Its values depend on the input's shape only, so it is a constant."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import c_literal, ctype
from .cast import onnx_dtype

__all__ = ["EyeLike"]

logger = logging.getLogger(__name__)


@register
class EyeLike(OpDef):
    """ONNX ``EyeLike`` (9; 22 adds bfloat16 only).

    Raises
    ------
    ShapeError
        An input that is not 2-D.
    UnsupportedOpError
        A ``dtype`` monolib has no type for.
    """

    op_type, since_version = "EyeLike", 9
    also_versions = (22,)
    defaults = {"dtype": None}

    def _dtype(self, node: Node) -> np.dtype:
        dt = self.attr(node, "dtype")
        return onnx_dtype(dt, f"EyeLike (node {node.name!r})") if dt else node.inputs[0].dtype

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if len(x.shape) != 2:
            raise ShapeError(f"EyeLike (node {node.name!r}): input must be 2-D, got {list(x.shape)}")
        return [(x.shape, self._dtype(node))]

    def reference(self, node: Node, inputs):
        r, c = node.inputs[0].shape
        return [np.eye(r, c, k=node.attrs["k"], dtype=self._dtype(node))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        y = node.outputs[0]
        r, c = y.shape
        if y.size == 0:
            return ""
        dt = y.dtype
        k = node.attrs["k"]
        i = ctx.unique("i")
        yp = ctx.ptr(y)
        ct = ctype(dt)
        return (
            f"for (int64_t {i} = 0; {i} < {r * c}; ++{i}) {yp}[{i}] = ({ct}){c_literal(0, dt)};\n"
            f"for (int64_t {i} = {max(0, -k)}; {i} < {r} && {i} + {k} < {c}; ++{i})"
            f" {yp}[{i}*{c} + {i} + {k}] = ({ct}){c_literal(1, dt)};"
        )
