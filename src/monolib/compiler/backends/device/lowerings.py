"""The shared pieces of the device lowerings, written as scalar C per output element.

Each op's device lowering is its class's ``emit_device(node, ctx)`` (beside its C
lowering ``emit`` and its kernel header, in ``compiler/ops``); it takes a node and a
:class:`~.generate.KernelContext` and returns a :class:`Kernel`: how many work items to
launch and the body lines. A body reads ``gid`` (the work item's flat index, already
checked against the count), reads inputs through ``ctx.ptr(value)`` and stores every
element with ``ctx.store(flat_index, value)``, which applies the fused elementwise
epilogue. The body is plain C: :mod:`..cstyle` makes it OpenCL C or CUDA C.

Shapes, strides and windows come from the ops' own helpers (``conv_geometry``,
``pool_geometry``, ``softmax_view``, ``slice`` params...), so the semantics are those of
the C backend and the ONNX operator specs. Simple and correct first: no tiling, no
local memory (docs/devices.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...ir import Node
from ..cstyle import ctype
from ...ops.tensor.loops import contiguous_strides

__all__ = ["Kernel", "decompose", "element_kernel", "flat_of", "gather_kernel"]

logger = logging.getLogger(__name__)


@dataclass
class Kernel:
    """One kernel's work: ``items`` work items, each running ``body`` (C lines)."""

    items: int
    body: list[str]


def decompose(flat: str, shape: Sequence[int], prefix: str) -> list[str]:
    """C lines declaring ``prefix<d>``, the row-major index of ``flat`` in ``shape``."""
    strides = contiguous_strides(shape)
    lines = []
    for d, (n, s) in enumerate(zip(shape, strides)):
        expr = f"({flat}) / {s}" if s != 1 else f"({flat})"
        if d > 0:
            expr = f"({expr}) % {n}"
        lines.append(f"const idx_t {prefix}{d} = {expr};")
    return lines


def flat_of(index: Sequence[str], strides: Sequence[int]) -> str:
    """C expression ``sum(index[d] * strides[d])`` (0 strides skipped)."""
    terms = [i if s == 1 else f"{i} * {s}" for i, s in zip(index, strides) if s != 0]
    return " + ".join(terms) or "0"


def element_kernel(node: Node, ctx: Any, acc_lines: list[str]) -> Kernel:
    """A kernel of one work item per element of output 0, whose ``acc_lines`` set
    ``acc`` (the element's value before the fused epilogue)."""
    return Kernel(node.outputs[0].size, [*acc_lines, *ctx.store("gid", "acc")])


def gather_kernel(node: Node, ctx: Any, src_index: Callable[[list[str]], str]) -> Kernel:
    """``out[i] = X[src_index(i)]``: a data-movement op (input 0 to output 0) as one
    element per work item; ``src_index`` maps the output index names ``i<d>`` to the
    C expression of the flat input index."""
    x, y = node.inputs[0], node.outputs[0]
    body = [
        *decompose("gid", y.shape, "i"),
        f"const {ctype(y.dtype)} acc = {ctx.ptr(x)}[{src_index([f'i{d}' for d in range(len(y.shape))])}];",
    ]
    return element_kernel(node, ctx, body)
