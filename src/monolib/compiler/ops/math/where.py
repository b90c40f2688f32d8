"""ONNX ``Where`` (9, 16): ``condition ? X : Y`` with multidirectional broadcasting of
all three inputs."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import register
from .elementwise import Elementwise

__all__ = ["Where"]

logger = logging.getLogger(__name__)


@register
class Where(Elementwise):
    """``Where``: selects X where the bool condition holds, else Y.

    Raises
    ------
    ShapeError
        When X and Y have different dtypes or the shapes do not broadcast.
    """

    op_type, since_version = "Where", 9

    def out_dtype(self, node: Node) -> np.dtype:
        x, y = node.inputs[1], node.inputs[2]
        if x.dtype != y.dtype:
            raise ShapeError(f"Where (node {node.name!r}): X is {x.dtype} but Y is {y.dtype}")
        return x.dtype

    def np_fn(self, node: Node, c, x, y):
        return np.where(c.astype(bool), x, y)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return f"({args[0]} ? {args[1]} : {args[2]})"
