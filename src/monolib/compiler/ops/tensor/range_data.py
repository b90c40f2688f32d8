"""``Range`` on run-time values (issue 13): start, limit or delta read by the kernel
when the op runs (``shape.Range`` delegates here when one of them is not a
compile-time constant).

The length ``max(ceil((limit - start) / delta), 0)`` is a computed dim. Memory is
planned at its upper bound: the user's ``max_sizes={"node": N}`` (:mod:`.bounded`;
a run whose length passes ``N`` stops with an ``ExecutionError`` naming the node),
else the one the values' type gives for 8- and 16-bit integers (Range takes int16: at
most 65536 elements). Any other type with no bound given is refused with
:class:`~monolib.errors.UnsupportedOpError` naming the node and the option.

As ONNX Runtime does, the length is computed in double from ``limit - start`` (in the
values' type) and the values are accumulated (``y[0] = start``, ``y[i+1] = y[i] +
delta`` in the type; in int64 for integers, the same values), so float results match it
bit for bit.
"""

from __future__ import annotations

import logging

from ....errors import UnsupportedOpError
from ...backends.cstyle import ctype
from ...ir import Node
from ...symbolic import Dim
from ..base import EmitContext, OutType
from ..control.status import fail_statement
from ._computed import count_dim
from .bounded import user_bound

__all__ = ["bound", "emit", "infer"]

logger = logging.getLogger(__name__)


def bound(node: Node) -> int:
    """The most elements the Range can produce: the user's ``max_sizes`` bound, or
    ``2**bits`` of an 8/16-bit integer type (the smaller of the two when both apply).

    Raises
    ------
    UnsupportedOpError
        Any other type and no user bound: the length has no finite bound (the message
        names the node and ``max_sizes``).
    """
    dt = node.inputs[0].dtype
    user = user_bound(node)
    if dt.kind in "iu" and dt.itemsize <= 2:
        own = 1 << (8 * dt.itemsize)
        return own if user is None else min(own, user)
    if user is not None:
        return user
    names = [n for n, v in zip(("start", "limit", "delta"), node.inputs)
             if v is not None and v.const is None]
    raise UnsupportedOpError(
        f"Range (node {node.name!r}): {', '.join(names)} {'is a' if len(names) == 1 else 'are'}"
        f" run-time {dt} value{'s' if len(names) > 1 else ''}, so the output length has no "
        "finite bound to plan memory for; give one with "
        f"max_sizes={{{node.name!r}: N}} (CLI: --max-size {node.name}=N), make them "
        "compile-time constants (constants= for graph inputs) or compute them from input "
        "shapes (a run-time dim has bounds)"
    )


def infer(node: Node) -> list[OutType]:
    """``[(length,)]``: a computed dim bounded by :func:`bound`."""
    return [((count_dim(node, 0, 0, "len", bound(node)),), node.inputs[0].dtype)]


def emit(node: Node, ctx: EmitContext) -> str:
    """C computing the length (0 for delta 0, which ONNX leaves undefined; a NaN
    length is 0), checking it against the bound, the values and the symbol."""
    y = node.outputs[0]
    n = y.shape[0]
    if not isinstance(n, Dim):
        return ""
    T = ctype(y.dtype)
    s, l, d = (f"{ctx.ptr(v)}[0]" for v in node.inputs[:3])
    cnt, i, q, acc = ctx.unique("len"), ctx.unique("i"), ctx.unique("q"), ctx.unique("v")
    if y.dtype.kind in "iu":
        dist = f"((int64_t){l} - (int64_t){s})"
        step = f"(int64_t){d}"
        # ceil(dist / step) in truncating C division
        lines = [(f"  int64_t {cnt} = {step} == 0 ? 0 : ({step} > 0 ? ({dist} + {step} - 1) / "
                  f"{step} : ({dist} + {step} + 1) / {step});"),
                 f"  if ({cnt} < 0) {cnt} = 0;"]
        acc_t, start, delta = "int64_t", f"(int64_t){s}", step
    else:  # ORT: ceil((double)(limit - start) / delta), compared in double (inf, NaN)
        lines = [f"  double {q} = {d} == 0 ? 0.0 : ceil((double)({l} - {s}) / (double){d});",
                 (f"  int64_t {cnt} = {q} > 0.0 ? ({q} > {n.hi + 1}.0 ? {n.hi + 1} "
                  f": (int64_t){q}) : 0;")]
        acc_t, start, delta = T, s, d
    if user_bound(node) is not None:  # a length past the user's bound stops the run
        lines.append(f"  if ({cnt} > {n.hi}) {{ {fail_statement(ctx, node, 'max_sizes bound')}"
                     " return; }")
    else:  # the type's own bound: never exceeded
        lines.append(f"  if ({cnt} > {n.hi}) {cnt} = {n.hi};")
    return "\n".join([
        "{",
        *lines,
        f"  {acc_t} {acc} = {start};",
        (f"  for (int64_t {i} = 0; {i} < {cnt}; ++{i}) {{ {ctx.ptr(y)}[{i}] = ({T}){acc}; "
         f"{acc} += {delta}; }}"),
        f"  {ctx.set_symbol(n, cnt)}",
        "}",
    ])
