"""Give every computed symbol (issue 13: a data-dependent dim, written by the library
during a run) a slot in the symbol array ``S``.

Ops make computed symbols in ``infer`` (:func:`~..symbolic.computed_symbol`); the
frontend's ``Graph.symbols`` holds only the input symbols. After simplification (so a
folded NonZero leaves no slot behind) :func:`register_computed` appends, in node order,
every computed symbol that a value's shape, a symbolic constant or a subgraph reads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np

from ..ir import Graph, Node, Value
from ..symbolic import Dim, Symbol, is_computed

__all__ = ["computed_symbols", "register_computed", "writes_computed"]

logger = logging.getLogger(__name__)


def _dims_of(v: Value) -> Iterator[Dim]:
    for d in v.shape:
        if isinstance(d, Dim):
            yield d
    if v.const is not None and v.const.dtype == object:
        for d in np.asarray(v.const).reshape(-1).tolist():
            if isinstance(d, Dim):
                yield d


def computed_symbols(graph: Graph) -> list[Symbol]:
    """The computed symbols ``graph`` reads (its values, symbolic constants and the
    values of ``Graph`` attributes, recursively), each once, in node order."""
    found: dict[str, Symbol] = {}
    graphs = [graph]
    while graphs:
        g = graphs.pop(0)
        for v in g.values():
            for d in _dims_of(v):
                for s in d.symbols():
                    if is_computed(s):
                        found.setdefault(s.name, s)
        for n in g.nodes:
            for a in n.attrs.values():
                graphs += [x for x in (a if isinstance(a, list) else [a]) if isinstance(x, Graph)]
    return list(found.values())


def register_computed(graph: Graph) -> Graph:
    """Give each computed symbol of ``graph`` a slot in ``S``.

    Parameters
    ----------
    graph : Graph
        After simplification (folded nodes leave no symbol behind).

    Returns
    -------
    Graph
        ``graph`` itself, :func:`computed_symbols` appended to ``graph.symbols`` after
        the input symbols (whose order the executor writes).
    """
    added = [s for s in computed_symbols(graph) if graph.symbols.get(s.name) is None]
    for s in added:
        graph.symbols.add(s)
    if added:
        logger.info("computed dims: %s", ", ".join(s.describe() for s in added))
    return graph


def writes_computed(node: Node) -> bool:
    """Whether ``node``'s outputs read a computed symbol none of its inputs reads: the
    node is where that size becomes known, so it must run code (an ``alias`` op such
    as a Reshape to a run-time shape cannot stay a free view)."""
    def syms(values) -> set[str]:
        return {s.name for v in values if v is not None for d in _dims_of(v)
                for s in d.symbols() if is_computed(s)}
    return bool(syms(node.outputs) - syms(node.inputs))
