"""Shape arithmetic and C loop-nest emission shared by the math and tensor ops.

Everything here is pure: shapes in, strings out. The emitters write plain nested
``for`` loops over static bounds with offsets that are linear in the loop variables,
which GCC and Clang strength-reduce and vectorize on the innermost loop.

This module imports nothing from ``ops.math`` so both subpackages can use it without
an import cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from ....errors import ShapeError
from ...symbolic import is_dim, is_one, same
from ..base import EmitContext

__all__ = [
    "Operand",
    "as_c_array",
    "broadcast_shape",
    "broadcast_strides",
    "collapse_dims",
    "const_ints",
    "contiguous_strides",
    "emit_copy",
    "emit_loops",
    "emit_strided",
    "flat_index_exprs",
    "has_epilogue",
    "linear_offset",
    "normalize_axis",
]

logger = logging.getLogger(__name__)

Operand = tuple[Sequence[int], int]
"""An operand of a loop nest: (strides in elements, one per loop dim; base offset)."""


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major (C order) strides, in elements, of a tensor of ``shape``."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        n = shape[d + 1]  # a run-time dim (>= 1) stays symbolic
        strides[d] = strides[d + 1] * (n if is_dim(n) else max(int(n), 1))
    return tuple(strides)


def broadcast_shape(*shapes: Sequence[int], where: str = "") -> tuple[int, ...]:
    """The NumPy (multidirectional) broadcast of ``shapes``.

    Follows the ONNX "Broadcasting in ONNX" document: shapes are right-aligned and each
    dim pair must be equal or one of them 1.

    Raises
    ------
    ShapeError
        When two dims differ and neither is 1; the message names ``where``.
    """
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s):
            k = rank - len(s) + i
            # a run-time dim never broadcasts (is_one): it must meet 1 or itself
            if is_one(d):
                continue
            if not (is_one(out[k]) or same(out[k], d)):
                raise ShapeError(
                    f"{where or 'broadcast'}: shapes {[list(x) for x in shapes]} are not broadcastable"
                )
            out[k] = d if is_dim(d) else int(d)
    # a zero-sized dim broadcasts against 1 and stays 0
    for s in shapes:
        for i, d in enumerate(s):
            if not is_dim(d) and d == 0:
                out[rank - len(s) + i] = 0
    return tuple(out)


def broadcast_strides(in_shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, ...]:
    """Strides (elements) that read a contiguous ``in_shape`` tensor broadcast to
    ``out_shape``: 0 along broadcast (size-1 or missing) dims."""
    own = contiguous_strides(in_shape)
    lead = len(out_shape) - len(in_shape)
    strides = [0] * len(out_shape)
    for i, d in enumerate(in_shape):
        strides[lead + i] = 0 if is_one(d) else own[i]
    return tuple(strides)


def normalize_axis(axis: int, rank: int, where: str = "") -> int:
    """``axis`` in ``[-rank, rank)`` made non-negative.

    Raises
    ------
    ShapeError
        When ``axis`` is out of range.
    """
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{where or 'axis'}: axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def collapse_dims(
    shape: Sequence[int], operands: Sequence[Operand]
) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge adjacent dims that every operand walks linearly.

    Dims ``d`` and ``d+1`` merge when ``stride[d] == stride[d+1] * shape[d+1]`` for every
    operand (true of contiguous and of fully broadcast runs), so fewer, longer loops
    are emitted. Returns the new shape and each operand's new strides.
    """
    dims = [d for d in range(len(shape)) if not is_one(shape[d])]
    new_shape: list[int] = []
    new_strides: list[list[int]] = [[] for _ in operands]
    for d in dims:
        n = shape[d] if is_dim(shape[d]) else int(shape[d])
        if new_shape and all(same(st[-1], ops[0][d] * n) for st, ops in zip(new_strides, operands)):
            new_shape[-1] *= n
            for st, ops in zip(new_strides, operands):
                st[-1] = ops[0][d]
            continue
        new_shape.append(n)
        for st, ops in zip(new_strides, operands):
            st.append(ops[0][d] if is_dim(ops[0][d]) else int(ops[0][d]))
    return new_shape, new_strides


def linear_offset(index: Sequence[str], strides: Sequence[int], base: int | str = 0) -> str:
    """C expression ``base + i0*s0 + i1*s1 ...`` (terms with stride 0 dropped)."""
    terms = [] if str(base) == "0" else [str(base)]  # a Dim base never compares with ==
    for var, st in zip(index, strides):
        if same(st, 0):
            continue
        terms.append(var if same(st, 1) else f"{var}*{st}")
    return " + ".join(terms) if terms else "0"


