"""ONNX ``BitCast`` (26): the bytes of X read as another element type of the same
width (little endian, as the spec requires and every monolib target is); the shape
is unchanged."""

from __future__ import annotations

import logging

import numpy as np
import onnx

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ...backends.cstyle import ctype

__all__ = ["BitCast"]

logger = logging.getLogger(__name__)


def _target(node: Node) -> np.dtype:
    """The dtype named by ``to``; checks the widths match."""
    x = node.inputs[0]
    try:
        to = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])))
    except (KeyError, TypeError, ValueError):
        raise UnsupportedOpError(f"BitCast (node {node.name!r}): 'to' = "
                                 f"{node.attrs.get('to')!r} is not an element type") from None
    ctype(to)  # refuses types without a C type
    if to.itemsize != x.dtype.itemsize:
        raise ShapeError(f"BitCast (node {node.name!r}): {x.dtype} ({x.dtype.itemsize * 8} "
                         f"bits) to {to} ({to.itemsize * 8} bits): widths differ")
    return to


@register
class BitCast(OpDef):
    """``BitCast``: X of any C type -> the same bytes as dtype ``to`` (same width).

    Raises
    ------
    ShapeError
        When the widths of the two types differ.
    UnsupportedOpError
        When ``to`` has no C type in monolib.
    """

    op_type, since_version = "BitCast", 26

    def infer(self, node: Node) -> list[OutType]:
        return [(tuple(node.inputs[0].shape), _target(node))]

    def reference(self, node: Node, inputs):
        shape = np.shape(inputs[0])
        x = np.ascontiguousarray(inputs[0]).reshape(-1)  # 0-d arrays cannot change dtype
        to = _target(node)
        if to == np.bool_:  # any nonzero byte is true
            return [(x.view(np.uint8) != 0).reshape(shape)]
        return [x.view(to).reshape(shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        if y.dtype == np.bool_:
            return (f"for (int64_t i = 0; i < {x.size}; ++i) {ctx.ptr(y)}[i] = "
                    f"((const uint8_t*){ctx.ptr(x)})[i] != 0;")
        return f"memcpy({ctx.ptr(y)}, {ctx.ptr(x)}, {x.size * x.dtype.itemsize});"
