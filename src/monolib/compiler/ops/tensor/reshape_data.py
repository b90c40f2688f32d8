"""``Reshape`` to a shape read at run time (issue 13; ONNX operator spec "Reshape" 5,
14): ``shape.Reshape`` delegates here when its ``shape`` input is not a compile-time
constant.

Every output dim is a computed symbol bounded by the input's element count at its upper
bounds (``0`` copies the input dim unless ``allowzero``; one ``-1`` takes what is left).
The kernel reads the shape, resolves ``0`` and ``-1``, writes the dims for the ops after
it and copies the data (the output cannot be a free view: its shape is written by code).
"""

from __future__ import annotations

import logging

from ....errors import ShapeError
from ...computed_bounds import bound_jointly
from ...ir import Node, shape_size
from ...symbolic import Dim
from ..base import EmitContext
from ._computed import count_dim, upper

__all__ = ["emit", "out_shape"]

logger = logging.getLogger(__name__)


def out_shape(node: Node) -> tuple:
    """The output shape: one computed dim per entry of the 1-D ``shape`` input.

    Raises
    ------
    ShapeError
        When ``shape`` is not 1-D of a compile-time length.
    """
    target = node.inputs[1]
    if len(target.shape) != 1 or isinstance(target.shape[0], Dim):
        raise ShapeError(f"Reshape (node {node.name!r}): a run-time shape input must be 1-D "
                         f"with a static length, got {list(target.shape)}")
    numel = upper(shape_size(node.inputs[0].shape))
    dims = tuple(count_dim(node, 0, i, f"d{i}", numel or 1) for i in range(target.shape[0]))
    bound_jointly(dims, numel)  # each dim <= numel, and so is their product
    return dims


def emit(node: Node, ctx: EmitContext, allowzero: bool) -> str:
    """C: read the shape, resolve ``0``/``-1``, write the dims, copy the elements."""
    x, target = node.inputs[0], node.inputs[1]
    y = node.outputs[0]
    rank = len(y.shape)
    numel = shape_size(x.shape)
    dims, known = ctx.unique("dims"), ctx.unique("known")
    lines = ["{", f"  int64_t {dims}[{max(rank, 1)}]; int64_t {known} = 1; int infer = -1;"]
    for i in range(rank):
        copy = (f" if ({dims}[{i}] == 0) {dims}[{i}] = {x.shape[i]};"
                if not allowzero and i < len(x.shape) else "")
        lines.append(f"  {dims}[{i}] = (int64_t){ctx.ptr(target)}[{i}];{copy}")
        lines.append(f"  if ({dims}[{i}] < 0) infer = {i}; else {known} *= {dims}[{i}];")
    lines.append(f"  if (infer >= 0) {dims}[infer] = {known} ? ({numel}) / {known} : 0;")
    for i, d in enumerate(y.shape):
        if isinstance(d, Dim):
            lines.append(f"  {ctx.set_symbol(d, f'{dims}[{i}]')}")
    lines += [f"  memcpy({ctx.ptr(y)}, {ctx.ptr(x)}, ({numel}) * {x.dtype.itemsize});", "}"]
    return "\n".join(lines)
