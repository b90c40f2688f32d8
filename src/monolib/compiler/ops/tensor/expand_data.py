"""``Expand`` to a run-time ``shape`` and ``Tile`` by run-time ``repeats`` (issue 13;
ONNX operator spec "Expand" 8, 13 and "Tile" 6, 13): ``expand.Expand``/``Tile``
delegate here when that input is not a compile-time constant.

The sizes have no bound of their own: the user gives ``max_sizes={"node": N}``
(:mod:`.bounded`), ``N`` bounding the product of the data-dependent output dims.

* Expand: output dim ``i`` is ``broadcast(x_i, shape_i)``. Where ``x_i`` is a static
  size other than 1 the output keeps it (``shape_i`` must be 1 or ``x_i``, checked
  when the op runs); elsewhere (``x_i`` is 1, absent or a run-time dim) the dim is
  computed.
* Tile: every output dim ``x_i * repeats_i`` is computed.

The kernel reads the input, checks it (a bad broadcast, a negative size or a product
past ``N`` sets ``ml_status``: ``monolib_run`` fails naming the node), writes the
dims, then copies with nested loops over local sizes (Tile walks each output dim as
``[repeats_i, x_i]`` with a zero source stride along the repeats).
"""

from __future__ import annotations

import logging

from ....errors import ShapeError
from ...ir import Node
from ...symbolic import Dim
from ..base import EmitContext, OutType
from ..control.status import fail_statement
from .bounded import bounded_dims, check_sizes, require_bound
from .loops import contiguous_strides

__all__ = ["expand_emit", "expand_infer", "tile_emit", "tile_infer"]

logger = logging.getLogger(__name__)


def _length(node: Node, what: str) -> int:
    """The static length of the 1-D input 1.

    Raises
    ------
    ShapeError
        Not 1-D of a compile-time length.
    """
    v = node.inputs[1]
    if len(v.shape) != 1 or isinstance(v.shape[0], Dim):
        raise ShapeError(f"{node.op_type} (node {node.name!r}): a run-time {what} input must "
                         f"be 1-D with a static length, got {list(v.shape)}")
    return int(v.shape[0])


def _expand_axes(node: Node):
    """``(rank, [(x dim or None, shape index or None)] per output axis)``."""
    x = node.inputs[0]
    n = _length(node, "shape")
    rank = max(len(x.shape), n)
    axes = []
    for i in range(rank):
        xi = i - (rank - len(x.shape))
        si = i - (rank - n)
        axes.append((x.shape[xi] if xi >= 0 else None, si if si >= 0 else None))
    return rank, axes


def _data_dependent(xd, si) -> bool:
    return si is not None and not (isinstance(xd, int) and xd != 1)


def expand_infer(node: Node) -> list[OutType]:
    """The output type: computed dims where the size comes from ``shape``.

    Raises
    ------
    UnsupportedOpError
        No ``max_sizes`` bound for the node.
    ShapeError
        ``shape`` not 1-D of a static length.
    """
    bound = require_bound(node, "input 'shape'")
    x = node.inputs[0]
    _, axes = _expand_axes(node)
    shape = [1 if xd is None else xd for xd, _ in axes]
    dyn = [i for i, (xd, si) in enumerate(axes) if _data_dependent(xd, si)]
    return [(bounded_dims(node, dyn, shape, bound), x.dtype)]


def _copy(ctx: EmitContext, node: Node, sizes, src_strides) -> list[str]:
    """Nested loops writing output 0 contiguously from input 0 at ``sum(i_k *
    src_strides[k])`` (C sizes and strides)."""
    x, y = node.inputs[0], node.outputs[0]
    idx = [ctx.unique("i") for _ in sizes]
    k = ctx.unique("k")
    lines = [f"  int64_t {k} = 0;"]
    for d, (i, n) in enumerate(zip(idx, sizes)):
        lines.append(f"  {'  ' * d}for (int64_t {i} = 0; {i} < {n}; ++{i})")
    src = " + ".join(f"{i} * ({s})" for i, s in zip(idx, src_strides)) or "0"
    lines.append(f"  {'  ' * len(sizes)}{ctx.ptr(y)}[{k}++] = {ctx.ptr(x)}[{src}];")
    return lines


