"""``Slice`` (10, 11, 13) with ``starts``, ``ends`` or ``steps`` read at run time (issue
13; ``slice.Slice10`` delegates here). ``axes`` must stay a compile-time constant (it
decides which dims change).

Each sliced dim is a computed symbol bounded by the input dim; the kernel applies the
spec's rules when it runs (a negative start/end counts from the end; both clamped to
``[0, dim]`` for a positive step, ``[0, dim-1]`` / ``[-1, dim-1]`` for a negative one;
count ``ceil((end - start) / step)``, at least 0; a zero step selects nothing), writes
the counts for the ops after it and copies the elements.
"""

from __future__ import annotations

import logging

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext
from ._computed import count_dim
from .loops import const_ints, contiguous_strides, normalize_axis

__all__ = ["axes_of", "emit", "is_run_time", "out_shape"]

logger = logging.getLogger(__name__)


def is_run_time(node: Node) -> bool:
    """Whether starts, ends or steps is a run-time input."""
    return any(v is not None and v.const is None for v in
               (node.input(1), node.input(2), node.input(4) if len(node.inputs) > 4 else None))


def axes_of(node: Node) -> list[int]:
    """The sliced axes, normalized (``axes`` constant; absent: ``0..len(starts)-1``).

    Raises
    ------
    ShapeError
        ``starts`` not 1-D of a static length, lengths that differ, a repeated axis,
        or a run-time ``axes``.
    """
    where = f"Slice (node {node.name!r})"
    n = node.inputs[1].shape
    if len(n) != 1 or not isinstance(n[0], int):
        raise ShapeError(f"{where}: starts must be 1-D with a static length, got {list(n)}")
    axes = const_ints(node, 3, "axes") if len(node.inputs) > 3 else None
    axes = list(range(n[0])) if axes is None else axes
    rank = len(node.inputs[0].shape)
    axes = [normalize_axis(int(a), rank, where) for a in axes]
    lens = {n[0], len(axes)} | {v.shape[0] for v in (node.input(2), node.input(4) if
                                len(node.inputs) > 4 else None) if v is not None}
    if len(lens) != 1 or len(set(axes)) != len(axes):
        raise ShapeError(f"{where}: starts, ends, axes and steps differ in length or "
                         "repeat an axis")
    return axes


def out_shape(node: Node) -> tuple:
    """The input shape with each sliced dim a computed symbol (at most the dim)."""
    shape = list(node.inputs[0].shape)
    for a in axes_of(node):
        shape[a] = count_dim(node, 0, a, f"len{a}", shape[a])
    return tuple(shape)


def emit(node: Node, ctx: EmitContext) -> str:
    """C: per sliced axis start/step/count by the spec's rules, the counts written,
    then the elements copied (``y[i] = x[sum((start_a + i_a * step_a) * stride_a)]``)."""
    x, y = node.inputs[0], node.outputs[0]
    axes = axes_of(node)
    rank = len(x.shape)
    steps = node.input(4) if len(node.inputs) > 4 else None
    lines = ["{"]
    start = ["0"] * rank
    step = ["1"] * rank
    count = [f"{d}" for d in y.shape]
    for j, a in enumerate(axes):
        s, st, c, dim = (ctx.unique(p) for p in ("s", "st", "c", "dim"))
        e = ctx.unique("e")
        stv = f"(int64_t){ctx.ptr(steps)}[{j}]" if steps is not None else "1"
        lines += [
            (f"  int64_t {dim} = {x.shape[a]}, {s} = (int64_t){ctx.ptr(node.inputs[1])}[{j}], "
            f"{e} = (int64_t){ctx.ptr(node.inputs[2])}[{j}], {st} = {stv}, {c} = 0;"),
            f"  if ({s} < 0) {s} += {dim};",
            f"  if ({e} < 0) {e} += {dim};",
            (f"  if ({st} > 0) {{ {s} = {s} < 0 ? 0 : ({s} > {dim} ? {dim} : {s}); "
            f"{e} = {e} < 0 ? 0 : ({e} > {dim} ? {dim} : {e}); "
            f"if ({e} > {s}) {c} = ({e} - {s} + {st} - 1) / {st}; }}"),
            (f"  else if ({st} < 0) {{ {s} = {s} < 0 ? 0 : ({s} > {dim} - 1 ? {dim} - 1 : {s}); "
            f"{e} = {e} < -1 ? -1 : ({e} > {dim} - 1 ? {dim} - 1 : {e}); "
            f"if ({s} > {e}) {c} = ({s} - {e} - {st} - 1) / (-{st}); }}"),
            f"  {ctx.set_symbol(y.shape[a], c)}",
        ]
        start[a], step[a], count[a] = s, st, c
    ist = contiguous_strides(x.shape)
    idx = [ctx.unique("i") for _ in range(rank)]
    for d in range(rank):
        lines.append(f"  {'  ' * d}for (int64_t {idx[d]} = 0; {idx[d]} < {count[d]}; ++{idx[d]})")
    src = " + ".join(f"({start[d]} + {idx[d]} * {step[d]}) * {ist[d]}" for d in range(rank)) or "0"
    k = ctx.unique("k")
    lines = lines[:1] + [f"  int64_t {k} = 0;"] + lines[1:]
    lines.append(f"  {'  ' * rank}{ctx.ptr(y)}[{k}++] = {ctx.ptr(x)}[{src}];")
    lines.append("}")
    return "\n".join(lines)
