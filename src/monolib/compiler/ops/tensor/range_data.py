"""``Range`` on run-time values (issue 13): start, limit or delta read by the kernel
when the op runs (``shape.Range`` delegates here when one of them is not a
compile-time constant).

The length ``max(ceil((limit - start) / delta), 0)`` is a computed dim. Memory is
planned at its upper bound, which the values' type gives only for 8- and 16-bit
integers (Range takes int16: at most 65536 elements); any other type has no finite bound to plan
for, and the node is refused with :class:`~monolib.errors.UnsupportedOpError` naming
it and how to make it compile (constants, or values derived from input shapes).
"""

from __future__ import annotations

import logging

from ....errors import UnsupportedOpError
from ...backends.cstyle import ctype
from ...ir import Node
from ...symbolic import Dim
from ..base import EmitContext, OutType
from ._computed import count_dim

__all__ = ["bound", "emit", "infer"]

logger = logging.getLogger(__name__)


def bound(node: Node) -> int:
    """The most elements the Range can produce: ``2**bits`` of an 8/16-bit integer type.

    Raises
    ------
    UnsupportedOpError
        Any other type: the length has no finite bound (the message names the node).
    """
    dt = node.inputs[0].dtype
    if dt.kind in "iu" and dt.itemsize <= 2:
        return 1 << (8 * dt.itemsize)
    names = [n for n, v in zip(("start", "limit", "delta"), node.inputs)
             if v is not None and v.const is None]
    raise UnsupportedOpError(
        f"Range (node {node.name!r}): {', '.join(names)} {'is a' if len(names) == 1 else 'are'}"
        f" run-time {dt} value{'s' if len(names) > 1 else ''}, so the output length has no "
        "finite bound to plan memory for; make them compile-time constants (constants= for "
        "graph inputs) or compute them from input shapes (a run-time dim has bounds)"
    )


def infer(node: Node) -> list[OutType]:
    """``[(length,)]``: a computed dim bounded by :func:`bound`."""
    return [((count_dim(node, 0, 0, "len", bound(node)),), node.inputs[0].dtype)]


def emit(node: Node, ctx: EmitContext) -> str:
    """C computing the length (0 for delta 0, which ONNX leaves undefined), the values
    ``start + i * delta`` (in int64, stored in the integer type) and the symbol."""
    y = node.outputs[0]
    n = y.shape[0]
    if not isinstance(n, Dim):
        return ""
    T = ctype(y.dtype)
    s, l, d = (f"{ctx.ptr(v)}[0]" for v in node.inputs[:3])
    cnt, i = ctx.unique("len"), ctx.unique("i")
    dist = f"((int64_t){l} - (int64_t){s})"  # integers only: bound() refuses the rest
    step = f"(int64_t){d}"
    length = (f"{step} == 0 ? 0 : ({step} > 0 ? ({dist} + {step} - 1) / {step} "
              f": ({dist} + {step} + 1) / {step})")  # ceil(dist / step), truncating C division
    value = f"({T})((int64_t){s} + {i} * {step})"
    return "\n".join([
        "{",
        f"  int64_t {cnt} = {length};",
        f"  if ({cnt} < 0) {cnt} = 0;",
        f"  if ({cnt} > {n.hi}) {cnt} = {n.hi};",
        f"  for (int64_t {i} = 0; {i} < {cnt}; ++{i}) {ctx.ptr(y)}[{i}] = {value};",
        f"  {ctx.set_symbol(n, cnt)}",
        "}",
    ])
