"""A tiny interpreter of the graph IR: run every node's NumPy ``reference`` in order.

It is the oracle for debugging a compiled model: ``evaluate(graph, feeds)`` gives what
the graph means, op by op, with no code generation involved; compare it with ONNX
Runtime to check the frontend and the ops, and with the compiled library to check the
codegen. :func:`evaluate_all` keeps every intermediate value, and
:func:`first_divergence` finds the first value that differs from ONNX Runtime.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from ..errors import InputError
from .ir import Graph, Value
from .passes.node_eval import run_reference

__all__ = ["evaluate", "evaluate_all", "first_divergence"]

logger = logging.getLogger(__name__)


def _check_feed(v: Value, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    if v.name not in feeds:
        raise InputError(f"no value given for graph input {v.name!r} ({v.dtype}{list(v.shape)})")
    if v.seq is not None:  # a sequence (a list of arrays) or optional (None or a value)
        return feeds[v.name]
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


def _onnx_value_names(model) -> set[str]:
    names = {o for n in model.graph.node for o in n.output if o}
    return names | {o.name for o in model.graph.output}


def first_divergence(
    model,
    graph: Graph,
    feeds: Mapping[str, np.ndarray],
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> tuple[str, float] | None:
    """The first value (in node order) where the reference evaluation of ``graph``
    differs from ONNX Runtime running ``model``: a debugging aid.

    Every non-constant value of ``graph`` that keeps its ONNX name is exposed as an
    extra output of the model, so ONNX Runtime reports it too.

    Parameters
    ----------
    model : onnx.ModelProto
        The model ``graph`` was imported from.
    graph : Graph
    feeds : dict
        Inputs of ``graph`` (and, under their names, any ``constants=`` inputs the
        model still needs for ONNX Runtime).
    rtol, atol : float
        ``np.allclose`` tolerances.

    Returns
    -------
    (name, max_abs_error) or None
        None when every compared value agrees.
    """
    import onnx  # lazily: a debugging aid, not a dependency of the runtime path
    import onnxruntime as ort

    env = evaluate_all(graph, {v.name: feeds[v.name] for v in graph.inputs})
    known = _onnx_value_names(model)
    ordered = [v for n in graph.nodes for v in n.outputs if v.name in known and not v.is_const]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    for v in ordered:
        probe.graph.output.append(onnx.ValueInfoProto(name=v.name))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    model_inputs = {i.name for i in sess.get_inputs()}
    results = sess.run(None, {k: np.asarray(a) for k, a in feeds.items() if k in model_inputs})
    for v, want in zip(ordered, results):
        got = env[v.uid]
        if got.shape != want.shape or not np.allclose(
            got, want, rtol=rtol, atol=atol, equal_nan=True
        ):
            err = (
                float(np.max(np.abs(got.astype(np.float64) - want)))
                if got.shape == want.shape
                else np.inf
            )
            logger.info("first divergence at %r (max abs error %g)", v.name, err)
            return v.name, err
    return None
