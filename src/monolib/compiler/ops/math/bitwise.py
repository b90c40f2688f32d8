"""Bitwise integer ops: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot (18) and
BitShift (11; ``direction`` "LEFT"/"RIGHT", unsigned types only per the spec)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ....errors import UnsupportedOpError
from ...ir import Node
from ..base import register
from ...backends.cstyle import ctype
from .elementwise import Elementwise, cast_expr, check_same_dtype
from .traits import UfuncBinary

__all__ = ["BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor"]

logger = logging.getLogger(__name__)


class _IntOnly(Elementwise):
    def infer(self, node: Node):
        check_same_dtype(node)
        dt = node.inputs[0].dtype
        if dt.kind not in "iu":
            raise UnsupportedOpError(
                f"{self.op_type} (node {node.name!r}) takes integers, got {dt}"
            )
        return super().infer(node)


class _Bitwise(_IntOnly, UfuncBinary):
    sym = "&"
    ufunc = staticmethod(np.bitwise_and)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return cast_expr(f"{args[0]} {self.sym} {args[1]}", node.outputs[0].dtype)


@register
class BitwiseAnd(_Bitwise):
    """ONNX ``BitwiseAnd`` (18)."""

    op_type, since_version = "BitwiseAnd", 18


@register
class BitwiseOr(_Bitwise):
    """ONNX ``BitwiseOr`` (18)."""

    op_type, since_version, sym = "BitwiseOr", 18, "|"
    ufunc = staticmethod(np.bitwise_or)


@register
class BitwiseXor(_Bitwise):
    """ONNX ``BitwiseXor`` (18)."""

    op_type, since_version, sym = "BitwiseXor", 18, "^"
    ufunc = staticmethod(np.bitwise_xor)


@register
class BitwiseNot(_IntOnly):
    """ONNX ``BitwiseNot`` (18)."""

    op_type, since_version = "BitwiseNot", 18

    def np_fn(self, node: Node, x):
        return np.invert(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return cast_expr(f"~{args[0]}", node.outputs[0].dtype)


@register
class BitShift(_IntOnly):
    """ONNX ``BitShift`` (11): ``x << y`` or ``x >> y``; a shift by the type's width or
    more gives 0 (-1 for a negative signed value shifted right), where C leaves it
    undefined."""

    op_type, since_version = "BitShift", 11
    # 28 adds signed types (arithmetic right shift) and defines negative or too
    # large shifts as the sign fill: both handled below
    also_versions = (28,)

    def np_fn(self, node: Node, x, y):
        bits = x.dtype.itemsize * 8
        left = node.attrs["direction"] == "LEFT"
        big = (y >= bits) | (y < 0)  # negative: the sign fill too (opset 28)
        safe = np.where(big, 0, y).astype(x.dtype)
        fn = np.left_shift if left else np.right_shift
        # a shift by the width or more: 0, or -1 for a negative signed value shifted right
        fill = (x < 0).astype(x.dtype) * np.asarray(-1).astype(x.dtype) if not left else 0
        return np.where(big, fill, fn(x, safe)).astype(x.dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        bits = dt.itemsize * 8
        x, y = args
        # out of range: a shift by the width or more, or (signed types) a negative one
        y_big = f"(({y}) >= {bits} || ({y}) < 0)" if dt.kind == "i" else f"({y}) >= {bits}"
        if node.attrs["direction"] == "LEFT":
            # through unsigned: left-shifting a negative signed value is undefined in C
            shifted = (
                f"(({ctype(dt)})((u{ctype(dt)})({x}) << ({y})))"
                if dt.kind == "i"
                else f"(({x}) << ({y}))"
            )
            return cast_expr(f"{y_big} ? 0 : {shifted}", dt)
        big = f"(({x}) < 0 ? -1 : 0)" if dt.kind == "i" else "0"
        return cast_expr(f"{y_big} ? {big} : ({x}) >> ({y})", dt)
