"""The pass infrastructure: :class:`PassResult`, :class:`Pass`, :class:`PassManager`.

Follows onnx-ir's pass design (``onnx_ir/passes``): a pass is a callable object whose
``call(graph)`` rewrites the graph (in place or not) and returns a
:class:`PassResult` saying whether anything changed; a :class:`PassManager` runs a list
of passes, optionally to a fixed point.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import CompileError
from ..ir import Graph

__all__ = ["Pass", "PassManager", "PassResult", "splice_nodes"]

logger = logging.getLogger(__name__)


def splice_nodes(graph: Graph, replace: dict[int, list], dropped: set[int]) -> None:
    """Rewrite ``graph.nodes`` in place, keeping their order: a node whose ``id`` is in
    ``replace`` becomes that list of nodes (empty: removed), one in ``dropped`` is
    removed, the others stay."""
    new_nodes: list = []
    for node in graph.nodes:
        if id(node) in replace:
            new_nodes.extend(replace[id(node)])
        elif id(node) not in dropped:
            new_nodes.append(node)
    graph.nodes = new_nodes


@dataclass
class PassResult:
    """What a pass returns.

    Parameters
    ----------
    graph : Graph
        The rewritten graph (often the same object, modified in place).
    modified : bool
        True when the pass changed anything.
    """

    graph: Graph
    modified: bool


class Pass:
    """Base class of a graph pass: subclasses implement :meth:`call`.

    ``pass_(graph)`` runs :meth:`call`, checks that it returned a :class:`PassResult`
    and logs what changed.
    """

    @property
    def name(self) -> str:
        """The pass's name (its class name)."""
        return type(self).__name__

    def call(self, graph: Graph) -> PassResult:
        """Rewrite ``graph`` (in place or into a new graph) and say whether anything
        changed. Subclasses implement this; callers use ``pass_(graph)``."""
        raise NotImplementedError(f"{self.name}.call")

    def __call__(self, graph: Graph) -> PassResult:
        before = len(graph.nodes)
        result = self.call(graph)
        if not isinstance(result, PassResult):
            raise TypeError(f"pass {self.name} returned {type(result).__name__}, not PassResult")
        logger.debug(
            "%s: modified=%s, nodes %d -> %d",
            self.name,
            result.modified,
            before,
            len(result.graph.nodes),
        )
        return result


class PassManager(Pass):
    """Run passes in order; with ``fixed_point`` repeat the list until a whole round
    modifies nothing.

    Parameters
    ----------
    passes : sequence of Pass
        Callables ``graph -> PassResult``.
    fixed_point : bool
        Repeat until no pass reports a change (default True).
    max_rounds : int
        Bound on the rounds; reaching it raises (a pass that always says "modified"
        is a bug, not a reason to loop forever).

    Raises
    ------
    CompileError
        When the fixed point is not reached in ``max_rounds`` rounds.
    """

    def __init__(self, passes: Sequence[Pass], fixed_point: bool = True, max_rounds: int = 50):
        self.passes = list(passes)
        self.fixed_point = fixed_point
        self.max_rounds = max_rounds

    def call(self, graph: Graph) -> PassResult:
        modified_any = False
        for round_ in range(self.max_rounds):
            modified = False
            for p in self.passes:
                result = p(graph)
                graph = result.graph
                modified |= result.modified
            modified_any |= modified
            if not (self.fixed_point and modified):
                return PassResult(graph, modified_any)
            logger.debug("pass manager: round %d modified the graph, running again", round_)
        names = ", ".join(getattr(p, "name", type(p).__name__) for p in self.passes)
        raise CompileError(
            f"passes [{names}] did not reach a fixed point in {self.max_rounds} rounds"
        )
