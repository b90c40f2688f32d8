"""Compile a control-flow subgraph (an ``If`` branch, a ``Loop``/``Scan`` body) into the
C library of its enclosing graph: the reusable machinery of ``If``, ``Loop`` and
``Scan`` (and of any op holding a subgraph, e.g. ``SequenceMap``).

The frontend imports a subgraph as an :class:`~..ir.Graph` whose ``inputs`` are its
formal inputs (typed from the node's actual inputs) and whose nodes may read values of
enclosing scopes ("captures"). The node lists those captures after its formal inputs
(``node.attrs["_captures"]`` holds them as imported; ``node.attrs["_formal"]`` is the
number of formal inputs), so DCE, liveness, memory planning and fusion of the enclosing
graph see the reads with no special case.

API
---
:func:`free_values(graph, formal)` -- the captures of a freshly imported subgraph.

:func:`compile_subgraph(node, key, symbols)` -> :class:`CompiledSubgraph`: subgraph
``node.attrs[key]`` simplified, fused and planned (scratch included) on its own,
relative to offset 0 (captures rebound first when the enclosing passes replaced one);
cached per (node, key), so the scratch-measuring emission and the final one agree.

:meth:`CompiledSubgraph.emit(ctx, base, pinned)` -- inside a control-flow op's ``emit``
(host C): places the subgraph's arena at arena offset ``base`` (the op's
``ctx.scratch(compiled.arena_bytes)``), reads captured values at their offsets in the
enclosing plan, puts the regions of the values in ``pinned`` (uid -> arena offset, e.g.
an ``If`` branch's outputs straight in the ``If``'s outputs) where asked, emits the
subgraph's fused ops as ``static`` C functions and returns :class:`EmittedSubgraph`:
the statements that run them in order (``.call``) and a pointer expression for any
subgraph value (``.ptr(value)``).

:func:`evaluate_subgraph(node, key, feeds, captured)` -- the subgraph run with the ops'
NumPy references (the control-flow ops' ``reference``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....errors import CompileError
from ...ir import Graph, Node, Value, nbytes_at_bounds
from ...symbolic import SymbolTable

__all__ = ["CompiledSubgraph", "EmittedSubgraph", "compile_subgraph", "evaluate_subgraph",
           "free_values", "node_captures", "rebind"]

logger = logging.getLogger(__name__)


def free_values(graph: Graph, formal: Sequence[Value]) -> list[Value]:
    """The non-constant values ``graph``'s nodes and outputs read that neither its
    formal inputs nor its nodes produce (values of enclosing scopes), in first-use
    order. A nested control-flow node lists its own captures among its inputs, so one
    level of nodes is enough."""
    produced = {v.uid for n in graph.nodes for v in n.outputs}
    produced.update(v.uid for v in formal)
    out: dict[int, Value] = {}
    reads = [v for n in graph.nodes for v in n.inputs] + list(graph.outputs)
    for v in reads:
        if v is not None and not v.is_const and v.uid not in produced:
            out.setdefault(v.uid, v)
    return list(out.values())


def node_captures(node: Node) -> list[Value]:
    """The captured values as the node now reads them (after its formal inputs)."""
    return [v for v in node.inputs[int(node.attrs.get("_formal", len(node.inputs))):]]


def rebind(graph: Graph, mapping: Mapping[int, Value]) -> None:
    """Make ``graph`` (and its nested subgraphs) read ``mapping[v.uid]`` wherever it
    read ``v``: the enclosing graph's passes replaced a captured value (in the node's
    inputs) by another one, or by a constant."""
    if not mapping:
        return
    for n in graph.nodes:
        n.inputs = [mapping.get(v.uid, v) if v is not None else None for v in n.inputs]
        caps = n.attrs.get("_captures")
        if caps:
            n.attrs["_captures"] = [mapping.get(v.uid, v) for v in caps]
        for a in n.attrs.values():
            if isinstance(a, Graph):
                rebind(a, mapping)
    graph.outputs = [mapping.get(v.uid, v) for v in graph.outputs]


@dataclass
class CompiledSubgraph:
    """A subgraph simplified, fused and planned at offset 0.

    Attributes
    ----------
    graph : Graph
        Inputs: the formal inputs, then the captures (never written by the subgraph).
    formal : list of Value
    captures : list of Value
        Values of the enclosing graph, read at their enclosing offsets.
    fusion : Fusion
    plan : MemoryPlan
        Relative to offset 0; ``arena_bytes`` is the region the subgraph needs.
    outputs : list of Value
        ``fusion.outputs``: each output in a region of its own.
    """

    graph: Graph
    formal: list[Value]
    captures: list[Value]
    fusion: Any
    plan: Any
    outputs: list[Value]

    @property
    def arena_bytes(self) -> int:
        """Bytes of arena the subgraph's values and scratch need."""
        return int(self.plan.arena_bytes)

    def emit(self, ctx: Any, base: int, pinned: Mapping[int, int] | None = None,
             name: str = "sub") -> "EmittedSubgraph":
        """Emit the subgraph's ops into ``ctx``'s C file (see the module docstring).

        Parameters
        ----------
        ctx : CEmitContext
            The emitting control-flow op's context.
        base : int
            Arena offset of the subgraph's region (a multiple of 64).
        pinned : dict, optional
            ``Value.uid`` of a subgraph output -> arena offset where it must live.
        name : str
            Hint for the C function names.

        Raises
        ------
        CompileError
            When an op of the subgraph fails to emit (the node named).
        """
        from ...backends.c import generate as gen

        plan = _placed(self, ctx.plan, base, pinned or {})
        prefix = ctx.unique(f"{_c_ident(name)}_") + "_op_"
        functions, nodes, tail = gen.emit_ops(self.fusion, plan, ctx.params, ctx.source, prefix)
        if tail:
            raise CompileError(f"subgraph {self.graph.name!r}: {tail} bytes of unplanned scratch")
        ctx.source.functions.extend(functions)
        calls = "".join(f"{prefix}{i}(params, arena); " for i in range(len(nodes)))
        return EmittedSubgraph(plan, calls, ctx)


