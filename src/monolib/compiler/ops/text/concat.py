"""StringConcat (ONNX 20) and Equal on strings (imported as ``monolib.text::StringEqual``,
``frontend/strings.py``): elementwise over broadcast string tensors."""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ..tensor.loops import broadcast_shape
from ._common import TEXT_DOMAIN, broadcast_loops, bytes_ptr, require_strings, width

__all__ = ["StringConcat", "StringEqual"]

logger = logging.getLogger(__name__)


@register
class StringConcat(OpDef):
    """ONNX ``StringConcat`` (20): ``Y = X + Y`` element by element (broadcast).

    X ``S<a>``, Y ``S<b>`` -> ``S<a + b>``, the broadcast shape. UTF-8 concatenates
    byte-wise, so no character is split.

    Raises
    ------
    ShapeError
        An input that is not a string tensor, or shapes that do not broadcast.
    """

    op_type, since_version = "StringConcat", 20

    def infer(self, node: Node) -> list[OutType]:
        require_strings(node, (0, 1))
        x, y = node.inputs
        shape = broadcast_shape(x.shape, y.shape, where=f"StringConcat {node.name!r}")
        return [(shape, np.dtype(f"S{width(x) + width(y)}"))]

    def reference(self, node: Node, inputs):
        x, y = inputs
        return [np.char.add(x, y).astype(node.outputs[0].dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ctx.include("text.h")
        x, y = node.inputs
        out = node.outputs[0]
        wx, wy, wo = width(x), width(y), width(out)
        px, py, po = bytes_ptr(ctx, x), bytes_ptr(ctx, y), bytes_ptr(ctx, out, const=False)

        def body(o: str, idx: list[str]) -> str:
            return (f"const uint8_t* a = {px} + ({idx[0]}) * {wx};\n"
                    f"const uint8_t* b = {py} + ({idx[1]}) * {wy};\n"
                    f"uint8_t* r = {po} + ({o}) * {wo};\n"
                    f"int64_t la = ml_str_len(a, {wx}), lb = ml_str_len(b, {wy});\n"
                    "memcpy(r, a, (size_t)la);\n"
                    f"ml_str_put(r + la, {wo} - la, b, lb);")

        return broadcast_loops(ctx, node, body)


@register
class StringEqual(OpDef):
    """ONNX ``Equal`` (19) on string tensors: ``A == B`` element by element
    (broadcast), byte-wise equal UTF-8 -> ``bool``. The frontend imports an Equal that
    reads strings as this op (the numeric Equal compares numbers).

    Raises
    ------
    ShapeError
        An input that is not a string tensor, or shapes that do not broadcast.
    """

    op_type, domain, since_version = "StringEqual", TEXT_DOMAIN, 1

    def infer(self, node: Node) -> list[OutType]:
        require_strings(node, (0, 1))
        a, b = node.inputs
        return [(broadcast_shape(a.shape, b.shape, where=f"Equal {node.name!r}"),
                 np.dtype(bool))]

    def reference(self, node: Node, inputs):
        a, b = inputs
        return [np.equal(a, b)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ctx.include("text.h")
        a, b = node.inputs
        wa, wb = width(a), width(b)
        pa, pb = bytes_ptr(ctx, a), bytes_ptr(ctx, b)
        po = bytes_ptr(ctx, node.outputs[0], const=False)

        def body(o: str, idx: list[str]) -> str:
            return (f"const uint8_t* a = {pa} + ({idx[0]}) * {wa};\n"
                    f"const uint8_t* b = {pb} + ({idx[1]}) * {wb};\n"
                    f"int64_t la = ml_str_len(a, {wa}), lb = ml_str_len(b, {wb});\n"
                    f"{po}[{o}] = (uint8_t)(la == lb && memcmp(a, b, (size_t)la) == 0);")

        return broadcast_loops(ctx, node, body)
