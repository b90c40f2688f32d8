"""ONNX ``Transpose`` (1, 13, 21): ``out.shape[d] = in.shape[perm[d]]`` (``perm``
defaults to reversing the dims).

The emitter walks the output in row-major order (contiguous writes) after merging
dims that stay adjacent. When the innermost output dim reads the input with a large
stride, the loop over it and over the output dim that reads the input contiguously are
blocked in 16 x 16 tiles, so both sides stay in cache (the classic blocked 2-D
transpose).

A fused elementwise chain (SegFormer's Mix-FFN: depthwise conv, Transpose, GELU) runs
as a tile epilogue on rows of the output just transposed (in L1), or, where a task's
output rows are not one run, in a pass over the output after it. Applied per element
inside the transpose, it forced the element loop: SegFormer-B0's [128, 16384] ->
[16384, 128] Transpose + GELU took 6.3 ms at 1 thread (ONNX Runtime's Transpose and
Gelu: 2.7).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import ShapeError
from ...ir import Node, shape_size
from ...symbolic import is_dim, same, size_hint
from ..base import EmitContext, OpDef, OutType, register
from .loops import collapse_dims, contiguous_strides, has_epilogue, linear_offset
from .par_copy import COPY_WORK, parallel_copy

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["Transpose", "transpose_perm"]

logger = logging.getLogger(__name__)

_TILE = 16
#: Rows of the contiguously read dim per task of a 2-D ``ml_transpose2d`` (a multiple of
#: every vector width).
_ROW_BLOCK = 16
#: Fewest elements along each of the two dims for the register-block path (below, a
#: short dim keeps its lines in L1 and the element loop does as well).
_REGISTER_MIN = 8


def _register_blocks(shape, dst, src) -> tuple[int, int] | None:
    """``(p, last)`` when ``ml_transpose2d`` applies to a collapsed transpose: static
    sizes, the innermost output dim ``last`` read with a stride, another dim ``p`` read
    contiguously, both at least :data:`_REGISTER_MIN` long; else None."""
    if len(shape) < 2 or any(is_dim(v) for v in (*shape, *dst, *src)):
        return None
    last = len(shape) - 1
    unit = [d for d in range(last) if src[d] == 1]
    if src[last] == 1 or dst[last] != 1 or not unit:
        return None
    p = unit[0]
    if min(int(shape[p]), int(shape[last])) < _REGISTER_MIN:
        return None
    return p, last


def transpose_perm(node: Node) -> list[int]:
    """The permutation (default: reversed dims).

    Raises
    ------
    ShapeError
        When ``perm`` is not a permutation of the input dims.
    """
    rank = len(node.inputs[0].shape)
    perm = node.attrs.get("perm")
    if perm is None:
        return list(range(rank - 1, -1, -1))
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ShapeError(
            f"Transpose (node {node.name!r}): perm {node.attrs['perm']} is not a permutation of {rank} dims"
        )
    return perm


@register
class Transpose(OpDef):
    """``Transpose``: permute the dims."""

    op_type, since_version = "Transpose", 1
    also_versions = (23, 24, 25)  # new element types only

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        return [(tuple(x.shape[p] for p in transpose_perm(node)), x.dtype)]

    def reference(self, node: Node, inputs):
        return [np.array(np.transpose(inputs[0], transpose_perm(node)), order="C")]

    def epilogue_groups(self, node: Node):
        rank = len(node.outputs[0].shape)
        return [[], list(range(rank - 1)), [rank - 1]] if rank else [[], [], []]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        perm = transpose_perm(node)
        ist = contiguous_strides(x.shape)
        src_strides = [ist[p] for p in perm]
        dst_op = (contiguous_strides(y.shape), 0)
        epi = "0"
        if has_epilogue(ctx, len(y.shape)):
            if y.shape and not any(is_dim(v) for v in y.shape):
                epi = ctx.tile_epilogue(self.epilogue_groups(node))
            if epi == "0":  # run-time sizes, or no tile form: per element, as it is copied
                return parallel_copy(
                    ctx, y.shape, ctx.ptr(y), dst_op, ctx.ptr(x), (src_strides, 0),
                    lambda idx: idx)
        shape, (dst, src) = collapse_dims(y.shape, [dst_op, (src_strides, 0)])
        if x.dtype.itemsize == 4 and (plan := _register_blocks(shape, dst, src)) is not None:
            code, done = self._registers(ctx, ctx.ptr(y), ctx.ptr(x), shape, dst, src, *plan,
                                         epi=epi, n=int(y.shape[-1]) if epi != "0" else 1)
            return code if done else code + self._epilogue_pass(ctx, epi, y)
        # tiles help when both walked dims are long; a short inner dim (<= 64) already
        # keeps its source lines in L1 across consecutive outer iterations
        # (run-time strides and sizes: structural tests, the size at its upper bound)
        unit = [same(v, 1) for v in src]
        if len(shape) >= 2 and not unit[-1] and any(unit[:-1]) and size_hint(shape[-1]) > 64:
            code = self._blocked(ctx, ctx.ptr(y), ctx.ptr(x), shape, dst, src)
        else:
            code = parallel_copy(ctx, shape, ctx.ptr(y), (dst, 0), ctx.ptr(x), (src, 0))
        return code + self._epilogue_pass(ctx, epi, y)

    @staticmethod
    def _epilogue_pass(ctx, epi: str, y) -> str:
        """The tile epilogue ``epi`` over the whole (static) output ``y`` after it is
        written: blocks of rows of its ``[rows, last dim]`` view over the thread pool
        (empty for ``"0"``)."""
        if epi == "0":
            return ""
        n = int(y.shape[-1])
        m = shape_size(list(y.shape)) // max(n, 1)
        rb = max(1, 4096 // max(n, 1))  # rows per block: about 16 KiB of output
        blk = ctx.unique("eb")
        body = (f"{epi}({ctx.ptr(y)}, 0, {blk} * {rb}, "
                f"({blk} + 1) * {rb} < {m} ? ({blk} + 1) * {rb} : {m}, 0, {n});")
        return "\n" + ctx.parallel_for(blk, -(-m // rb), body, m * n * COPY_WORK)

    def _registers(self, ctx, out: str, inp: str, shape, dst, src, p: int, last: int,
                   epi: str = "0", n: int = 1) -> tuple[str, bool]:
        """``ml_transpose2d`` (transpose.h) on each 2-D slice of dims ``p`` (read
        contiguously) and ``last`` (written contiguously); the other dims, else row
        blocks of ``p``, over the thread pool. With a tile epilogue ``epi`` (``n``: the
        output's last dim) and no other dims, each row block's task runs it on the rows
        it wrote. Returns the code and whether it ran the epilogue."""
        from ..nn._gemm import include_gemm  # nn imports tensor ops: here, not at the top

        include_gemm(ctx)
        ctx.include("transpose.h")
        others = [d for d in range(len(shape)) if d not in (p, last)]
        var = {d: ctx.unique("i") for d in others}
        off_x = " + ".join([f"{var[d]} * {src[d]}" for d in others] or ["0"])
        off_y = " + ".join([f"{var[d]} * {dst[d]}" for d in others] or ["0"])
        work = shape_size(list(shape)) * COPY_WORK
        if others:
            loops = "".join(f"for (int64_t {var[d]} = 0; {var[d]} < {shape[d]}; ++{var[d]})\n"
                            for d in others[1:])
            body = (f"{loops}ml_transpose2d({shape[p]}, {shape[last]}, {inp} + {off_x}, "
                    f"{src[last]}, {out} + {off_y}, {dst[p]});")
            return ctx.parallel_for(var[others[0]], shape[others[0]], "{\n" + body + "\n}",
                                    work), epi == "0"
        rows, blk = int(shape[p]), ctx.unique("rb")
        step = _ROW_BLOCK
        body = (f"const int64_t r0_ = {blk} * {step};\n"
                f"const int64_t nr_ = r0_ + {step} < {rows} ? {step} : {rows} - r0_;\n"
                f"ml_transpose2d(nr_, {shape[last]}, "
                f"{inp} + r0_, {src[last]}, {out} + r0_ * {dst[p]}, {dst[p]});")
        if epi != "0":  # output rows r0_.. of the 2-D view: dst[p] / n rows of the epilogue's
            k = int(dst[p]) // n
            body += f"\n{epi}({out}, 0, r0_ * {k}, (r0_ + nr_) * {k}, 0, {n});"
        return ctx.parallel_for(blk, -(-rows // step), "{\n" + body + "\n}", work), True

    def _blocked(self, ctx, out: str, inp: str, shape, dst, src) -> str:
        """Tile the innermost output dim ``l`` and the dim ``p`` that reads contiguously."""
        p, last = [same(v, 1) for v in src].index(True), len(shape) - 1
        others = [d for d in range(len(shape)) if d not in (p, last)]
        var = {d: ctx.unique("i") for d in range(len(shape))}
        tp, tl = ctx.unique("tp"), ctx.unique("tl")
        idx = [var[d] for d in range(len(shape))]
        # the outermost loop (an outer dim, else the tiles of p) goes to the thread pool
        if others:
            outer, extent, lines = var[others[0]], shape[others[0]], []
            lines += [f"for (int64_t {var[d]} = 0; {var[d]} < {shape[d]}; ++{var[d]})"
                      for d in others[1:]]
            lines.append(f"for (int64_t {tp} = 0; {tp} < {shape[p]}; {tp} += {_TILE})")
        elif is_dim(shape[p]):  # a run-time count of tiles: one serial nest
            outer, extent = ctx.unique("tb"), 1
            lines = [f"for (int64_t {tp} = 0; {tp} < {shape[p]}; {tp} += {_TILE})"]
        else:
            outer, extent = ctx.unique("tb"), (int(shape[p]) + _TILE - 1) // _TILE
            lines = [f"const int64_t {tp} = {outer} * {_TILE};"]
        lines += [
            f"for (int64_t {tl} = 0; {tl} < {shape[last]}; {tl} += {_TILE})",
            f"for (int64_t {var[p]} = {tp}; {var[p]} < ({tp} + {_TILE} < {shape[p]} ? {tp} + {_TILE} : {shape[p]}); ++{var[p]})",
            f"for (int64_t {var[last]} = {tl}; {var[last]} < ({tl} + {_TILE} < {shape[last]} ? {tl} + {_TILE} : {shape[last]}); ++{var[last]})",
            f"{out}[{linear_offset(idx, dst)}] = {inp}[{linear_offset(idx, src)}];",
        ]
        work = shape_size(list(shape)) * COPY_WORK
        return ctx.parallel_for(outer, extent, "{\n" + "\n".join(lines) + "\n}", work)

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """Device Transpose: ``out[i] = in[i permuted back]``, one element per work item."""
        from ...backends.device.lowerings import flat_of, gather_kernel

        perm = transpose_perm(node)
        st = contiguous_strides(node.inputs[0].shape)
        return gather_kernel(node, ctx, lambda i: flat_of(i, [st[p] for p in perm]))
