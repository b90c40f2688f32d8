"""Traits of elementwise ops shared across the math families, each a base class that
states one fact once: the inputs share one type (:class:`SameDtype`), the reference is
a binary NumPy ufunc (:class:`UfuncBinary`), the output is bool (:class:`BoolOutput`)."""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ..base import OutType
from .elementwise import Elementwise, check_same_dtype

__all__ = ["BoolOutput", "SameDtype", "UfuncBinary"]

logger = logging.getLogger(__name__)


class SameDtype(Elementwise):
    """All inputs have one element type (the spec's single type constraint ``T``).

    Raises
    ------
    ShapeError
        From ``infer``, when the input types differ (``check_same_dtype``).
    """

    def infer(self, node: Node) -> list[OutType]:
        check_same_dtype(node)
        return super().infer(node)


class UfuncBinary(Elementwise):
    """``y = ufunc(a, b)`` in the reference; subclasses set ``ufunc`` (and the C
    operator ``sym`` their ``c_expr`` writes)."""

    ufunc = staticmethod(np.add)

    def np_fn(self, node: Node, a, b):
        return self.ufunc(a, b)


class BoolOutput(Elementwise):
    """The output is ``bool`` (``uint8_t`` 0/1 in C) whatever the input type."""

    def out_dtype(self, node: Node) -> np.dtype:
        return np.dtype(bool)
