"""Constant folding: compute at compile time every node whose inputs are all constant.

The same rule as the frontend applies while importing (see ``node_eval.fold_node``):
an op with ``foldable = True`` whose given inputs are all constant is evaluated with
its NumPy ``reference`` and its outputs become constants. This pass re-applies it to
graphs that later passes rewrote. ``Shape`` and ``Size`` nodes fold from the static
shape of their input even when its data is not known.
"""

from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, is_static
from .base import Pass, PassResult
from .node_eval import fold_node, set_type

__all__ = ["FoldConstants", "static_shape_fold"]

logger = logging.getLogger(__name__)


def static_shape_fold(node: Node) -> np.ndarray | None:
    """The value of a ``Shape``/``Size`` node from its input's shape, else None.

    ``Shape`` follows opset 15's ``start``/``end`` (negative counts from the back,
    clamped to ``[0, rank]``), which equals Python slicing of the shape. A shape with
    run-time dims gives an ``object`` array holding them (a symbolic constant).
    """
    x = node.input(0)
    if x is None:
        return None
    if node.op_type == "Shape" and node.domain == "":
        start = int(node.attrs.get("start", 0))
        end = node.attrs.get("end")
        dims = x.shape[start:] if end is None else x.shape[start : int(end)]
        if is_static(dims):
            return np.array(dims, dtype=np.int64)
        out = np.empty(len(dims), dtype=object)
        out[:] = list(dims)
        return out
    if node.op_type == "Size" and node.domain == "":
        size = x.size
        if isinstance(size, int):
            return np.array(size, dtype=np.int64)
        out = np.empty((), dtype=object)
        out[()] = size
        return out
    return None


class FoldConstants(Pass):
    """Fold every node whose given inputs are all constant (and ``Shape``/``Size``).

    Folded outputs keep their ``Value`` objects (now with ``const`` set), so graph
    outputs that become constant keep their names; the codegen copies them from params.
    """

    def call(self, graph: Graph) -> PassResult:
        kept: list[Node] = []
        folded = 0
        for node in graph.nodes:
            arr = static_shape_fold(node)
            if arr is not None:
                set_type(node.outputs[0], arr.shape, np.int64)
                node.outputs[0].const = arr
                folded += 1
            elif fold_node(node):
                folded += 1
            else:
                kept.append(node)
        graph.nodes = kept
        if folded:
            logger.info("folded %d constant nodes", folded)
        return PassResult(graph, folded > 0)
