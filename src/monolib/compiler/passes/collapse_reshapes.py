"""Collapse chains of reshape-like nodes into one ``Reshape``.

``Squeeze``, ``Unsqueeze``, ``Flatten``, ``Reshape`` and a ``Transpose`` that moves
only size-1 dims all keep the data's row-major order: they only relabel the shape.
A chain of them (``Unsqueeze -> LSTM``-style glue, ``Squeeze -> Unsqueeze``) equals
ONE ``Reshape`` of the chain's source to the final shape, so each such node whose
input comes from another one is rewritten as ``Reshape(source, const shape)`` (the
intermediate nodes then die in DCE, and a ``Reshape`` to the source's own shape is
removed by :mod:`.remove_noops`). A layout-keeping ``Transpose`` becomes a
``Reshape`` too, so the code generator treats it as a free alias.

Rewrites happen only when the op registry has ``Reshape`` at the node's opset.
"""

from __future__ import annotations

import logging

from ...errors import UnsupportedOpError
from ..ir import Graph, Node, shape_array
from ..ops.base import lookup
from ..symbolic import is_one
from .base import Pass, PassResult
from .node_eval import make_const

__all__ = ["CollapseReshapes", "is_reshape_like"]

logger = logging.getLogger(__name__)

_RESHAPES = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten"})


def is_reshape_like(node: Node) -> bool:
    """True when ``node``'s output 0 is input 0's data with another shape (row-major
    order kept)."""
    if node.domain != "" or len(node.outputs) != 1 or not node.inputs or node.inputs[0] is None:
        return False
    if node.op_type in _RESHAPES:  # not a Reshape to a run-time shape (issue 13)
        return node.op_type != "Reshape" or len(node.inputs) < 2 or node.inputs[1] is None \
            or node.inputs[1].const is not None
    if node.op_type == "Transpose":
        shape = node.inputs[0].shape
        perm = node.attrs.get("perm") or list(reversed(range(len(shape))))
        moved = [p for p in perm if not is_one(shape[p])]  # a run-time dim moves
        return moved == sorted(moved)
    return False


def _has_reshape(opset: int) -> bool:
    try:
        lookup("Reshape", opset)
    except UnsupportedOpError:
        return False
    return True


class CollapseReshapes(Pass):
    """Rewrite reshape-like nodes fed by reshape-like nodes (and layout-keeping
    Transposes) as one ``Reshape`` of the chain's source."""

    def call(self, graph: Graph) -> PassResult:
        producers = graph.producers()
        names = {v.name for v in graph.values()}
        changed = 0
        for node in graph.nodes:
            if not is_reshape_like(node) or node.inputs[0].is_const:
                continue
            src = node.inputs[0]
            prev = producers.get(src.uid)
            if prev is not None and is_reshape_like(prev) and not prev.inputs[0].is_const:
                src = prev.inputs[0]
            elif node.op_type != "Transpose":
                continue
            if not _has_reshape(node.opset):
                continue
            self._to_reshape(node, src, names)
            changed += 1
        if changed:
            logger.info("rewrote %d reshape-like nodes as single Reshapes", changed)
        return PassResult(graph, changed > 0)

    @staticmethod
    def _to_reshape(node: Node, src, names: set[str]) -> None:
        out = node.outputs[0]
        shape_name, k = f"{node.name}/shape", 0
        while shape_name in names:
            k += 1
            shape_name = f"{node.name}/shape.{k}"
        names.add(shape_name)
        shape = make_const(shape_name, shape_array(out.shape))  # Dims stay symbolic
        logger.debug("%s %r -> Reshape of %r to %s", node.op_type, node.name, src.name, out.shape)
        node.op_type = "Reshape"
        node.inputs = [src, shape]
        node.attrs = {"allowzero": 0} if node.opset >= 14 else {}
