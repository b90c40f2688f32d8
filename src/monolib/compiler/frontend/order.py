"""Topological order of ONNX nodes, subgraph reads included.

The ONNX IR requires nodes to be topologically sorted, but exporters get it wrong now
and then; sorting again costs little. A node depends on the producers of its inputs
AND of every outer-scope name its subgraphs (``If`` branches) read: those implicit
inputs must be computed before the node runs. The sort is stable (Kahn's algorithm
taking the lowest original index first), so a sorted model keeps its order.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Sequence

import onnx

from ...errors import CompileError

__all__ = ["implicit_inputs", "topological_order"]

logger = logging.getLogger(__name__)


def implicit_inputs(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from its enclosing scopes (recursively)."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for g in _node_subgraphs(node):
            used.update(implicit_inputs(g))
        defined.update(node.output)
    used.update(o.name for o in graph.output)
    return used - defined


def _node_subgraphs(node: onnx.NodeProto) -> Iterable[onnx.GraphProto]:
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _reads(node: onnx.NodeProto) -> set[str]:
    names = {n for n in node.input if n}
    for g in _node_subgraphs(node):
        names |= implicit_inputs(g)
    return names


def topological_order(nodes: Sequence[onnx.NodeProto], available: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` sorted so that every node comes after the producers of what it reads.

    Parameters
    ----------
    nodes : sequence of onnx.NodeProto
    available : set of str
        Names defined before these nodes run (inputs, initializers, outer scopes).

    Raises
    ------
    CompileError
        A node reads a name nothing defines, or the nodes form a cycle.
    """
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    waiting = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for name in _reads(n):
            j = producer.get(name)
            if j is None:
                if name not in available:
                    raise CompileError(
                        f"node {n.name!r} ({n.op_type}) reads {name!r}, which no node, "
                        "input or initializer defines"
                    )
            elif j != i:
                waiting[i] += 1
                users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for k in users[i]:
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(ready, k)
    if len(order) != len(nodes):
        stuck = [nodes[i].name for i, w in enumerate(waiting) if w > 0][:5]
        raise CompileError(f"the graph has a cycle through node(s) {stuck}")
    return order
