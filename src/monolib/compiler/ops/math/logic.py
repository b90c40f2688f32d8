"""Comparisons and boolean logic: Equal, Less, Greater, LessOrEqual, GreaterOrEqual,
Not, And, Or, Xor (ONNX specs 7..19). Outputs are ``bool`` (stored as ``uint8_t``
0/1 in C)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ...ir import Node
from ..base import register
from .traits import BoolOutput, SameDtype, UfuncBinary

__all__ = ["And", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Not", "Or", "Xor"]

logger = logging.getLogger(__name__)


class _Compare(SameDtype, UfuncBinary, BoolOutput):
    sym = "=="
    ufunc = staticmethod(np.equal)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return f"((uint8_t)({args[0]} {self.sym} {args[1]}))"


@register
class Equal(_Compare):
    """ONNX ``Equal`` (7, 11, 13, 19): ``A == B``."""

    op_type, since_version = "Equal", 7


@register
class Less(_Compare):
    """ONNX ``Less`` (7, 9, 13): ``A < B``."""

    op_type, since_version, sym = "Less", 7, "<"
    ufunc = staticmethod(np.less)


@register
class Greater(_Compare):
    """ONNX ``Greater`` (7, 9, 13): ``A > B``."""

    op_type, since_version, sym = "Greater", 7, ">"
    ufunc = staticmethod(np.greater)


@register
class LessOrEqual(_Compare):
    """ONNX ``LessOrEqual`` (12, 16): ``A <= B``."""

    op_type, since_version, sym = "LessOrEqual", 12, "<="
    ufunc = staticmethod(np.less_equal)


@register
class GreaterOrEqual(_Compare):
    """ONNX ``GreaterOrEqual`` (12, 16): ``A >= B``."""

    op_type, since_version, sym = "GreaterOrEqual", 12, ">="
    ufunc = staticmethod(np.greater_equal)


@register
class And(_Compare):
    """ONNX ``And`` (7): logical and of bool tensors."""

    op_type, since_version, sym = "And", 7, "&&"
    ufunc = staticmethod(np.logical_and)


@register
class Or(_Compare):
    """ONNX ``Or`` (7): logical or of bool tensors."""

    op_type, since_version, sym = "Or", 7, "||"
    ufunc = staticmethod(np.logical_or)


@register
class Xor(_Compare):
    """ONNX ``Xor`` (7): logical exclusive or of bool tensors."""

    op_type, since_version = "Xor", 7
    ufunc = staticmethod(np.logical_xor)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return f"((uint8_t)((({args[0]}) != 0) != (({args[1]}) != 0)))"


@register
class Not(BoolOutput):
    """ONNX ``Not`` (1): logical negation of a bool tensor."""

    op_type, since_version = "Not", 1

    def np_fn(self, node: Node, x):
        return np.logical_not(x)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return f"((uint8_t)!({args[0]}))"
