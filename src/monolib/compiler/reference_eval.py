"""A tiny interpreter of the graph IR: run every node's NumPy ``reference`` in order.

It is the oracle for debugging a compiled model: ``evaluate(graph, feeds)`` gives what
the graph means, op by op, with no code generation involved; compare it with ONNX
Runtime to check the frontend and the ops, and with the compiled library to check the
codegen. ``trace=True`` keeps every intermediate value so the first diverging node can
be found.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from ..runtime.errors import InputError
from .ir import Graph, Value
from .passes.node_eval import run_reference

__all__ = ["evaluate", "evaluate_all"]

logger = logging.getLogger(__name__)


def _check_feed(v: Value, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    if v.name not in feeds:
        raise InputError(f"no value given for graph input {v.name!r} ({v.dtype}{list(v.shape)})")
    arr = np.asarray(feeds[v.name])
    if arr.shape != v.shape:
        raise InputError(
            f"input {v.name!r}: shape {list(arr.shape)} given, the graph takes {list(v.shape)}"
        )
    if arr.dtype != v.dtype:
        raise InputError(f"input {v.name!r}: dtype {arr.dtype} given, the graph takes {v.dtype}")
    return arr


def evaluate_all(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Run ``graph`` and return every value computed: ``Value.uid`` -> array
    (graph inputs and constants included).

    Parameters
    ----------
    graph : Graph
    feeds : dict
        Graph input name -> array of exactly the input's shape and dtype.

    Raises
    ------
    InputError
        A missing input, an unknown input name, a wrong shape or dtype.
    CompileError
        An op's reference failed (the message names the node).
    """
    names = {v.name for v in graph.inputs}
    unknown = [k for k in feeds if k not in names]
    if unknown:
        raise InputError(f"unknown input name(s) {unknown}; the graph takes {sorted(names)}")
    env: dict[int, np.ndarray] = {v.uid: _check_feed(v, feeds) for v in graph.inputs}
    for v in graph.values():
        if v.is_const:
            env[v.uid] = v.const
    for node in graph.nodes:
        args = [None if v is None else env[v.uid] for v in node.inputs]
        for v, arr in zip(node.outputs, run_reference(node, args)):
            env[v.uid] = arr
    return env


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run ``graph`` on ``feeds`` with the ops' NumPy references.

    Parameters
    ----------
    graph : Graph
    feeds : dict
        Graph input name -> ``np.ndarray`` (exact shape and dtype of the input).

    Returns
    -------
    list of numpy.ndarray
        One per graph output, in order (constant outputs included).

    Raises
    ------
    InputError
        A missing or unknown input, a wrong shape or dtype.
    CompileError
        An op's reference failed (the message names the node).
    """
    env = evaluate_all(graph, feeds)
    return [env[v.uid] for v in graph.outputs]
