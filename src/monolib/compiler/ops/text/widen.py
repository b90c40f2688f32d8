"""``monolib.text::StringWiden``: a string tensor copied into wider slots.

The frontend inserts it where an ONNX op takes several string inputs of one type
(Where's X and Y, Concat's inputs, ScatterND's data and updates...): monolib's string
type carries a width, so inputs of different widths are first made the widest one
(``frontend/strings.py``). A constant input is widened at compile time (it folds).
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ._common import TEXT_DOMAIN, bytes_ptr, require_strings, string_dtype, width

__all__ = ["StringWiden"]

logger = logging.getLogger(__name__)


@register
class StringWiden(OpDef):
    """X ``S<a>`` -> Y ``S<width>`` (``width >= a``), the same strings, NUL padded.

    Raises
    ------
    ShapeError
        X is not a string tensor.
    """

    op_type, domain, since_version = "StringWiden", TEXT_DOMAIN, 1

    def infer(self, node: Node) -> list[OutType]:
        require_strings(node, (0,))
        x = node.inputs[0]
        return [(tuple(x.shape), string_dtype(max(int(node.attrs["width"]), width(x))))]

    def reference(self, node: Node, inputs):
        return [np.asarray(inputs[0]).astype(node.outputs[0].dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        a, b = width(x), width(y)
        return (f"for (int64_t i = 0; i < {x.size}; ++i) {{\n"
                f"memcpy({bytes_ptr(ctx, y, const=False)} + i * {b}, "
                f"{bytes_ptr(ctx, x)} + i * {a}, {a});\n"
                f"memset({bytes_ptr(ctx, y, const=False)} + i * {b} + {a}, 0, {b - a});\n}}")
