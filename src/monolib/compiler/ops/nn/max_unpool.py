"""ONNX ``MaxUnpool`` (9, 11, 22): the inverse of MaxPool with Indices. Y is zero but
at ``Indices`` (flat row-major indices into the default output shape
``(in - 1) * stride - pad_begin - pad_end + kernel``), which receive X. A constant
``output_shape`` input makes Y larger: the default-shaped result sits at its start
(the ONNX reference's rule). An out-of-range index is skipped (C cannot raise)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ..tensor.loops import const_ints, contiguous_strides
from ._common import attr_ints

__all__ = ["MaxUnpool"]

logger = logging.getLogger(__name__)


@register
class MaxUnpool(OpDef):
    """``MaxUnpool``: X ``[N, C, *S]``, Indices (int64, same shape), optional constant
    output_shape -> Y ``[N, C, *O]``.

    Raises
    ------
    ShapeError
        Mismatched shapes, an output_shape smaller than the default one.
    """

    op_type, since_version = "MaxUnpool", 9
    also_versions = (11, 22)  # 11: output_shape semantics fixed; 22: types

    def _shapes(self, node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(default output shape, output shape)."""
        x, idx = node.inputs[0], node.inputs[1]
        nd = len(x.shape) - 2
        k = attr_ints(node, "kernel_shape", [])
        s = attr_ints(node, "strides", [1] * nd)
        p = attr_ints(node, "pads", [0] * (2 * nd))
        where = f"MaxUnpool (node {node.name!r})"
        if nd < 1 or len(k) != nd or tuple(idx.shape) != tuple(x.shape):
            raise ShapeError(f"{where}: X {list(x.shape)}, Indices {list(idx.shape)}, "
                             f"kernel_shape {k}")
        base = (*x.shape[:2], *((x.shape[2 + i] - 1) * s[i] - p[i] - p[nd + i] + k[i]
                                for i in range(nd)))
        out = const_ints(node, 2, "output_shape") if node.input(2) is not None else None
        out = tuple(out) if out else base
        if len(out) != len(base) or any(o < b for o, b in zip(out, base)):
            raise ShapeError(f"{where}: output_shape {list(out)} is smaller than {list(base)}")
        return base, out

    def infer(self, node: Node) -> list[OutType]:
        return [(self._shapes(node)[1], node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        x, idx = inputs[0], inputs[1]
        base, out = self._shapes(node)
        flat = np.zeros(int(np.prod(base)), x.dtype)
        i = idx.reshape(-1)
        ok = (i >= 0) & (i < flat.size)
        flat[i[ok]] = x.reshape(-1)[ok]
        y = np.zeros(out, x.dtype)
        y[tuple(slice(0, b) for b in base)] = flat.reshape(base)
        return [y]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, idx, y = node.inputs[0], node.inputs[1], node.outputs[0]
        base, out = self._shapes(node)
        total = int(np.prod(base))
        code = f"memset({ctx.ptr(y)}, 0, {y.size * y.dtype.itemsize});\n"
        if x.size == 0:
            return code
        if base == out:
            dst = "v"
        else:  # re-address the default shape's flat index inside the larger output
            terms, rem = [], "v"
            for b, st in zip(reversed(base), reversed(contiguous_strides(out))):
                terms.append(f"({rem} % {b}) * {st}")
                rem = f"({rem} / {b})"
            dst = " + ".join(terms)
        return code + (
            f"for (int64_t k = 0; k < {x.size}; ++k) {{\n"
            f"  int64_t v = {ctx.ptr(idx)}[k];\n"
            f"  if (v >= 0 && v < {total}) {ctx.ptr(y)}[{dst}] = {ctx.ptr(x)}[k];\n"
            "}"
        )
