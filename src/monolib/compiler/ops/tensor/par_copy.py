"""Strided copies split over the thread pool: ``parallel_copy`` is ``loops.emit_copy``
with its outermost loop handed to ``ctx.parallel_for``.

A copy writes each output element once, so blocks of the outermost dim write disjoint
data and may run at once. Data movement is memory-bound: an element read and written
counts 8 units of threadpool.h's work (a float moved counts 4), so a copy of some 16K
elements or more may split (``PARALLEL_MIN_WORK``); smaller ones stay the plain loop
nest ``emit_copy`` writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ...ir import shape_size
from ...symbolic import is_dim, same, size_hint
from ..base import EmitContext
from .loops import Operand, collapse_dims, emit_copy

__all__ = ["COPY_WORK", "parallel_copy"]

logger = logging.getLogger(__name__)

#: Work units per element copied (one read, one write: a float moved counts 4).
COPY_WORK = 8


def parallel_copy(
    ctx: EmitContext,
    shape: Sequence[int],
    dst: str,
    dst_op: Operand,
    src: str,
    src_op: Operand,
    out_index: Callable[[list[str]], list[str]] | None = None,
) -> str:
    """``emit_copy`` (same arguments), its outermost dim over the thread pool when
    large.

    Without ``out_index`` the dims are collapsed first (as ``emit_copy`` does), so the
    split dim is the outermost of the collapsed nest; with it, dim 0 of ``shape``.
    """
    if any(not is_dim(n) and int(n) == 0 for n in shape):
        return ""
    if out_index is None:
        shape, (dst_st, src_st) = collapse_dims(shape, [dst_op, src_op])
    else:
        dst_st, src_st = list(dst_op[0]), list(src_op[0])
    if len(shape) < 1 or size_hint(shape[0]) < 2:
        return emit_copy(ctx, shape, dst, (dst_st, dst_op[1]), src, (src_st, src_op[1]),
                         out_index)
    var = ctx.unique("pc")
    inner_dst = (dst_st[1:], _shifted(dst_op[1], var, dst_st[0]))
    inner_src = (src_st[1:], _shifted(src_op[1], var, src_st[0]))
    index = None if out_index is None else (lambda idx: out_index([var, *idx]))
    inner = emit_copy(ctx, list(shape[1:]), dst, inner_dst, src, inner_src, index)
    if not inner:  # an inner dim of 0: nothing to copy
        return ""
    work = shape_size(list(shape)) * COPY_WORK
    return ctx.parallel_for(var, shape[0], inner, work)


def _shifted(base: int | str, var: str, stride: int) -> int | str:
    """C offset ``base + var * stride`` (a Dim base or stride renders as C over ``S``)."""
    if same(stride, 0):
        return base
    term = var if same(stride, 1) else f"{var} * {stride}"
    return term if str(base) == "0" else f"{base} + {term}"