@dataclass
class EmittedSubgraph:
    """A subgraph placed in the arena and emitted: ``call`` runs its ops (C statements),
    ``ptr(v)`` is the typed pointer of any of its values."""

    plan: Any
    call: str
    ctx: Any

    def ptr(self, value: Value) -> str:
        """Typed pointer expression of ``value`` under the placed plan."""
        from ...backends.cstyle import HOST_C, tensor_pointer

        return tensor_pointer(HOST_C, value, self.plan, self.ctx.params)

    def offset(self, value: Value) -> int:
        """Arena offset of the non-constant ``value``."""
        return self.plan.offset(value)


def _c_ident(text: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in text)[:24]
    return out if out and not out[0].isdigit() else f"g_{out}"


_CACHE: "weakref.WeakKeyDictionary[Node, dict[str, CompiledSubgraph]]" = (
    weakref.WeakKeyDictionary()
)


def compile_subgraph(node: Node, key: str, symbols: SymbolTable) -> CompiledSubgraph:
    """Simplify, fuse and plan subgraph ``node.attrs[key]`` (see the module docstring).

    Parameters
    ----------
    node : Node
        The control-flow node (its inputs after ``_formal`` are the captures).
    key : str
        The GRAPH attribute (``"then_branch"``, ``"body"``...).
    symbols : SymbolTable
        The enclosing graph's symbols (the subgraph's Dims render over them).

    Returns
    -------
    CompiledSubgraph
        Cached per node and key.

    Raises
    ------
    CompileError
        From the passes (the node and the subgraph named).
    """
    cached = _CACHE.setdefault(node, {})
    if key in cached:
        return cached[key]
    from ...backends.c.generate import scratch_sizes
    from ...passes import simplify
    from ...passes.fuse_elementwise import fuse_elementwise
    from ...passes.plan_memory import plan_memory

    graph: Graph = node.attrs[key]
    formal = list(graph.inputs)
    original = node.attrs.get("_captures") or []
    current = node_captures(node)
    rebind(graph, {o.uid: c for o, c in zip(original, current) if o is not c})
    node.attrs["_captures"] = list(current)
    captures = free_values(graph, formal)
    sub = Graph(graph.name, [*formal, *captures], list(graph.outputs), list(graph.nodes),
                symbols=symbols)
    try:
        sub = simplify(sub).graph
        fusion = fuse_elementwise(sub)
        plan = plan_memory(fusion)
        scratch = scratch_sizes(fusion, plan)
        if scratch:
            plan = plan_memory(fusion, scratch)
    except CompileError as e:
        where = f"in {key} of {node.op_type} {node.name!r}"
        if where not in str(e):
            e.args = (f"{e.args[0] if e.args else ''} ({where})", *e.args[1:])
        raise
    # a nested control-flow node may have dropped a capture: read what the ops read
    captures = [c for c in captures if any(c is v for v in sub.inputs)]
    compiled = CompiledSubgraph(sub, formal, captures, fusion, plan, list(fusion.outputs))
    cached[key] = compiled
    logger.debug("%s %r %s: %d fused ops, %d bytes", node.op_type, node.name, key,
                 len(fusion.ops), plan.arena_bytes)
    return compiled


