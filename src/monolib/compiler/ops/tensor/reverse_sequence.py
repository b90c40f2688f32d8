"""ONNX ``ReverseSequence`` (10): for each batch entry ``b`` the first
``sequence_lens[b]`` steps along ``time_axis`` are reversed, the rest copied. The
lengths are read at run time (clamped to ``[0, T]`` in C, which cannot raise)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register

__all__ = ["ReverseSequence"]

logger = logging.getLogger(__name__)


@register
class ReverseSequence(OpDef):
    """``ReverseSequence``: X ``[T, B, ...]`` (``time_axis=0, batch_axis=1``) or ``[B, T,
    ...]`` (1, 0), any element type, sequence_lens ``[B]`` int64 -> Y like X.

    Raises
    ------
    ShapeError
        Axes other than {0, 1}, or sequence_lens not ``[B]``.
    """

    op_type, since_version = "ReverseSequence", 10
    also_versions = (28,)  # 28 only added element types

    def _axes(self, node: Node) -> tuple[int, int]:
        x, seq = node.inputs[0], node.inputs[1]
        ta, ba = int(node.attrs["time_axis"]), int(node.attrs["batch_axis"])
        if {ta, ba} != {0, 1} or len(x.shape) < 2 or tuple(seq.shape) != (x.shape[ba],):
            raise ShapeError(f"ReverseSequence (node {node.name!r}): time_axis {ta}, batch_axis "
                             f"{ba}, X {list(x.shape)}, sequence_lens {list(seq.shape)}")
        return ta, ba

    def infer(self, node: Node) -> list[OutType]:
        self._axes(node)
        x = node.inputs[0]
        return [(tuple(x.shape), x.dtype)]

    def reference(self, node: Node, inputs):
        ta, ba = self._axes(node)
        x, seq = inputs
        y = x.copy()
        t = x.shape[ta]
        for b, n in enumerate(seq):
            n = int(np.clip(n, 0, t))
            src = [slice(None)] * x.ndim
            src[ba], src[ta] = b, slice(n - 1, None, -1) if n else slice(0, 0)
            dst = [slice(None)] * x.ndim
            dst[ba], dst[ta] = b, slice(0, n)
            y[tuple(dst)] = x[tuple(src)]
        return [y]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ta, _ = self._axes(node)
        x, seq, y = node.inputs[0], node.inputs[1], node.outputs[0]
        if x.size == 0:
            return ""
        t, nb = x.shape[ta], x.shape[1 - ta]
        inner = int(np.prod(x.shape[2:], dtype=np.int64))
        off = (lambda tv: f"({tv} * {nb} + b) * {inner}") if ta == 0 else \
            (lambda tv: f"(b * {t} + {tv}) * {inner}")
        size = inner * x.dtype.itemsize
        return (
            f"for (int64_t b = 0; b < {nb}; ++b) {{\n"
            f"  int64_t n = (int64_t){ctx.ptr(seq)}[b]; n = n < 0 ? 0 : (n > {t} ? {t} : n);\n"
            f"  for (int64_t s = 0; s < {t}; ++s) {{\n"
            "    int64_t src = s < n ? n - 1 - s : s;\n"
            f"    memcpy({ctx.ptr(y)} + {off('s')}, {ctx.ptr(x)} + {off('src')}, {size});\n"
            "  }\n}"
        )
