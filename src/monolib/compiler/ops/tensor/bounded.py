"""Data-dependent output sizes bounded by the user (issue 13): a run-time ``Range``,
``Expand``, ``Tile``, ``ConstantOfShape`` or ``OneHot`` whose sizes no compile-time
bound limits compiles with ``compile(max_sizes={"node": N})`` (CLI ``--max-size
node=N``; the frontend records ``N`` as the node's ``_max_size`` attribute).

``N`` bounds the product of the output's data-dependent dims (one such dim: its
length): each is a computed symbol ``0..N`` and the group is capped at ``N`` jointly
(:func:`~...computed_bounds.bound_jointly`), so the output is planned at ``N`` times
its static dims. The kernel checks the sizes it reads against ``N`` before writing
anything; a run past it sets ``ml_status`` (:mod:`..control.status`) and leaves, and
``monolib_run`` fails with an ``ExecutionError`` naming the node.
"""

from __future__ import annotations

import logging

from ....errors import UnsupportedOpError
from ...computed_bounds import bound_jointly
from ...ir import Node
from ..base import EmitContext
from ..control.status import fail_statement
from ._computed import count_dim

__all__ = ["bounded_dims", "check_sizes", "require_bound", "user_bound"]

logger = logging.getLogger(__name__)


def user_bound(node: Node) -> int | None:
    """The user's ``max_sizes`` bound of ``node`` (``None``: none given)."""
    n = node.attrs.get("_max_size")
    return None if n is None else int(n)


def require_bound(node: Node, what: str) -> int:
    """:func:`user_bound`, which must be given.

    Parameters
    ----------
    node : Node
    what : str
        The run-time input(s) setting the sizes, for the message (``"shape"``).

    Raises
    ------
    UnsupportedOpError
        No bound given: the message names the node, the input and the option.
    """
    n = user_bound(node)
    if n is None:
        raise UnsupportedOpError(
            f"{node.op_type} (node {node.name!r}): {what} is a run-time value, so the output "
            "sizes it sets have no upper bound to plan memory for; give one with "
            f"max_sizes={{{node.name!r}: N}} (CLI: --max-size {node.name}=N; N bounds the "
            "product of the data-dependent dims), or make it a compile-time constant"
        )
    return n


def bounded_dims(node: Node, axes, shape, bound: int, what: str = "d") -> tuple:
    """``shape`` with each axis of ``axes`` replaced by a computed dim ``0..bound``
    (output 0 of ``node``), the group capped at ``bound`` jointly.

    Parameters
    ----------
    node : Node
    axes : iterable of int
        The data-dependent axes.
    shape : sequence of int or Dim
        The output shape with the other axes' sizes.
    bound : int
        The user's ``N``.
    what : str
        A prefix for the symbols' names.

    Returns
    -------
    tuple
        The output shape.
    """
    out = list(shape)
    for a in axes:
        out[a] = count_dim(node, 0, a, f"{what}{a}", bound)
    bound_jointly(out, bound)
    return tuple(out)


def check_sizes(ctx: EmitContext, node: Node, sizes, bound: int) -> str:
    """C leaving the op with ``ml_status`` set when a size is negative or the product
    of the C expressions ``sizes`` (int64, the data-dependent dims this run) exceeds
    ``bound`` (each checked before multiplying: no overflow)."""
    if not sizes:
        return ""
    p = ctx.unique("prod")
    fail = f"{{ {fail_statement(ctx, node, 'max_sizes bound')} return; }}"
    lines = [f"  int64_t {p} = 1;"]
    for s in sizes:
        lines.append(f"  if (({s}) < 0 || ({s}) > {bound}) {fail}")
        lines.append(f"  {p} *= ({s}); if ({p} > {bound}) {fail}")
    return "\n".join(lines)
