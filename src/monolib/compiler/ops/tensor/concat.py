"""ONNX ``Concat`` (4, 11, 13): join tensors along ``axis`` (negative from 11).

Each input is copied into its slab of the output: after merging, that is a loop over
the dims before ``axis`` around one contiguous run per input (a ``memcpy``-like loop
the compiler turns into block moves). Zero-sized inputs are skipped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import ShapeError
from ...backends.cstyle import ctype
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import contiguous_strides, has_epilogue, normalize_axis
from .par_copy import parallel_copy

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["Concat"]

logger = logging.getLogger(__name__)


@register
class Concat(OpDef):
    """``Concat``: inputs of one dtype and equal dims except ``axis``.

    Raises
    ------
    ShapeError
        For mismatched ranks, dims or dtypes.
    """

    op_type, since_version = "Concat", 4

    def _axis(self, node: Node) -> int:
        return normalize_axis(
            node.attrs["axis"], len(node.inputs[0].shape), f"Concat (node {node.name!r})"
        )

    def infer(self, node: Node) -> list[OutType]:
        first = node.inputs[0]
        a = self._axis(node)
        total = 0
        for v in node.inputs:
            ok = len(v.shape) == len(first.shape) and all(
                d == e for i, (d, e) in enumerate(zip(v.shape, first.shape)) if i != a
            )
            if not ok or v.dtype != first.dtype:
                raise ShapeError(
                    f"Concat (node {node.name!r}): cannot join {v.dtype}{list(v.shape)} with "
                    f"{first.dtype}{list(first.shape)} on axis {a}"
                )
            total += v.shape[a]
        shape = list(first.shape)
        shape[a] = total
        return [(tuple(shape), first.dtype)]

    def reference(self, node: Node, inputs):
        return [np.concatenate(inputs, axis=self._axis(node))]

    def epilogue_groups(self, node: Node):
        rank = len(node.outputs[0].shape)
        return [[], list(range(rank - 1)), [rank - 1]] if rank else [[], [], []]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        y = node.outputs[0]
        a = self._axis(node)
        ost = contiguous_strides(y.shape)
        epi = has_epilogue(ctx, len(y.shape))
        parts, offset = [], 0
        for v in node.inputs:
            if v.size:
                index = None
                if epi:
                    index = lambda idx, off=offset: [
                        f"({i} + {off})" if d == a else i for d, i in enumerate(idx)
                    ]
                parts.append(
                    parallel_copy(
                        ctx,
                        v.shape,
                        ctx.ptr(y),
                        (ost, offset * ost[a]),
                        ctx.ptr(v),
                        (contiguous_strides(v.shape), 0),
                        index,
                    )
                )
            offset += v.shape[a]
        return "\n".join(parts)

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """Device Concat: each output element reads the input whose range on ``axis``
        holds it."""
        from ...backends.device.lowerings import decompose, element_kernel, flat_of

        y = node.outputs[0]
        a = normalize_axis(node.attrs["axis"], len(y.shape), f"Concat (node {node.name!r})")
        idx = [f"i{d}" for d in range(len(y.shape))]
        body = [*decompose("gid", y.shape, "i"), f"{ctype(y.dtype)} acc;"]
        start = 0
        for k, v in enumerate(node.inputs):
            n = v.shape[a]
            if n == 0:
                continue
            src = [i if d != a else f"({i} - {start})" for d, i in enumerate(idx)]
            cond = "" if k == len(node.inputs) - 1 else f"if (i{a} < {start + n}) "
            body.append(
                f"{'else ' if start else ''}{cond}acc = {ctx.ptr(v)}[{flat_of(src, contiguous_strides(v.shape))}];"
            )
            start += n
        return element_kernel(node, ctx, body)
