"""Views that keep the data as it is: Reshape, Flatten, Squeeze, Unsqueeze, Identity.

These are ``alias`` ops: the output shares input 0's storage (row-major data does not
move), so ``emit`` writes no code. Semantics follow the ONNX specs: Reshape 5 and 14
(``0`` copies the input dim unless ``allowzero=1``; one ``-1`` is inferred), Flatten
1..13, Squeeze/Unsqueeze 1..11 (``axes`` attribute) and 13+ (``axes`` input).
"""

from __future__ import annotations

import logging
import math
from typing import ClassVar

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ...symbolic import is_dim, same
from ..base import EmitContext, OpDef, OutType, register
from . import reshape_data
from .loops import const_ints, normalize_axis

__all__ = [
    "Flatten",
    "Identity",
    "Reshape",
    "Squeeze1",
    "Squeeze13",
    "Unsqueeze1",
    "Unsqueeze13",
    "reshape_shape",
]

logger = logging.getLogger(__name__)


def reshape_shape(in_shape, target, allowzero: bool, where: str) -> tuple[int, ...]:
    """The output shape of ONNX Reshape of ``in_shape`` to ``target``.

    Raises
    ------
    ShapeError
        For more than one ``-1``, a ``0`` beyond the input rank, or a size mismatch.
    """
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ShapeError(
                    f"{where}: 0 at position {i} but the input has rank {len(in_shape)}"
                )
            d = in_shape[i]
        out.append(d if is_dim(d) else int(d))
    # math.prod keeps run-time dims symbolic: the -1 becomes their quotient
    size = math.prod(in_shape)
    infer = [i for i, d in enumerate(out) if not is_dim(d) and d == -1]
    if len(infer) > 1 or any(not is_dim(d) and d < -1 for d in out):
        raise ShapeError(f"{where}: invalid target shape {list(target)}")
    if infer:
        known = math.prod(d for i, d in enumerate(out) if i != infer[0])
        if same(known, 0) or not same(size % known, 0):
            raise ShapeError(f"{where}: cannot reshape {list(in_shape)} to {list(target)}")
        out[infer[0]] = size // known
    if not same(math.prod(out), size):
        raise ShapeError(
            f"{where}: cannot reshape {list(in_shape)} ({size} elements) to {list(target)}"
        )
    return tuple(out)


class _View(OpDef):
    """An op whose output is input 0 with another shape."""

    alias: ClassVar[bool] = True

    def out_shape(self, node: Node) -> tuple[int, ...]:
        raise NotImplementedError

    def infer(self, node: Node) -> list[OutType]:
        return [(self.out_shape(node), node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        return [np.array(inputs[0]).reshape(self.out_shape(node))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        """No code: the output is the input's storage (``alias``)."""
        return ""

    def where(self, node: Node) -> str:
        return f"{self.op_type} (node {node.name!r})"


@register
class Reshape(_View):
    """ONNX ``Reshape`` 5 and 14. A constant ``shape`` (or one computed from run-time
    dims) makes a free view. A ``shape`` read at run time (issue 13): every output dim
    is a computed symbol bounded by the element count, and the node runs code
    (:mod:`.reshape_data`): it resolves ``0``/``-1``, writes the dims, copies the data."""

    op_type, since_version = "Reshape", 5
    also_versions = (23, 24, 25)  # new element types only
    defaults = {"allowzero": 0}

    def out_shape(self, node: Node):
        if node.input(1) is not None and node.input(1).const is None:
            return reshape_data.out_shape(node)
        target = const_ints(node, 1, "shape")
        return reshape_shape(
            node.inputs[0].shape, target, bool(self.attr(node, "allowzero")), self.where(node)
        )

    def emit(self, node: Node, ctx: EmitContext) -> str:
        """No code for a view; a run-time ``shape``'s dims and copy otherwise."""
        if node.input(1) is not None and node.input(1).const is None:
            return reshape_data.emit(node, ctx, bool(self.attr(node, "allowzero")))
        return ""


@register
class Flatten(_View):
    """ONNX ``Flatten``: ``[prod(shape[:axis]), prod(shape[axis:])]``."""

    op_type, since_version = "Flatten", 1
    also_versions = (23, 24, 25)  # new element types only

    def out_shape(self, node: Node):
        shape = node.inputs[0].shape
        a = node.attrs["axis"]
        a = a + len(shape) if a < 0 else a
        if not 0 <= a <= len(shape):
            raise ShapeError(
                f"{self.where(node)}: axis {node.attrs['axis']} out of range for rank {len(shape)}"
            )
        return (math.prod(shape[:a]), math.prod(shape[a:]))


class _Squeeze(_View):
    axes_input: ClassVar[bool] = False
    defaults = {"axes": None}

    def axes(self, node: Node) -> list[int] | None:
        if self.axes_input:
            return const_ints(node, 1, "axes")
        return self.attr(node, "axes")

    def out_shape(self, node: Node):
        shape = node.inputs[0].shape
        axes = self.axes(node)
        if axes is None:
            return tuple(d for d in shape if d != 1)
        axes = {normalize_axis(a, len(shape), self.where(node)) for a in axes}
        for a in axes:
            if shape[a] != 1:
                raise ShapeError(f"{self.where(node)}: cannot squeeze dim {a} of size {shape[a]}")
        return tuple(d for i, d in enumerate(shape) if i not in axes)


@register
class Squeeze1(_Squeeze):
    """ONNX ``Squeeze`` 1, 11: ``axes`` attribute (all size-1 dims when absent)."""

    op_type, since_version = "Squeeze", 1


@register
class Squeeze13(_Squeeze):
    """ONNX ``Squeeze`` 13, 21: ``axes`` input."""

    op_type, since_version, axes_input = "Squeeze", 13, True
    also_versions = (23, 24, 25)  # new element types only


class _Unsqueeze(_Squeeze):
    def out_shape(self, node: Node):
        shape = node.inputs[0].shape
        axes = self.axes(node)
        if not axes:
            raise ShapeError(f"{self.where(node)}: axes is required")
        rank = len(shape) + len(axes)
        norm = sorted(normalize_axis(a, rank, self.where(node)) for a in axes)
        if len(set(norm)) != len(norm):
            raise ShapeError(f"{self.where(node)}: repeated axes {axes}")
        out, it = [], iter(shape)
        for i in range(rank):
            out.append(1 if i in norm else next(it))
        return tuple(out)


@register
class Unsqueeze1(_Unsqueeze):
    """ONNX ``Unsqueeze`` 1, 11: ``axes`` attribute (positions in the output)."""

    op_type, since_version = "Unsqueeze", 1


@register
class Unsqueeze13(_Unsqueeze):
    """ONNX ``Unsqueeze`` 13, 21: ``axes`` input."""

    op_type, since_version, axes_input = "Unsqueeze", 13, True
    also_versions = (23, 24, 25)  # new element types only


@register
class Identity(_View):
    """ONNX ``Identity``: the input itself (the frontend usually removes it)."""

    op_type, since_version = "Identity", 1
    also_versions = (23, 24, 25)  # new element types only

    def out_shape(self, node: Node):
        return node.inputs[0].shape
