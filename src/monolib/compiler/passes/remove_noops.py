"""Remove nodes that compute their input unchanged.

Exporters leave many of them once shapes are static: ``Cast`` to the same type,
``Reshape``/``Squeeze``/``Unsqueeze``/``Flatten``/``Expand`` to the same shape, a
``Slice`` taking everything, a ``Pad`` by zeros, ``Add``/``Sub`` of zeros, ``Mul``/``Div``
by ones, a ``Transpose`` that moves only size-1 dims, one-input ``Concat``/``Sum``/
``Max``/``Min``/``Mean``. Each is rewired away (its readers read its input) when the
output has the input's shape and dtype. A node whose output is a graph output is kept,
so graph output names stay those of the ONNX model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..ir import Graph, Node, Value
from ..symbolic import same_shape
from .base import Pass, PassResult
from .collapse_reshapes import is_reshape_like

__all__ = ["RemoveNoOps", "noop_input"]

logger = logging.getLogger(__name__)


def _const(node: Node, i: int) -> np.ndarray | None:
    v = node.input(i)
    return None if v is None else v.const


def _always(node: Node) -> bool:
    return True


def _slice_all(node: Node) -> bool:
    steps = node.input(4)
    if steps is None:
        return True
    return steps.const is not None and bool(np.all(steps.const > 0))


def _pad_zero(node: Node) -> bool:
    pads = _const(node, 1) if node.input(1) is not None else node.attrs.get("pads")
    return pads is not None and not np.any(np.asarray(pads))


def _all_equal(value: float) -> Callable[[Node], bool]:
    def check(node: Node) -> bool:
        c = _const(node, 1)
        return c is not None and c.size > 0 and bool(np.all(c == value))

    return check


def _single_input(node: Node) -> bool:
    return len([v for v in node.inputs if v is not None]) == 1


#: op type -> condition (besides equal shape and dtype) under which output == input 0
_RULES: dict[str, Callable[[Node], bool]] = {
    "Cast": _always,
    "CastLike": _always,
    "Reshape": _always,
    "Squeeze": _always,
    "Unsqueeze": _always,
    "Flatten": _always,
    "Expand": _always,
    "Identity": _always,
    "Slice": _slice_all,
    "Pad": _pad_zero,
    "Transpose": is_reshape_like,
    "Add": _all_equal(0),
    "Sub": _all_equal(0),
    "Mul": _all_equal(1),
    "Div": _all_equal(1),
    "Concat": _single_input,
    "Sum": _single_input,
    "Max": _single_input,
    "Min": _single_input,
    "Mean": _single_input,
}


def noop_input(node: Node) -> Value | None:
    """The input ``node`` passes through unchanged, or None when it computes something.

    The data input is input 0 (``Add(x, 0)``; ``Add(0, x)`` is not recognized, which
    only leaves a cheap node in place).
    """
    rule = _RULES.get(node.op_type)
    if rule is None or node.domain != "" or len(node.outputs) != 1 or not node.inputs:
        return None
    x, out = node.inputs[0], node.outputs[0]
    if x is None or x.is_const or not same_shape(x.shape, out.shape) or x.dtype != out.dtype:
        return None
    return x if rule(node) else None


class RemoveNoOps(Pass):
    """Rewire readers of a no-op node's output to its input and drop the node."""

    def call(self, graph: Graph) -> PassResult:
        outputs = {v.uid for v in graph.outputs}
        replace: dict[int, Value] = {}  # removed output uid -> the value it equals
        kept: list[Node] = []
        for node in graph.nodes:
            # readers come after their producers (topological order): rewire as we go
            if replace:
                node.inputs = [None if v is None else replace.get(v.uid, v) for v in node.inputs]
            x = noop_input(node)
            if x is None or node.outputs[0].uid in outputs:
                kept.append(node)
                continue
            replace[node.outputs[0].uid] = x
            logger.debug("removed no-op %s %r", node.op_type, node.name)
        graph.nodes = kept
        if replace:
            logger.info("removed %d no-op nodes", len(replace))
        return PassResult(graph, bool(replace))
