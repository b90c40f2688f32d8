"""ONNX ``DepthToSpace`` (11, 13; modes ``DCR`` and ``CRD``) and ``SpaceToDepth``
(1, 13): a reshape to 6-D, a transpose, and a reshape back (the formulas of the spec).
The emitter copies the transposed 6-D view."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import contiguous_strides, emit_copy

__all__ = ["DepthToSpace", "SpaceToDepth"]

logger = logging.getLogger(__name__)


class _Rearrange(OpDef):
    def view(self, node: Node) -> tuple[tuple[int, ...], list[int], tuple[int, ...]]:
        """(6-D input view, permutation, output shape)."""
        raise NotImplementedError

    def _check(self, node: Node) -> tuple[int, int, int, int, int]:
        x = node.inputs[0]
        b = int(node.attrs["blocksize"])
        if len(x.shape) != 4 or b < 1:
            raise ShapeError(
                f"{self.op_type} (node {node.name!r}): needs a 4-D input and blocksize >= 1"
            )
        return (*x.shape, b)

    def infer(self, node: Node) -> list[OutType]:
        return [(self.view(node)[2], node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        v6, perm, out = self.view(node)
        return [np.array(inputs[0].reshape(v6).transpose(perm), order="C").reshape(out)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        v6, perm, _ = self.view(node)
        st = contiguous_strides(v6)
        shape = [v6[p] for p in perm]
        return emit_copy(
            ctx,
            shape,
            ctx.ptr(node.outputs[0]),
            (contiguous_strides(shape), 0),
            ctx.ptr(node.inputs[0]),
            ([st[p] for p in perm], 0),
        )


@register
class DepthToSpace(_Rearrange):
    """``DepthToSpace``: ``[N, C, H, W] -> [N, C/b^2, H*b, W*b]``."""

    op_type, since_version = "DepthToSpace", 11
    # 28 changes no attribute, input, output, type constraint or doc text
    also_versions = (28,)

    def view(self, node: Node):
        n, c, h, w, b = self._check(node)
        if c % (b * b):
            raise ShapeError(f"DepthToSpace (node {node.name!r}): C={c} not divisible by {b * b}")
        mode = node.attrs["mode"]
        out = (n, c // (b * b), h * b, w * b)
        if mode == "DCR":
            return (n, b, b, c // (b * b), h, w), [0, 3, 4, 1, 5, 2], out
        if mode == "CRD":
            return (n, c // (b * b), b, b, h, w), [0, 1, 4, 2, 5, 3], out
        raise UnsupportedOpError(f"DepthToSpace (node {node.name!r}): mode {mode!r}")


@register
class SpaceToDepth(_Rearrange):
    """``SpaceToDepth``: ``[N, C, H, W] -> [N, C*b^2, H/b, W/b]``."""

    op_type, since_version = "SpaceToDepth", 1
    also_versions = (28,)  # 28 adds mode CRD, handled in view()
    defaults = {"mode": "DCR"}  # the layout of versions before 28, which have no mode

    def view(self, node: Node):
        n, c, h, w, b = self._check(node)
        mode = self.attr(node, "mode")
        # output channel: (bh * b + bw) * C + c for DCR, c * b * b + bh * b + bw for CRD (28)
        perms = {"DCR": [0, 3, 5, 1, 2, 4], "CRD": [0, 1, 3, 5, 2, 4]}
        if mode not in perms:
            raise UnsupportedOpError(f"SpaceToDepth (node {node.name!r}): mode {mode!r}")
        if h % b or w % b:
            raise ShapeError(f"SpaceToDepth (node {node.name!r}): H, W not divisible by {b}")
        return (n, c, h // b, b, w // b, b), perms[mode], (n, c * b * b, h // b, w // b)
