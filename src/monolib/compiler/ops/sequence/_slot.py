"""What the sequence and optional ops share: reading an input's :class:`~...ir.SeqType`,
typing a sequence output, the C view of a slot (``ml_seq`` of ``sequence.h``), and
run-time element shapes as computed dims (issue 13, ``symbolic.computed_symbol``)."""

from __future__ import annotations

import logging

from ....errors import ShapeError
from ...ir import Node, SeqType, Value, is_static
from ...symbolic import Dim

__all__ = ["c_seq", "c_shape", "element_shape", "input_seq", "is_seq", "is_tensor",
           "seq_output", "write_shape_symbols"]

logger = logging.getLogger(__name__)


def is_seq(v: Value | None) -> bool:
    """True for a sequence or optional value (one with ``seq``)."""
    return v is not None and v.seq is not None


def is_tensor(v: Value | None) -> bool:
    """True for a plain tensor value."""
    return v is not None and v.seq is None


def input_seq(node: Node, i: int, kinds: tuple[str, ...] = ("sequence",)) -> SeqType:
    """The SeqType of ``node``'s input ``i``.

    Raises
    ------
    ShapeError
        The input is omitted, a tensor, or of a kind not in ``kinds``.
    """
    v = node.input(i)
    if v is None or v.seq is None or v.seq.kind not in kinds:
        what = "missing" if v is None else (v.seq.kind if v.seq else "a tensor")
        raise ShapeError(f"node {node.name!r} ({node.op_type}): input {i} is {what}, "
                         f"expected {' or '.join(kinds)}")
    return v.seq


def seq_output(node: Node, i: int, t: SeqType):
    """Give output ``i`` the SeqType ``t``; returns its ``(shape, dtype)`` for ``infer``."""
    node.outputs[i].seq = t
    return t.slot()


def c_seq(ctx, v: Value) -> str:
    """The C ``ml_seq`` value viewing ``v``'s slot (``ctx.include("sequence.h")`` first)."""
    lay = v.seq.layout
    return (f"((ml_seq){{(uint8_t*)({ctx.ptr(v)}), {lay.capacity}, {lay.rank}, "
            f"{lay.data_offset}, {lay.stride}}})")


def c_shape(ctx, shape, prefix: str = "shp") -> tuple[str, str]:
    """``(declaration, name)``: a local ``int64_t`` array holding ``shape`` (ints, or
    Dims rendered as C reading the symbols)."""
    name = ctx.unique(prefix)
    dims = ", ".join(f"{d}" for d in shape) or "0"
    return f"const int64_t {name}[{max(len(shape), 1)}] = {{{dims}}};", name


def element_shape(node: Node, t: SeqType, index: int | None) -> tuple:
    """The shape of one element taken out of a sequence of SeqType ``t``: static when
    known at compile time (element ``index`` of known shapes, or every element of the
    same known shape), else one computed dim per axis bounded by ``t.elem_max`` (the
    op writes them with :func:`write_shape_symbols`).

    Raises
    ------
    ShapeError
        The sequence can hold no element (capacity 0), or holds elements of several
        ranks.
    """
    if t.mixed:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): the sequence holds elements "
                         "of several ranks; monolib takes out elements of one rank")
    if t.capacity == 0:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): the sequence is always "
                         "empty; no element can be taken out of it")
    if t.shapes is not None and t.shapes:
        if index is not None and -len(t.shapes) <= index < len(t.shapes):
            return t.shapes[index]
        if len(set(t.shapes)) == 1:
            return t.shapes[0]
    return tuple(_element_dim(node, t, a) for a in range(t.rank))


#: computed dims of elements taken out at a run-time index, by what decides them: the
#: sequence's known shapes and the index value (two sequences of equal shapes give
#: the same dims at one index: an Add of their elements broadcasts), else the node's
#: output; typing a node again (a Loop body settling) finds the same dim
_DIMS: dict[tuple, Dim] = {}


def _element_dim(node: Node, t: SeqType, axis: int) -> Dim:
    from ...symbolic import computed_symbol  # issue 13's data-dependent dims

    index = node.input(1)
    key = ((t.shapes, axis, index.uid) if t.shapes is not None and index is not None
           else (node.outputs[0].uid, axis))
    dim = _DIMS.get(key)
    if dim is None or dim.hi != t.elem_max[axis]:
        dim = _DIMS[key] = Dim.of(computed_symbol(f"{node.name}_d{axis}",
                                                  hi=t.elem_max[axis]))
    return dim


def write_shape_symbols(ctx, out: Value, record: str) -> str:
    """C statements writing ``out``'s computed dims from the C shape record ``record``
    (an ``int64_t*``); ``""`` for a static shape."""
    if is_static(out.shape):
        return ""
    return "\n".join(f"  {ctx.set_symbol(d, f'{record}[{a}]')}"
                     for a, d in enumerate(out.shape))
