"""ONNX ``Slice``: version 1 (``starts``/``ends``/``axes`` attributes) and 10, 11, 13
(``starts``, ``ends``, optional ``axes`` and ``steps`` inputs, which must be constant).

Per the spec, a negative start/end counts from the end of the dim; both are then
clamped to ``[0, dim]`` for a positive step and to ``[0, dim-1]`` / ``[-1, dim-1]``
for a negative step, so ``INT64_MAX``/``INT64_MIN`` ends mean "to the end". The output
is a strided view of the input, copied with merged loops.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ...symbolic import dim_max, dim_min, is_dim
from ..base import EmitContext, OpDef, OutType, register
from . import slice_data
from .loops import const_ints, contiguous_strides, emit_copy, has_epilogue, normalize_axis

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["Slice1", "Slice10", "slice_params"]

logger = logging.getLogger(__name__)


def slice_params(shape, starts, ends, axes, steps, where: str) -> list[tuple[int, int, int]]:
    """``(start, step, count)`` for every dim of ``shape`` (untouched dims: ``(0, 1, dim)``).

    Raises
    ------
    ShapeError
        For mismatched list lengths, a repeated axis or a zero step.
    """
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"{where}: starts, ends, axes and steps differ in length")
    out = [(0, 1, d if is_dim(d) else int(d)) for d in shape]
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = normalize_axis(a, rank, where)
        if a in seen or st == 0:
            raise ShapeError(f"{where}: repeated axis {a} or zero step")
        seen.add(a)
        dim = shape[a] if is_dim(shape[a]) else int(shape[a])
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if any(is_dim(v) for v in (dim, s, e)):
            out[a] = _run_time_params(dim, s, e, st)
            continue
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            count = max(0, -(-(e - s) // st))
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
            count = max(0, -(-(s - e) // -st))
        out[a] = (s, st, count)
    return out


def _run_time_params(dim, s, e, st) -> tuple:
    """``(start, step, count)`` of one axis when its size or bounds are run-time Dims:
    the clamps of :func:`slice_params` as ``min``/``max`` atoms, and the count as a
    ceiling division of a non-negative difference (the C of a Dim divides as C does)."""
    if st > 0:
        s, e = dim_min(dim_max(s, 0), dim), dim_min(dim_max(e, 0), dim)
        return s, st, (dim_max(e - s, 0) + st - 1) // st
    s, e = dim_min(dim_max(s, 0), dim - 1), dim_min(dim_max(e, -1), dim - 1)
    return s, st, (dim_max(s - e, 0) - st - 1) // -st


class _Slice(OpDef):
    from_inputs: ClassVar[bool] = True
    defaults = {"axes": None}

    def params(self, node: Node):
        where = f"Slice (node {node.name!r})"
        shape = node.inputs[0].shape
        if self.from_inputs:
            return slice_params(
                shape,
                const_ints(node, 1, "starts"),
                const_ints(node, 2, "ends"),
                const_ints(node, 3, "axes"),
                const_ints(node, 4, "steps"),
                where,
            )
        return slice_params(
            shape, node.attrs["starts"], node.attrs["ends"], self.attr(node, "axes"), None, where
        )

    def infer(self, node: Node) -> list[OutType]:
        if self.from_inputs and slice_data.is_run_time(node):  # issue 13: computed dims
            return [(slice_data.out_shape(node), node.inputs[0].dtype)]
        return [(tuple(c for _, _, c in self.params(node)), node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        index = []
        for s, st, c in self.params(node):
            stop = s + st * c
            index.append(slice(s, stop if stop >= 0 else None, st))
        return [np.array(inputs[0][tuple(index)], order="C")]

    def epilogue_groups(self, node: Node):
        if self.from_inputs and slice_data.is_run_time(node):
            return None  # the run-time kernel applies no epilogue
        rank = len(node.outputs[0].shape)
        return [[], list(range(rank - 1)), [rank - 1]] if rank else [[], [], []]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        if self.from_inputs and slice_data.is_run_time(node):
            return slice_data.emit(node, ctx)
        x, y = node.inputs[0], node.outputs[0]
        p = self.params(node)
        ist = contiguous_strides(x.shape)
        src = (
            [st * s for (_, st, _), s in zip(p, ist)],
            sum(b * s for (b, _, _), s in zip(p, ist)),
        )
        index = (lambda idx: idx) if has_epilogue(ctx, len(y.shape)) else None
        return emit_copy(
            ctx, y.shape, ctx.ptr(y), (contiguous_strides(y.shape), 0), ctx.ptr(x), src, index
        )

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """Device Slice: ``out[i] = in[start + i * step]`` per dim, one element per
        work item."""
        from ...backends.device.lowerings import gather_kernel

        params = self.params(node)
        st = contiguous_strides(node.inputs[0].shape)

        def src(i: list[str]) -> str:
            terms = [str(sum(s * p[0] for s, p in zip(st, params)))]
            terms += [f"{v} * {s * p[1]}" for v, s, p in zip(i, st, params) if s * p[1] != 0]
            return " + ".join(terms)

        return gather_kernel(node, ctx, src)


@register
class Slice1(_Slice):
    """``Slice`` 1: ``starts``, ``ends``, ``axes`` attributes, step 1."""

    op_type, since_version, from_inputs = "Slice", 1, False


@register
class Slice10(_Slice):
    """``Slice`` 10, 11, 13: constant ``starts``, ``ends``, ``axes``, ``steps`` inputs."""

    op_type, since_version = "Slice", 10
