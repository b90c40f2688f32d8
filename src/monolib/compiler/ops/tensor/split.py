"""ONNX ``Split``: version 2/11 (``split`` attribute), 13 (``split`` input) and 18
(``num_outputs``; the last chunk may be smaller). Without sizes the axis is divided
evenly among the outputs."""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import const_ints, contiguous_strides, emit_copy, has_epilogue, normalize_axis

__all__ = ["Split2", "Split13", "Split18"]

logger = logging.getLogger(__name__)


class _Split(OpDef):
    split_input: ClassVar[bool] = False
    defaults = {"num_outputs": None, "split": None}

    def sizes(self, node: Node) -> tuple[int, list[int]]:
        x = node.inputs[0]
        where = f"Split (node {node.name!r})"
        a = normalize_axis(node.attrs["axis"], len(x.shape), where)
        n = x.shape[a]
        split = const_ints(node, 1, "split") if self.split_input else self.attr(node, "split")
        k = len(node.outputs)
        if split:
            sizes = list(split)
        elif self.attr(node, "num_outputs"):
            k = int(node.attrs["num_outputs"])
            chunk = -(-n // k)
            sizes = [min(chunk, max(n - i * chunk, 0)) for i in range(k)]
        else:
            if k == 0 or n % k:
                raise ShapeError(f"{where}: cannot split dim {n} evenly into {k} outputs")
            sizes = [n // k] * k
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ShapeError(f"{where}: split sizes {sizes} do not add up to dim {n}")
        return a, sizes

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        a, sizes = self.sizes(node)
        out = []
        for s in sizes:
            shape = list(x.shape)
            shape[a] = s
            out.append((tuple(shape), x.dtype))
        return out

    def reference(self, node: Node, inputs):
        a, sizes = self.sizes(node)
        cuts = np.cumsum(sizes)[:-1]
        return [np.array(p, order="C") for p in np.split(inputs[0], cuts, axis=a)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        a, sizes = self.sizes(node)
        ist = contiguous_strides(x.shape)
        parts, offset = [], 0
        for k, (y, s) in enumerate(zip(node.outputs, sizes)):
            if y is not None and y.size:
                index = (lambda idx: idx) if k == 0 and has_epilogue(ctx, len(y.shape)) else None
                parts.append(
                    emit_copy(
                        ctx,
                        y.shape,
                        ctx.ptr(y),
                        (contiguous_strides(y.shape), 0),
                        ctx.ptr(x),
                        (ist, offset * ist[a]),
                        index,
                    )
                )
            offset += s
        return "\n".join(parts)


@register
class Split2(_Split):
    """``Split`` 2, 11: sizes from the ``split`` attribute."""

    op_type, since_version = "Split", 2


@register
class Split13(_Split):
    """``Split`` 13: sizes from the optional ``split`` input."""

    op_type, since_version, split_input = "Split", 13, True


@register
class Split18(_Split):
    """``Split`` 18: ``split`` input or the ``num_outputs`` attribute."""

    op_type, since_version, split_input = "Split", 18, True