def expand_emit(node: Node, ctx: EmitContext) -> str:
    """C: read ``shape``, check the broadcast and the bound, write the dims, copy."""
    x, y = node.inputs[0], node.outputs[0]
    bound = require_bound(node, "input 'shape'")
    rank, axes = _expand_axes(node)
    xst = contiguous_strides(x.shape)
    fail = f"{{ {fail_statement(ctx, node, 'broadcast')} return; }}"
    lines, sizes, strides, dyn = ["{"], [], [], []
    for i, (xd, si) in enumerate(axes):
        xi = i - (rank - len(x.shape))
        stride = xst[xi] if xi >= 0 else 0
        if si is None:
            sizes.append(f"{xd}")
            strides.append(f"{stride}")  # no shape entry: the input's own dim
            continue
        s, o = ctx.unique("s"), ctx.unique("o")
        lines.append(f"  int64_t {s} = (int64_t){ctx.ptr(node.inputs[1])}[{si}];")
        if not _data_dependent(xd, si):  # a static size other than 1: kept
            lines.append(f"  if ({s} != 1 && {s} != {xd}) {fail}")
            sizes.append(f"{xd}")
            strides.append(f"{stride}")
            continue
        xv = "1" if xd is None else f"(int64_t)({xd})"
        lines.append(f"  int64_t {o} = {xv} == 1 ? {s} : {xv};")
        lines.append(f"  if ({xv} != 1 && {s} != 1 && {s} != {xv}) {fail}")
        sizes.append(o)
        strides.append(f"{xv} == 1 ? 0 : {stride}")
        dyn.append((i, o))
    lines.append(check_sizes(ctx, node, [o for _, o in dyn], bound))
    lines += [f"  {ctx.set_symbol(y.shape[i], o)}" for i, o in dyn if isinstance(y.shape[i], Dim)]
    lines += _copy(ctx, node, sizes, strides)
    lines.append("}")
    return "\n".join(line for line in lines if line)


def tile_infer(node: Node) -> list[OutType]:
    """The output type: every dim computed (``x_i * repeats_i``).

    Raises
    ------
    UnsupportedOpError
        No ``max_sizes`` bound for the node.
    ShapeError
        ``repeats`` not 1-D of the input's rank.
    """
    bound = require_bound(node, "input 'repeats'")
    x = node.inputs[0]
    if _length(node, "repeats") != len(x.shape):
        raise ShapeError(f"Tile (node {node.name!r}): {node.inputs[1].shape[0]} repeats for a "
                         f"rank-{len(x.shape)} input")
    rank = len(x.shape)
    return [(bounded_dims(node, range(rank), x.shape, bound), x.dtype)]


def tile_emit(node: Node, ctx: EmitContext) -> str:
    """C: read ``repeats``, check the sizes, write the dims, copy."""
    x, y = node.inputs[0], node.outputs[0]
    bound = require_bound(node, "input 'repeats'")
    fail = f"{{ {fail_statement(ctx, node, 'negative repeats')} return; }}"
    xst = contiguous_strides(x.shape)
    lines, outs, sizes, strides = ["{"], [], [], []
    for i, xd in enumerate(x.shape):
        r, o = ctx.unique("r"), ctx.unique("o")
        lines.append(f"  int64_t {r} = (int64_t){ctx.ptr(node.inputs[1])}[{i}];")
        # a repeat past N with a nonempty input is past the bound: no int64 overflow below
        lines.append(f"  if ({r} < 0) {fail}")
        lines.append(f"  if ({r} > {bound} && (int64_t)({xd}) != 0) {{ "
                     f"{fail_statement(ctx, node, 'max_sizes bound')} return; }}")
        lines.append(f"  int64_t {o} = {r} * (int64_t)({xd});")
        outs.append(o)
        sizes += [r, f"{xd}"]
        strides += ["0", f"{xst[i]}"]
    lines.append(check_sizes(ctx, node, outs, bound))
    lines += [f"  {ctx.set_symbol(d, o)}" for d, o in zip(y.shape, outs) if isinstance(d, Dim)]
    lines += _copy(ctx, node, sizes, strides)
    lines.append("}")
    return "\n".join(line for line in lines if line)