def _placed(sub: CompiledSubgraph, outer: Any, base: int, pinned: Mapping[int, int]):
    """``sub.plan`` moved to ``base``; captured values at their offsets in the enclosing
    plan ``outer`` and the regions of ``pinned`` values at the offsets asked (every
    value inside such a region moves with it: persistent regions hold nothing else)."""
    from ...passes.plan_memory import MemoryPlan

    p = sub.plan
    moves: list[tuple[int, int, int]] = []  # (relative start, size, new start)
    for c in sub.captures:
        if c.uid in p.offsets:
            moves.append((p.offsets[c.uid], nbytes_at_bounds(c), outer.offset(c)))
    for v in sub.outputs:
        if v.uid in pinned:
            moves.append((p.offsets[v.uid], nbytes_at_bounds(v), pinned[v.uid]))

    def where(off: int) -> int:
        for start, size, new in moves:
            if start <= off < start + max(size, 1):
                return new + (off - start)
        return off + base

    return MemoryPlan(
        offsets={u: where(o) for u, o in p.offsets.items()},
        roots=p.roots,
        arena_bytes=p.arena_bytes + base,
        buffers=p.buffers,
        scratch={t: o + base for t, o in p.scratch.items()},
        scratch_sizes=dict(p.scratch_sizes),
        sym_offset=outer.sym_offset,
        shape_offset=None,
    )


def evaluate_subgraph(node: Node, key: str, feeds: Sequence[Any],
                      captured: Sequence[Any]) -> list[Any]:
    """Run subgraph ``node.attrs[key]`` with every op's NumPy reference (the oracle of
    the control-flow ops' ``reference``).

    Parameters
    ----------
    node : Node
    key : str
        The GRAPH attribute.
    feeds : list of numpy.ndarray
        The formal inputs.
    captured : list of numpy.ndarray
        The node's inputs after its formal ones (the captured values).

    Returns
    -------
    list of numpy.ndarray
        The subgraph's outputs.
    """
    from ...passes.node_eval import run_reference

    graph: Graph = node.attrs[key]
    env: dict[int, Any] = {v.uid: a for v, a in zip(graph.inputs, feeds)}
    env.update({v.uid: a for v, a in zip(node.attrs.get("_captures") or [], captured)})

    def get(v: Value) -> Any:
        if v.is_const:
            return v.const
        if v.uid not in env:
            raise CompileError(f"{node.op_type} {node.name!r} ({key}): value {v.name!r} "
                               "has no value in the reference run")
        return env[v.uid]

    for n in graph.nodes:
        outs = run_reference(n, [None if v is None else get(v) for v in n.inputs])
        env.update({v.uid: a for v, a in zip(n.outputs, outs)})
    return [get(v) for v in graph.outputs]
