"""Shared pieces of the passes that replace nodes by new ones (``onehot_gather``,
``tanh_sigmoid``): the graph's lookup tables, whether the replacement ops exist at an
opset, and :class:`NodeBuilder`, which names and types the new nodes."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np

from ...errors import UnsupportedOpError
from ..ir import Graph, Node, Value
from ..ops.base import lookup
from .node_eval import make_const, run_infer

__all__ = ["NodeBuilder", "graph_index", "ops_available"]

logger = logging.getLogger(__name__)


def graph_index(graph: Graph) -> tuple[dict[int, Node], dict[int, list[Node]], set[int], set[str]]:
    """``(producers, readers, outputs, names)`` of ``graph``: the producer and the
    readers of each value (by ``uid``), the uids of the graph outputs, and the value
    names in use (for :class:`NodeBuilder`)."""
    return (
        graph.producers(),
        graph.consumers(),
        {v.uid for v in graph.outputs},
        {v.name for v in graph.values()},
    )


def ops_available(ops: Iterable[str], opset: int) -> bool:
    """True when every op type in ``ops`` has an implementation at ``opset``."""
    try:
        for op in ops:
            lookup(op, opset)
    except UnsupportedOpError:
        return False
    return True


class NodeBuilder:
    """Builds the nodes that replace one matched pattern.

    Parameters
    ----------
    prefix : str
        Name of the node being replaced; new names are ``prefix/suffix`` (``.1``,
        ``.2``... appended on a clash).
    names : set of str
        Names in use; each new name is added, so builders sharing it never clash.
    opset : int
        The opset of the new nodes.
    dtype : numpy.dtype
        Placeholder type of a new output before its node's ``infer`` sets it.
    """

    def __init__(self, prefix: str, names: set[str], opset: int, dtype) -> None:
        self.prefix, self.names, self.opset, self.dtype = prefix, names, opset, dtype
        self.nodes: list[Node] = []

    def fresh(self, suffix: str) -> str:
        """A name ``prefix/suffix`` not in use yet, now reserved."""
        name, n = f"{self.prefix}/{suffix}", 0
        while name in self.names:
            n += 1
            name = f"{self.prefix}/{suffix}.{n}"
        self.names.add(name)
        return name

    def const(self, suffix: str, array) -> Value:
        """A constant value holding ``array``."""
        return make_const(self.fresh(suffix), np.asarray(array))

    def add(
        self, op: str, inputs: list[Value], attrs: dict | None = None, out: Value | None = None
    ) -> Value:
        """Append an ``op`` node reading ``inputs`` and return its output: ``out`` when
        given (the replaced pattern's output keeps its identity), else a new value; its
        shape and type come from the op's ``infer``.

        Raises
        ------
        CompileError
            When the op's ``infer`` rejects the node (see ``node_eval.run_infer``).
        """
        out = out or Value(self.fresh(op.lower()), (), self.dtype)
        node = Node(op, self.fresh(op), inputs, [out], attrs or {}, "", self.opset)
        run_infer(node)
        self.nodes.append(node)
        return out
