"""ONNX ``Col2Im`` (18) and the N-D col2im loop nest it shares with ConvTranspose.

Col2Im: input ``[N, C * prod(block_shape), L]`` (columns of sliding blocks, as im2col
lays them out), constant ``image_shape`` and ``block_shape`` -> ``[N, C, *image_shape]``:
every column value is added at its block position ``o_d = l_d * stride_d - pad_begin_d
+ k_d * dilation_d`` (positions in the padding are dropped), with ``L = prod(l_d)``,
``l_d = (image_d + pads - (dilation_d (block_d - 1) + 1)) / stride_d + 1`` (ONNX spec).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ..tensor.loops import const_ints
from ._common import attr_ints, require_float32

__all__ = ["Col2Im", "col2im_reference", "emit_col2im"]

logger = logging.getLogger(__name__)


def emit_col2im(ctx: EmitContext, col: str, y: str, channels: int, kernel: Sequence[int],
                grid: Sequence[int], out: Sequence[int], strides: Sequence[int],
                begin: Sequence[int], dilations: Sequence[int]) -> str:
    """C that adds ``col [channels * prod(kernel), prod(grid)]`` into ``y [channels,
    *out]`` (float pointers): one loop per kernel and grid dim, the innermost grid loop
    bounded once so it runs without a per-element range test."""
    r = len(kernel)
    kk, ll = int(np.prod(kernel)), int(np.prod(grid))
    osz = int(np.prod(out))
    lines = [f"for (int64_t c = 0; c < {channels}; ++c) {{",
             f"  const float* cc = {col} + c * {kk * ll};",
             f"  float* yc = {y} + c * {osz};"]
    for d in range(r):
        lines.append(f"  for (int64_t k{d} = 0; k{d} < {kernel[d]}; ++k{d}) {{")
    kflat = " + ".join(f"k{d} * {int(np.prod(kernel[d + 1:]))}" for d in range(r))
    lines.append(f"  const float* ck = cc + ({kflat}) * {ll};")
    for d in range(r - 1):
        lines += [f"  for (int64_t l{d} = 0; l{d} < {grid[d]}; ++l{d}) {{",
                  f"    int64_t o{d} = l{d} * {strides[d]} - {begin[d]} + k{d} * {dilations[d]};",
                  f"    if (o{d} < 0 || o{d} >= {out[d]}) continue;"]
    last = r - 1
    lines += [
        f"  int64_t off = k{last} * {dilations[last]} - {begin[last]};",
        f"  int64_t lo = off < 0 ? (-off + {strides[last] - 1}) / {strides[last]} : 0;",
        (f"  int64_t hi = {out[last]} - off > 0 ? ({out[last]} - off + {strides[last] - 1}) / "
         f"{strides[last]} : 0;"),
        f"  if (hi > {grid[last]}) hi = {grid[last]};",
    ]
    lrow = " + ".join([f"l{d} * {int(np.prod(grid[d + 1:]))}" for d in range(r - 1)] or ["0"])
    orow = " + ".join([f"o{d} * {int(np.prod(out[d + 1:]))}" for d in range(r - 1)] or ["0"])
    lines += [
        f"  const float* src = ck + {lrow};",
        f"  float* dst = yc + {orow};",
        f"  for (int64_t l = lo; l < hi; ++l) dst[l * {strides[last]} + off] += src[l];",
    ]
    lines.append("  " + "}" * (2 * r - 1) + "\n}")
    return "\n".join(lines)


def col2im_reference(col: np.ndarray, channels: int, kernel, grid, out, strides, begin,
                     dilations) -> np.ndarray:
    """NumPy col2im of one image: ``col [C*prod(kernel), prod(grid)]`` -> ``[C, *out]``."""
    y = np.zeros((channels, *out), np.float64)
    c = col.reshape(channels, *kernel, *grid).astype(np.float64)
    for k in np.ndindex(*kernel):
        pos = [np.arange(g) * s - b + kd * dl
               for g, s, b, kd, dl in zip(grid, strides, begin, k, dilations)]
        keep = [(p >= 0) & (p < o) for p, o in zip(pos, out)]
        src = c[(slice(None), *k)][(slice(None), *np.ix_(*keep))]
        y[(slice(None), *np.ix_(*[p[m] for p, m in zip(pos, keep)]))] += src
    return y.astype(col.dtype)


@register
class Col2Im(OpDef):
    """``Col2Im``: input ``[N, C*prod(B), L]`` float32, constant image_shape and
    block_shape -> ``[N, C, *image_shape]``.

    Raises
    ------
    ShapeError
        Non-constant shapes, or an input whose dims do not match them.
    """

    op_type, since_version = "Col2Im", 18

    def _geo(self, node: Node):
        x = node.inputs[0]
        image = const_ints(node, 1, "image_shape")
        block = const_ints(node, 2, "block_shape")
        r = len(image or [])
        st = attr_ints(node, "strides", [1] * r)
        dil = attr_ints(node, "dilations", [1] * r)
        pads = attr_ints(node, "pads", [0] * (2 * r))
        where = f"Col2Im (node {node.name!r})"
        if not r or len(block) != r or len(x.shape) != 3 or len(st) != r or len(pads) != 2 * r:
            raise ShapeError(f"{where}: input {list(x.shape)}, image_shape {image}, "
                             f"block_shape {block}")
        grid = [(image[d] + pads[d] + pads[r + d] - (dil[d] * (block[d] - 1) + 1)) // st[d] + 1
                for d in range(r)]
        kk = int(np.prod(block))
        if x.shape[1] % kk or x.shape[2] != int(np.prod(grid)) or min(grid) < 1:
            raise ShapeError(f"{where}: input {list(x.shape)} does not hold blocks {block} "
                             f"over a grid {grid} of image {image}")
        return x.shape[1] // kk, block, grid, image, st, pads[:r], dil

    def infer(self, node: Node) -> list[OutType]:
        c, _, _, image, *_ = self._geo(node)
        x = node.inputs[0]
        return [((x.shape[0], c, *image), x.dtype)]

    def reference(self, node: Node, inputs):
        c, block, grid, image, st, begin, dil = self._geo(node)
        x = inputs[0]
        return [np.stack([col2im_reference(x[n], c, block, grid, image, st, begin, dil)
                          for n in range(x.shape[0])])]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0)
        c, block, grid, image, st, begin, dil = self._geo(node)
        x, y = node.inputs[0], node.outputs[0]
        if y.size == 0:
            return ""
        n = x.shape[0]
        per_in, per_out = x.shape[1] * x.shape[2], c * int(np.prod(image))
        body = emit_col2im(ctx, f"({ctx.ptr(x)} + n * {per_in})", f"({ctx.ptr(y)} + n * {per_out})",
                           c, block, grid, image, st, begin, dil)
        return (f"memset({ctx.ptr(y)}, 0, {y.size * 4});\n"
                f"for (int64_t n = 0; n < {n}; ++n) {{\n{body}\n}}")
