"""ONNX ``If`` (1, 11, 13, 16, 19, 21, 23, 24, 25) on a run-time condition.

An ``If`` whose condition is known at compile time never gets here: the frontend
inlines the chosen branch. Otherwise both branches are compiled into the library
(:mod:`.subgraph`) and the op's C function runs one of them::

    if (cond) { then ops } else { else ops }

Each branch's outputs are planned straight into the ``If``'s outputs (no copy). An
output whose branches give different shapes (same rank) gets a computed dim per
differing axis (issue 13, :func:`~...symbolic.computed_symbol`, bounds spanning both
branches), written by the branch taken. Spec: https://onnx.ai/onnx/operators/onnx__If.html.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import CompileError, ShapeError
from ...ir import Node
from ...symbolic import Dim, computed_symbol, same
from ..base import OpDef, OutType, register
from ..sequence._carried import copy_in, join_branches
from .subgraph import compile_subgraph, evaluate_subgraph

__all__ = ["If"]

logger = logging.getLogger(__name__)

BRANCHES = ("then_branch", "else_branch")


def _bounds(d) -> tuple[int, int]:
    return (d.lo, d.hi) if isinstance(d, Dim) else (int(d), int(d))


def _dims_function(ctx, writes: list[str]) -> str:
    """Name of a C function writing the If's computed dims from the branch's: its own
    function, since a branch dim may be one the branch's ops wrote in ``S``, which the
    If's function (``S`` is ``restrict``) must not read."""
    from ...backends.c.generate import sym_prologue

    name = ctx.unique("cf_if_dims_")
    body = "\n".join(writes)
    ctx.source.functions.append(
        f"static void {name}(uint8_t* restrict arena) {{\n{sym_prologue(ctx.plan)}\n{body}\n}}")
    return name


@register
class If(OpDef):
    """``If``: input 0 the condition (one bool), then the captured values; attributes
    ``then_branch`` / ``else_branch`` (:class:`~...ir.Graph`, no formal inputs).

    Raises
    ------
    ShapeError
        Branch outputs of different count, dtype or rank (the node named).
    """

    op_type = "If"
    since_version = 1
    also_versions = (11, 13, 16, 19, 21, 23, 24, 25)
    foldable = False  # a constant condition is inlined by the frontend

    def body_types(self, inputs, attrs, key: str) -> list[tuple[tuple, np.dtype]]:
        """Types of the formal inputs of subgraph ``key``: a branch has none."""
        return []

    def infer(self, node: Node) -> list[OutType]:
        then_g, else_g = (node.attrs[k] for k in BRANCHES)
        if len(then_g.outputs) != len(else_g.outputs) or len(then_g.outputs) < len(node.outputs):
            raise ShapeError(f"If {node.name!r}: branches have {len(then_g.outputs)} and "
                             f"{len(else_g.outputs)} outputs, the node {len(node.outputs)}")
        out = []
        for i, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
            if a.seq is not None or b.seq is not None:  # a slot holding either branch's
                t = join_branches(node, i, a.seq, b.seq)
                node.outputs[i].seq = t
                out.append(t.slot())
                continue
            if a.dtype != b.dtype:
                raise ShapeError(f"If {node.name!r}: output {i} is {a.dtype} in then_branch, "
                                 f"{b.dtype} in else_branch")
            if len(a.shape) != len(b.shape):
                raise ShapeError(
                    f"If {node.name!r}: output {i} has rank {len(a.shape)} in then_branch and "
                    f"{len(b.shape)} in else_branch; monolib needs one rank per output")
            shape = []
            for k, (x, y) in enumerate(zip(a.shape, b.shape)):
                if same(x, y):
                    shape.append(x)
                    continue
                (lx, hx), (ly, hy) = _bounds(x), _bounds(y)
                sym = computed_symbol(f"{node.name}_out{i}_d{k}", hi=max(hx, hy), lo=min(lx, ly))
                shape.append(Dim.of(sym))
            out.append((tuple(shape), a.dtype))
        return out

    def reference(self, node: Node, inputs):
        key = BRANCHES[0] if bool(np.asarray(inputs[0]).reshape(-1)[0]) else BRANCHES[1]
        return evaluate_subgraph(node, key, [], inputs[int(node.attrs.get("_formal", 1)):])

    def emit(self, node: Node, ctx) -> str:
        subs = [compile_subgraph(node, k, ctx.plan_symbols) for k in BRANCHES]
        base = ctx.scratch_base + ctx.scratch_used
        ctx.scratch(max(s.arena_bytes for s in subs))
        outs = [ctx.plan.offset(v) for v in node.outputs]
        arms = []
        for key, sub in zip(BRANCHES, subs):
            pinned = {v.uid: off for v, off, o in zip(sub.outputs, outs, node.outputs)
                      if o.seq is None}
            em = sub.emit(ctx, base, pinned, f"{node.name}_{key[:4]}")
            lines, writes = [f"    {em.call}"], []
            for v, o in zip(sub.outputs, node.outputs):
                if o.seq is not None:  # a sequence: copied into the If's (larger) slot
                    lines.append(f"    {copy_in(ctx, ctx.ptr(o), o.seq, em.ptr(v), v.seq)}")
                    continue
                if em.offset(v) != ctx.plan.offset(o):
                    raise CompileError(f"If {node.name!r}: {key} output {v.name!r} was not "
                                       "placed in the If's output")
                writes += [f"  {ctx.set_symbol(y, f'{x}')}" for x, y in zip(v.shape, o.shape)
                           if isinstance(y, Dim) and not same(x, y)]
            if writes:
                lines.append(f"    {_dims_function(ctx, writes)}(arena);")
            arms.append("\n".join(lines))
        cond = ctx.ptr(node.inputs[0])
        return f"  if ({cond}[0]) {{\n{arms[0]}\n  }} else {{\n{arms[1]}\n  }}"
