"""ONNX ``Clip``: version 6 (``min``/``max`` attributes) and 11+ (optional ``min`` and
``max`` scalar inputs; 12 adds integer types).

``y = min(max(x, lo), hi)``: when ``lo > hi`` every element becomes ``hi``, as the
spec (13) states and ``np.clip`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ...ir import Node
from ..base import register
from ...backends.cstyle import c_literal
from .elementwise import Elementwise, at_least, at_most, bind

__all__ = ["Clip6", "Clip11"]

logger = logging.getLogger(__name__)


def _clamp(x: str, lo: str, hi: str, dt) -> str:
    """C ``min(max(x, lo), hi)`` with ``x`` evaluated once; empty bounds are skipped."""

    def body(t: str) -> str:
        e = t
        if lo:
            e = at_least(e, lo, dt)
        if hi:
            e = bind([e], [dt], lambda u: at_most(u, hi, dt))
        return e

    return bind([x], [dt], body)


@register
class Clip6(Elementwise):
    """``Clip`` 6: bounds from the ``min``/``max`` float attributes."""

    op_type, since_version = "Clip", 6
    float_only = True

    def np_fn(self, node: Node, x):
        lo = np.asarray(node.attrs["min"], dtype=x.dtype)
        hi = np.asarray(node.attrs["max"], dtype=x.dtype)
        return np.minimum(np.maximum(x, lo), hi)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        dt = node.outputs[0].dtype
        lo = c_literal(node.attrs["min"], dt)
        hi = c_literal(node.attrs["max"], dt)
        return _clamp(args[0], lo, hi, dt)


@register
class Clip11(Elementwise):
    """``Clip`` 11, 12, 13: bounds from the optional scalar inputs ``min`` and ``max``
    (an omitted bound does not clip)."""

    op_type, since_version = "Clip", 11

    def np_fn(self, node: Node, x, lo=None, hi=None):
        if lo is not None:
            x = np.maximum(x, lo.astype(x.dtype))
        if hi is not None:
            x = np.minimum(x, hi.astype(x.dtype))
        return x

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        args = list(args) + [""] * (3 - len(args))
        return _clamp(args[0], args[1], args[2], node.outputs[0].dtype)