def flat_index_exprs(flat: str, shape: Sequence[int]) -> list[str]:
    """Per-dim index expressions of the row-major element ``flat`` of ``shape``
    (``(flat / stride) % dim``; only evaluated if an epilogue reads them)."""
    strides = contiguous_strides(shape)
    if not flat.isidentifier():
        flat = f"({flat})"
    out = []
    for d, (n, st) in enumerate(zip(shape, strides)):
        e = flat if same(st, 1) else f"({flat} / {st})"
        if d > 0 and not is_one(n):
            e = f"({e} % {n})"
        elif is_one(n):
            e = "0"
        out.append(e)
    return out


def emit_loops(
    ctx: EmitContext,
    shape: Sequence[int],
    body: Callable[[list[str]], str],
    prefix: str = "i",
) -> str:
    """A nest of ``for`` loops over ``shape`` (outermost first) around ``body(vars)``.

    ``vars`` are the C names of the loop indices (``int64_t``). A zero-sized shape
    gives ``""``; a scalar shape gives the body in a block.
    """
    if any(not is_dim(n) and int(n) == 0 for n in shape):  # a run-time dim is >= 1
        return ""
    names = [ctx.unique(prefix) for _ in shape]
    code = body(names)
    for name, n in zip(reversed(names), reversed(list(shape))):
        code = f"for (int64_t {name} = 0; {name} < {n}; ++{name}) {{\n{code}\n}}"
    return "{\n" + code + "\n}"


def has_epilogue(ctx: EmitContext, value_rank: int) -> bool:
    """True when the node being emitted has a fused epilogue on output 0 (the context's
    ``output_expr`` is not the identity)."""
    probe = "ML_EPILOGUE_PROBE"
    return ctx.output_expr(probe, ["0"] * value_rank) != probe


def as_c_array(values: Sequence[int] | np.ndarray) -> str:
    """``{a, b, c}`` for a C array initializer of integers."""
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def emit_strided(
    ctx: EmitContext,
    shape: Sequence[int],
    operands: Sequence[Operand],
    body: Callable[[list[str], list[str] | None], str],
    collapse: bool = True,
) -> str:
    """A loop nest over ``shape`` walking several strided operands.

    ``body(offsets, index)`` gets one C offset expression per operand (``base +
    sum(i_d * stride_d)``) and the loop variables per dim of ``shape`` (``None`` when
    dims were collapsed, i.e. ``collapse=True``: then only the offsets are meaningful).
    """
    if any(not is_dim(n) and int(n) == 0 for n in shape):  # a run-time dim is >= 1
        return ""
    if collapse:
        cshape, cstrides = collapse_dims(shape, operands)
        return emit_loops(
            ctx,
            cshape,
            lambda idx: body(
                [linear_offset(idx, st, op[1]) for st, op in zip(cstrides, operands)], None
            ),
        )
    return emit_loops(
        ctx,
        shape,
        lambda idx: body([linear_offset(idx, op[0], op[1]) for op in operands], idx),
    )


def emit_copy(
    ctx: EmitContext,
    shape: Sequence[int],
    dst: str,
    dst_op: Operand,
    src: str,
    src_op: Operand,
    out_index: Callable[[list[str]], list[str]] | None = None,
) -> str:
    """Copy a strided view: ``dst[dst_off] = src[src_off]`` over ``shape``.

    With ``out_index`` (the node's output 0 has an epilogue) the value goes through
    ``ctx.output_expr`` with the output index ``out_index(loop_vars)``, and dims are
    not collapsed so each loop variable is one dim of ``shape``.
    """
    if out_index is None:
        return emit_strided(
            ctx, shape, [dst_op, src_op], lambda off, idx: f"{dst}[{off[0]}] = {src}[{off[1]}];"
        )
    return emit_strided(
        ctx,
        shape,
        [dst_op, src_op],
        lambda off, idx: (
            f"{dst}[{off[0]}] = {ctx.output_expr(f'{src}[{off[1]}]', out_index(idx))};"
        ),
        collapse=False,
    )


def const_ints(node, i: int, what: str) -> list[int] | None:
    """The values of constant input ``i`` as ints (``None`` when omitted).

    Raises
    ------
    ShapeError
        When the input is present but not a compile-time constant (monolib compiles
        static shapes, so shape-like inputs must be known).
    """
    v = node.input(i)
    if v is None:
        return None
    if v.const is None:
        raise ShapeError(
            f"{node.op_type} (node {node.name!r}): input {what!r} must be a compile-time constant"
        )
    # a shape computed from run-time dims keeps its Dims
    return [a if is_dim(a) else int(a) for a in np.asarray(v.const).reshape(-1)]
