"""``OneHot`` with a run-time ``depth`` (issue 13; ONNX operator spec "OneHot" 9, 11):
``onehot.OneHot`` delegates here when ``depth`` is not a compile-time constant.

The output dim at ``axis`` is ``depth``: a computed symbol with no bound of its own,
so the user gives ``max_sizes={"node": N}`` (:mod:`.bounded`), ``N`` the most ``depth``
can be. The kernel reads ``depth`` (any numeric type, truncated to an integer as ONNX
Runtime does), checks ``1 <= depth <= N`` (else ``ml_status``: ``monolib_run`` fails
naming the node), writes the dim, then walks ``[outer, depth, inner]`` (``outer``,
``inner``: the index dims before and after ``axis``).
"""

from __future__ import annotations

import logging

from ...ir import Node, shape_size
from ...symbolic import Dim
from ..base import EmitContext
from ..control.status import fail_statement
from .bounded import bounded_dims, check_sizes, require_bound

__all__ = ["emit", "out_shape"]

logger = logging.getLogger(__name__)


def out_shape(node: Node, axis: int) -> tuple:
    """The indices' shape with a computed dim ``0..N`` inserted at ``axis``.

    Raises
    ------
    UnsupportedOpError
        No ``max_sizes`` bound for the node.
    """
    bound = require_bound(node, "input 'depth'")
    shape = list(node.inputs[0].shape)
    shape.insert(axis, 1)
    return bounded_dims(node, [axis], shape, bound)


def emit(node: Node, ctx: EmitContext, axis: int) -> str:
    """C: read and check ``depth``, write the dim, fill the output."""
    idx, values, y = node.inputs[0], node.inputs[2], node.outputs[0]
    bound = require_bound(node, "input 'depth'")
    outer = shape_size(idx.shape[:axis])
    inner = shape_size(idx.shape[axis:])
    d, o, p, j, t = (ctx.unique(n) for n in ("depth", "o", "p", "j", "t"))
    vals = ctx.ptr(values)
    lines = [
        "{",
        f"  int64_t {d} = (int64_t){ctx.ptr(node.inputs[1])}[0];",
        f"  if ({d} < 1) {{ {fail_statement(ctx, node, 'depth')} return; }}",
        check_sizes(ctx, node, [d], bound),
    ]
    if isinstance(y.shape[axis], Dim):
        lines.append(f"  {ctx.set_symbol(y.shape[axis], d)}")
    lines += [
        f"  for (int64_t {o} = 0; {o} < (int64_t)({outer}); ++{o})",
        f"    for (int64_t {p} = 0; {p} < {d}; ++{p})",
        f"      for (int64_t {j} = 0; {j} < (int64_t)({inner}); ++{j}) {{",
        f"        int64_t {t} = (int64_t){ctx.ptr(idx)}[{o} * ({inner}) + {j}];",
        f"        if ({t} < 0) {t} += {d};",
        (f"        {ctx.ptr(y)}[({o} * {d} + {p}) * ({inner}) + {j}] = "
         f"{t} == {p} ? {vals}[1] : {vals}[0];"),
        "      }",
        "}",
    ]
    return "\n".join(line for line in lines if line)
