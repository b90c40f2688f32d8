"""One axis of an op: the ``axis`` attribute checked against input 0's rank, and a
shape split around an axis into the ``[outer, n, inner]`` view that the
gather, scan and arg-reduction loops walk."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...ir import Node, shape_size
from .loops import normalize_axis

__all__ = ["attr_axis", "split_at_axis"]

logger = logging.getLogger(__name__)


def attr_axis(node: Node) -> int:
    """``node.attrs["axis"]`` made non-negative for the rank of input 0.

    Raises
    ------
    ShapeError
        When the axis is out of range (the message names the op and the node).
    """
    where = f"{node.op_type} (node {node.name!r})"
    return normalize_axis(node.attrs["axis"], len(node.inputs[0].shape), where)


def split_at_axis(shape: Sequence[int], a: int) -> tuple[int, int, int]:
    """``(outer, n, inner)``: the elements before axis ``a`` (non-negative), its size, and
    the elements after it; element ``k`` of column ``(o, i)`` is at flat offset
    ``o*n*inner + k*inner + i``."""
    # run-time dims stay symbolic (shape_size), so do outer/inner sizes made of them
    return shape_size(shape[:a]), shape[a], shape_size(shape[a + 1 :])
