"""``ConstantOfShape`` of a run-time ``input`` shape (issue 13; ONNX operator spec
"ConstantOfShape" 9, 20, 23): ``shape.ConstantOfShape`` delegates here when its input
is not a compile-time constant.

Every output dim is a computed symbol; the sizes have no bound of their own, so the
user gives ``max_sizes={"node": N}`` (:mod:`.bounded`): the product of the dims is at
most ``N`` (the element count), the memory planned. The kernel reads the shape, checks
it (a negative dim or more than ``N`` elements sets ``ml_status``: ``monolib_run``
fails naming the node), writes the dims and fills the elements.
"""

from __future__ import annotations

import logging

from ....errors import ShapeError
from ...ir import Node
from ...symbolic import Dim
from ..base import EmitContext
from .bounded import bounded_dims, check_sizes, require_bound

__all__ = ["emit", "out_shape"]

logger = logging.getLogger(__name__)


def out_shape(node: Node) -> tuple:
    """The output shape: one computed dim per entry of the 1-D ``input``.

    Raises
    ------
    UnsupportedOpError
        No ``max_sizes`` bound for the node.
    ShapeError
        ``input`` not 1-D of a static length.
    """
    bound = require_bound(node, "input 'input' (the shape)")
    v = node.inputs[0]
    if len(v.shape) != 1 or isinstance(v.shape[0], Dim):
        raise ShapeError(f"ConstantOfShape (node {node.name!r}): a run-time shape must be 1-D "
                         f"with a static length, got {list(v.shape)}")
    rank = int(v.shape[0])
    return bounded_dims(node, range(rank), (1,) * rank, bound)


def emit(node: Node, ctx: EmitContext, value: str) -> str:
    """C: read the shape, check it, write the dims, fill with the C literal ``value``."""
    y = node.outputs[0]
    bound = require_bound(node, "input 'input' (the shape)")
    dims = [ctx.unique("d") for _ in y.shape]
    lines = ["{"]
    lines += [f"  int64_t {d} = (int64_t){ctx.ptr(node.inputs[0])}[{i}];"
              for i, d in enumerate(dims)]
    lines.append(check_sizes(ctx, node, dims, bound))
    lines += [f"  {ctx.set_symbol(s, d)}" for s, d in zip(y.shape, dims) if isinstance(s, Dim)]
    n, i = ctx.unique("n"), ctx.unique("i")
    total = " * ".join(dims) or "1"
    lines += [f"  int64_t {n} = {total};",
              f"  for (int64_t {i} = 0; {i} < {n}; ++{i}) {ctx.ptr(y)}[{i}] = {value};", "}"]
    return "\n".join(line for line in lines if line)
