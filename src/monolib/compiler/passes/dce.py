"""Dead code elimination: drop nodes none of whose outputs reach a graph output."""

from __future__ import annotations

import logging

from ..ir import Graph, Node
from ..symbolic import Dim, is_computed
from .base import Pass, PassResult

__all__ = ["DeadCodeElimination", "live_nodes"]

logger = logging.getLogger(__name__)


def live_nodes(graph: Graph) -> list[Node]:
    """The nodes of ``graph`` that contribute to its outputs, in their order.

    Walks the nodes backwards from the graph outputs (the node list is topological),
    so it is linear in the graph's size.
    """
    live_values = {v.uid for v in graph.outputs}
    # computed dims (issue 13) that live values read: the node writing one stays even
    # when only its shape is used (a Shape folded over a SequenceAt's output)
    live_syms = {name for v in graph.outputs for name in _computed(v)}
    keep: list[Node] = []
    for node in reversed(graph.nodes):
        if any(v.uid in live_values or not live_syms.isdisjoint(_computed(v, False))
               for v in node.outputs):
            keep.append(node)
            live_values.update(v.uid for v in node.inputs if v is not None)
            live_syms.update(n for v in node.inputs if v is not None for n in _computed(v))
            # values read by subgraphs (GRAPH attributes) from the outer scope
            for g in _subgraphs(node):
                live_values.update(v.uid for v in g.values())
    keep.reverse()
    return keep


def _computed(v, data: bool = True) -> set[str]:
    """Names of the computed symbols in ``v``'s shape (and, with ``data``, in its
    symbolic constant's Dims)."""
    dims = [d for d in v.shape if isinstance(d, Dim)]
    if data and v.is_symbolic_const:
        dims += [d for d in v.const.reshape(-1) if isinstance(d, Dim)]
    return {s.name for d in dims for s in d.symbols() if is_computed(s)}


def _subgraphs(node: Node) -> list[Graph]:
    out = []
    for a in node.attrs.values():
        if isinstance(a, Graph):
            out.append(a)
        elif isinstance(a, list):
            out.extend(x for x in a if isinstance(x, Graph))
    return out


class DeadCodeElimination(Pass):
    """Remove every node whose outputs are not used, directly or not, by a graph output.

    Graph inputs are kept even when unused: they are the caller's interface.
    """

    def call(self, graph: Graph) -> PassResult:
        keep = live_nodes(graph)
        removed = len(graph.nodes) - len(keep)
        if removed:
            logger.info("removed %d dead nodes", removed)
            graph.nodes = keep
        return PassResult(graph, removed > 0)
