"""``CumProd`` (ONNX 26): running products along the constant scalar ``axis`` input;
``exclusive=1`` starts from 1 (each output excludes its own element), ``reverse=1``
multiplies from the end. Same layout and loop structure as :mod:`.cumsum`."""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ..base import register
from .cumsum import CumSum

__all__ = ["CumProd"]

logger = logging.getLogger(__name__)


@register
class CumProd(CumSum):
    """``CumProd`` 26 (the axis checks of :class:`CumSum`).

    Raises
    ------
    ShapeError
        When ``axis`` is not a constant in range.
    """

    op_type, since_version = "CumProd", 26
    combine, identity = "*=", 1  # CumSum's emitter, multiplying

    def reference(self, node: Node, inputs):
        x = inputs[0]
        a = self._axis(node)
        v = np.flip(x, a) if node.attrs["reverse"] else x
        if node.attrs["exclusive"]:
            ones = np.ones_like(np.take(v, [0], axis=a))
            v = np.concatenate([ones, np.delete(v, -1, axis=a)], axis=a) if v.shape[a] else v
        out = np.cumprod(v, axis=a, dtype=x.dtype)
        if node.attrs["reverse"]:
            out = np.flip(out, a)
        return [np.array(out, dtype=x.dtype, order="C")]
