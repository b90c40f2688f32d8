"""Sequences carried by a ``Loop`` (``ops/control/loop.py``): the slot type that holds
every iteration's value, and the C that moves a value in and out of that slot.

A carried sequence grows by the elements its body inserts per iteration (``growth``,
read off the body's output type), so its slot's capacity is the initial capacity plus
``growth`` times the bound on the trip count. Its element bounds join the initial
value's and the body's; both are found by typing the body again with the carried
slot type until it settles. The copy back from the body's output into the slot checks
the count against the capacity at run time: a run past it stops with the library's
status (``ops/control/status.py``), naming the Loop.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, SeqType, Value, bound_shapes
from ..control.status import fail_statement

__all__ = ["body_type", "copy_back", "copy_in", "join_branches", "settle_carried"]

logger = logging.getLogger(__name__)


def body_type(v: Value) -> tuple:
    """``(shape, dtype, seq)`` of the body's formal input for the carried value ``v``
    (a sequence whose count and shapes are known only at run time)."""
    t = dataclasses.replace(v.seq, shapes=None, present=None)
    shape, dtype = t.slot()
    return shape, dtype, t


def _join(node: Node, k: int, slot: SeqType, out: SeqType, capacity: int) -> SeqType:
    if np.dtype(slot.elem_dtype) != np.dtype(out.elem_dtype):
        raise ShapeError(f"Loop {node.name!r}: carried sequence {k} holds {slot.elem_dtype} and "
                         f"leaves the body holding {out.elem_dtype}")
    if not slot.capacity:
        elem_max, mixed = out.elem_max, out.mixed
    elif not out.capacity:
        elem_max, mixed = slot.elem_max, slot.mixed
    else:
        elem_max = bound_shapes([slot.elem_max, out.elem_max])
        mixed = slot.mixed or out.mixed or slot.rank != out.rank
    return SeqType(slot.kind, slot.elem_dtype, capacity, tuple(elem_max), mixed=mixed)


def _retype(graph, run_infer) -> None:
    """Type every node of ``graph`` again, the subgraphs of its nodes first."""
    for n in graph.nodes:
        for a in n.attrs.values():
            if hasattr(a, "nodes") and hasattr(a, "outputs"):
                _retype(a, run_infer)
        run_infer(n)


def join_branches(node: Node, i: int, a: SeqType | None, b: SeqType | None) -> SeqType:
    """The type of an ``If`` output whose branches give sequences/optionals ``a`` and
    ``b``: a slot holding either (a sequence and an optional sequence: an optional).

    Raises
    ------
    ShapeError
        A tensor in one branch, or element dtypes that differ.
    """
    if a is None or b is None:
        raise ShapeError(f"If {node.name!r}: output {i} is a sequence in one branch only")
    kinds = {a.kind, b.kind}
    kind = a.kind if len(kinds) == 1 else (
        "optional_sequence" if kinds == {"sequence", "optional_sequence"} else None)
    if kind is None:
        raise ShapeError(f"If {node.name!r}: output {i} is {a.kind} and {b.kind}")
    joined = _join(node, i, dataclasses.replace(a, kind=kind), b,
                   max(a.capacity, b.capacity))
    return dataclasses.replace(joined, shapes=a.shapes if a.shapes == b.shapes else None,
                               present=a.present if a.present == b.present else None)


def settle_carried(node: Node, body, init: list[Value], bound: int | None) -> dict[int, SeqType]:
    """Type the carried sequences of Loop ``node``: ``{k: slot SeqType}`` for each
    carried value ``k`` that is a sequence/optional; the body's formal inputs are left
    with these types and its nodes typed again against them.

    Raises
    ------
    UnsupportedOpError
        A carried sequence that grows with no bound on the trip count (the hint names
        ``max_trip_count``).
    ShapeError
        A body output that is no sequence, or holds another dtype.
    """
    from ...passes.node_eval import run_infer

    ks = [k for k, v in enumerate(init) if v.seq is not None]
    if not ks:
        return {}
    formal = body.inputs[2:2 + len(init)]
    outs = body.outputs[1:1 + len(init)]
    types = {k: body_type(init[k])[2] for k in ks}
    for _ in range(8):
        for k in ks:
            formal[k].seq = types[k]
            formal[k].shape, formal[k].dtype = types[k].slot()
        _retype(body, run_infer)
        new = {}
        for k in ks:
            out = outs[k].seq
            if out is None:
                raise ShapeError(f"Loop {node.name!r}: carried value {k} enters as a sequence "
                                 "and leaves the body as a tensor")
            growth = max(out.capacity - types[k].capacity, 0)
            if growth and bound is None:
                raise UnsupportedOpError(
                    f"Loop {node.name!r}: carried sequence {k} grows by {growth} per iteration "
                    "and its trip count has no bound monolib can derive; give one with "
                    f"max_trip_count={{{node.name!r}: N}} (CLI: --max-trips {node.name}=N)")
            new[k] = _join(node, k, types[k], out, init[k].seq.capacity + growth * (bound or 0))
        if new == types:
            return types
        types = new
    raise ShapeError(f"Loop {node.name!r}: the types of its carried sequences do not settle")


def _view(ptr: str, t: SeqType) -> str:
    lay = t.layout
    return (f"((ml_seq){{(uint8_t*)({ptr}), {lay.capacity}, {lay.rank}, {lay.data_offset}, "
            f"{lay.stride}}})")


def copy_in(ctx, dst_ptr: str, dst: SeqType, src_ptr: str, src: SeqType) -> str:
    """C copying a sequence slot into a larger one (its count fits by construction)."""
    ctx.include("sequence.h")
    return f"ml_seq_copy({_view(dst_ptr, dst)}, {_view(src_ptr, src)}, {dst.layout.itemsize});"


def copy_back(ctx, node: Node, dst_ptr: str, dst: SeqType, src_ptr: str, src: SeqType) -> str:
    """C copying the body's output sequence into the carried slot; a count past the
    slot's capacity fails the run (``break``s out of the loop)."""
    ctx.include("sequence.h")
    s = _view(src_ptr, src)
    return (f"if (*ml_seq_count({s}) > {dst.capacity}) {{ "
            f"{fail_statement(ctx, node, 'sequence capacity')} break; }}\n    "
            + copy_in(ctx, dst_ptr, dst, src_ptr, src))
