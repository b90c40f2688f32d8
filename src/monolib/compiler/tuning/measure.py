"""The micro-benchmark of one signature: every candidate in one small library.

For a Conv or Gemm signature (:func:`..ops.nn.conv.conv_candidates`,
:func:`..ops.nn.gemm.gemm_candidates`) :func:`measure` builds an ONNX model with one
node per candidate on the same inputs (the signature's exact shapes and attributes,
random weights; a Relu after each where the signature has a fused epilogue), compiles
it once with each node forced to its candidate, and times each op
with ``monolib_run_op`` on one thread: round robin over the candidates (so a burst of
load on a shared machine hits them alike), the median of the repeats.
"""

from __future__ import annotations

import ctypes
import logging
import statistics
import time
from typing import Any, Callable

import numpy as np

from ...abi.names import SET_NUM_THREADS
from ...errors import CompileError
from .select import Candidate, Selection, selecting

__all__ = ["bench_model", "conv_model", "gemm_model", "measure"]

logger = logging.getLogger(__name__)


def conv_model(sig: dict[str, Any], count: int, seed: int = 0) -> Any:
    """An ONNX model of ``count`` Convs of signature ``sig`` on one input ``x``.

    Node ``i`` is named ``cand<i>`` and writes output ``y<i>``; weights are random
    normal (an initializer, or the input ``w`` when the signature's weights are not
    constant).
    """
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    x, w = sig["x"], sig["w"]
    nd = len(x) - 2
    attrs = sig["attrs"]
    inits = []
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)]
    if sig["const_w"]:
        wt = (rng.standard_normal(w) / np.sqrt(np.prod(w[1:]))).astype(np.float32)
        inits.append(numpy_helper.from_array(wt, "w"))
    else:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, w))
    ins = ["x", "w"]
    if sig["bias"]:
        inits.append(numpy_helper.from_array(rng.standard_normal(w[0]).astype(np.float32), "b"))
        ins.append("b")
    nodes, outputs = [], []
    for i in range(count):
        conv_out = f"c{i}" if sig["epilogue"] == "fused" else f"y{i}"
        nodes.append(helper.make_node(
            "Conv", ins, [conv_out], name=f"cand{i}", group=sig["group"],
            kernel_shape=attrs["kernel_shape"][:nd], strides=attrs["strides"][:nd],
            dilations=attrs["dilations"][:nd], pads=attrs["pads"],
        ))
        if sig["epilogue"] == "fused":
            nodes.append(helper.make_node("Relu", [conv_out], [f"y{i}"], name=f"relu{i}"))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "tune", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    from onnx import shape_inference

    return shape_inference.infer_shapes(model)


def gemm_model(sig: dict[str, Any], count: int, seed: int = 0) -> Any:
    """An ONNX model of ``count`` Gemms of signature ``sig`` on one run-time ``a``.

    Node ``i`` is named ``cand<i>`` and writes ``y<i>``; B and C are random initializers
    where the signature has them constant, else inputs ``b`` / ``c``.
    """
    from onnx import TensorProto, helper, numpy_helper, shape_inference

    rng = np.random.default_rng(seed)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, sig["a"])]
    inits = []
    ins = ["a"]
    for name, shape, const in (("b", sig["b"], sig["const_b"]), ("c", sig["c"], sig["const_c"])):
        if shape is None:
            continue
        ins.append(name)
        if const:
            value = (rng.standard_normal(shape) / np.sqrt(max(shape))).astype(np.float32)
            inits.append(numpy_helper.from_array(value, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    nodes, outputs = [], []
    for i in range(count):
        out = f"g{i}" if sig["epilogue"] == "fused" else f"y{i}"
        nodes.append(helper.make_node(
            "Gemm", ins, [out], name=f"cand{i}", alpha=sig["alpha"], beta=sig["beta"],
            transA=sig["transA"], transB=sig["transB"],
        ))
        if sig["epilogue"] == "fused":
            nodes.append(helper.make_node("Relu", [out], [f"y{i}"], name=f"relu{i}"))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "tune", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return shape_inference.infer_shapes(model)


def bench_model(sig: dict[str, Any], count: int) -> Any:
    """The benchmark model of a signature (:func:`conv_model`, :func:`gemm_model`).

    Raises
    ------
    CompileError
        For a signature of another op.
    """
    makers = {"Conv": conv_model, "Gemm": gemm_model}
    if sig.get("op") not in makers:
        raise CompileError(f"tuning: no benchmark for signatures of op {sig.get('op')!r}")
    return makers[sig["op"]](sig, count)


def _compile_host(model: Any) -> Any:
    """``build.compile(model)`` for the host, its steps called directly (``build``
    imports the tuner: importing it back would be a cycle)."""
    from ...export.targets import Target
    from ..backends.registry import BACKENDS
    from ..pipeline import prepare

    tgt, backend = Target("c"), BACKENDS["c"]
    backend.accept(tgt)
    graph, fusion, plan = prepare(model)
    return backend.package(backend.generate(graph, fusion, plan, tgt, constants={}), tgt)


def _op_of(nodes: list[dict[str, Any]], count: int) -> list[int]:
    """Index of the fused op holding node ``cand<i>``, per ``i``."""
    where: dict[str, int] = {}
    for j, n in enumerate(nodes):
        for name in [n.get("name", ""), *n.get("fused", [])]:
            where.setdefault(name, j)
    missing = [i for i in range(count) if f"cand{i}" not in where]
    if missing:
        raise CompileError(f"tuning benchmark: no op holds node(s) {missing}")
    return [where[f"cand{i}"] for i in range(count)]


def measure(
    sig: dict[str, Any],
    candidates: list[Candidate],
    repeats: int = 11,
    budget_s: float = 2.0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Seconds per run of each candidate (median over up to ``repeats`` rounds).

    Parameters
    ----------
    sig : dict
        A Conv or Gemm signature (``conv_candidates``, ``gemm_candidates``).
    candidates : list of Candidate
    repeats : int
        Rounds of timing (each runs every candidate once, after one warm-up round).
    budget_s : float
        Rounds stop once this much time has gone into them (at least 3 rounds).
    clock : callable
        The timer (seconds).

    Returns
    -------
    dict
        Candidate label -> median seconds.

    Raises
    ------
    CompileError
        When the benchmark library cannot be built.
    """
    from ...runtime.device import cpu
    from ...runtime.graph_module import GraphModule

    forced = {f"cand{i}": c.label for i, c in enumerate(candidates)}
    model = bench_model(sig, len(candidates))
    with selecting(Selection(forced=forced)):
        factory = _compile_host(model)
    gm = GraphModule(factory["default"](cpu()))
    ex = gm.executor
    try:  # this library alone on one thread: the process-wide count is left alone
        ex._c_function(SET_NUM_THREADS, [ctypes.c_int32])(1)
    except AttributeError:
        logger.debug("benchmark library has no %s", SET_NUM_THREADS)
    rng = np.random.default_rng(1)
    feeds = {
        v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
        .astype(np.float32)
        for v in model.graph.input
    }
    gm.set_input(**feeds)
    gm.run()  # warm-up (and every op's inputs in place)
    ops = _op_of(factory.graph_json.get("nodes", []), len(candidates))
    times: list[list[float]] = [[] for _ in candidates]
    start = clock()
    for r in range(max(3, repeats)):
        for i, op in enumerate(ops):
            t = clock()
            ex.run_op(op)
            times[i].append(clock() - t)
        if r >= 2 and clock() - start > budget_s:
            break
    return {c.label: statistics.median(t) for c, t in zip(candidates, times)}
