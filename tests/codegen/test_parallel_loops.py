"""Memory-bound ops on the thread pool (issue 14): ``CEmitContext.parallel_for`` splits
an op's outermost loop into a task function when its work reaches ``PARALLEL_MIN_WORK``
(threadpool.h's ``ML_PAR_MIN_MEM``), and not below; windowed pools (pool.h
``ml_pool2d`` and the generic N-d loops), LRN, BatchNormalization, ConstantOfShape, Transpose (plain and tiled), Concat, Pad
and elementwise chains split that way give ONNX Runtime's results and the same bits at 1
and 2 threads. The pool's run-time gate: while every worker sleeps, only an op of
``ML_PAR_WAKE_WORK`` wakes them."""

from __future__ import annotations

import ctypes
import os
import re
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.backends.c import generate
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.build import lower
from monolib.compiler.passes import node_eval
from monolib.compiler.testing import build_shared, ort_run
from monolib.runtime import GraphModule, cpu, set_num_threads

RNG = np.random.default_rng(14)
F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    """A model of ``nodes``; the outputs' shapes from ONNX's shape inference."""
    ins = [helper.make_tensor_value_info(n, F32, s) for n, s in inputs]
    probe = helper.make_model(
        helper.make_graph(nodes, "par", ins, [], list(inits)),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    known = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    graph = helper.make_graph(nodes, "par", ins, [known[n] for n in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _run_threads(model, feeds):
    """Outputs at 1 and at 2 threads of the pool (then back to the default)."""
    gm = GraphModule(monolib.compile(model)["default"](cpu()))
    runs = []
    try:
        for n in (1, 2):
            set_num_threads(n)
            gm.run(**feeds)
            runs.append([gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())])
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    return runs


def _check(model, feeds, rtol=1e-6, atol=1e-6):
    """Results vs ONNX Runtime; 1 and 2 threads bit-identical."""
    want = ort_run(model, feeds)
    one, two = _run_threads(model, feeds)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_threshold_is_the_pools() -> None:
    header = kernel_header("threadpool.h")
    found = dict(re.findall(r"#define (ML_PAR_\w+) \(1 << (\d+)\)", header))
    assert generate.PARALLEL_MIN_WORK == 1 << int(found["ML_PAR_MIN_MEM"])
    assert generate.PARALLEL_ELEMENTWISE == generate.PARALLEL_MIN_WORK // 4
    # compute kernels (per-task set-up) keep the higher bar
    assert int(found["ML_PAR_MIN_WORK"]) > int(found["ML_PAR_MIN_MEM"])
    assert int(found["ML_PAR_WAKE_WORK"]) > int(found["ML_PAR_MIN_MEM"])


@pytest.mark.parametrize("op", ["Transpose", "Pad", "Relu"])
def test_split_above_threshold_only(op: str) -> None:
    """The same op a bit above and a bit below the threshold: a task function only
    above (Transpose/Pad: 8 units a float copied; Relu: 4 an element-step)."""
    per = 4 if op == "Relu" else 8
    rows = generate.PARALLEL_MIN_WORK // per // 64  # rows of 64 floats at the threshold
    sources = {}
    for name, n in (("above", rows + 2), ("below", rows - 2)):
        shape = [n, 64]
        if op == "Transpose":
            node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
        elif op == "Pad":
            shape = [n, 62]  # padded to 64 columns
            node = helper.make_node("Pad", ["x", "p"], ["y"], mode="constant")
        else:
            node = helper.make_node("Relu", ["x"], ["y"])
        inits = [numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "p")] if op == "Pad" else []
        sources[name] = lower(_model([node], [("x", shape)], ["y"], inits))[0]
    task = "ew_task_" if op == "Relu" else "par_task_"
    assert task in sources["above"]
    assert task not in sources["below"]


def test_pools_split_and_match() -> None:
    """MaxPool / AveragePool 2-D through ml_pool2d (borders, stride 1, 2 and 3, ceil
    mode, count_include_pad, a NaN plane, a fused epilogue; the separable max and
    average at vertical stride 1, horizontal 1 and 2) and a 1-D MaxPool through
    the generic loops on the pool: vs ONNX Runtime, 1 and 2 threads identical."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["m1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["x"], ["m2"], kernel_shape=[3, 2], strides=[1, 1],
                         pads=[1, 0, 1, 1]),
        helper.make_node("MaxPool", ["x"], ["m3a"], kernel_shape=[3, 3], strides=[3, 3],
                         ceil_mode=1),
        helper.make_node("Relu", ["m3a"], ["m3"]),
        helper.make_node("AveragePool", ["x"], ["a1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("AveragePool", ["x"], ["a2"], kernel_shape=[2, 5], strides=[2, 1],
                         pads=[0, 2, 1, 2], ceil_mode=1),
        helper.make_node("MaxPool", ["v"], ["m4"], kernel_shape=[5], strides=[2], pads=[2, 2]),
        helper.make_node("MaxPool", ["x"], ["m5"], kernel_shape=[3, 4], strides=[1, 2],
                         pads=[1, 2, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["a3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["a4"], kernel_shape=[4, 3], strides=[1, 2],
                         pads=[2, 1, 1, 2], count_include_pad=1),
    ]
    model = _model(nodes, [("x", [2, 12, 37, 45]), ("v", [3, 40, 1500])],
                   ["m1", "m2", "m3", "a1", "a2", "m4", "m5", "a3", "a4"])
    source = lower(model)[0]
    assert source.count("ml_pool2d(&pa_)") == 8
    assert "par_task_" in source  # the 1-D pool's planes
    x = RNG.standard_normal((2, 12, 37, 45)).astype(np.float32)
    v = RNG.standard_normal((3, 40, 1500)).astype(np.float32)
    _check(model, {"x": x, "v": v})
    # a NaN wins its windows (NumPy's max; ONNX Runtime skips it) and a -inf plane stays
    # -inf (ONNX Runtime gives -FLT_MAX where a window meets the padding): m1 by
    # NumPy's sliding windows
    x[1, 3, 5, 7] = np.nan
    x[0, 2] = -np.inf
    one, two = _run_threads(model, {"x": x, "v": v})
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(one[0], win.max(axis=(4, 5)))
    assert np.isnan(one[0][1, 3, 2:4, 3:4]).all()


@pytest.mark.parametrize("beta", [0.75, 0.5, 1.0, 0.6])
def test_lrn_planes_split_and_match(beta: float) -> None:
    """LRN by planes on the pool: beta 0.75 / 0.5 / 1 by square roots and a divide, any
    other by pow; vs ONNX Runtime, 1 and 2 threads identical (C 24, a window of 5
    clipped at both ends, 37x41 elements a plane: a partial block of 64)."""
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=0.02, beta=beta, bias=1.5)
    model = _model([node], [("x", [2, 24, 37, 41])], ["y"])
    assert "par_task_" in lower(model)[0]
    _check(model, {"x": RNG.standard_normal((2, 24, 37, 41)).astype(np.float32)}, rtol=2e-6)


def test_batchnorm_planes_split_and_match() -> None:
    """BatchNormalization (inference) by planes on the pool, constant statistics with a
    fused Relu and run-time statistics (the coefficients in the op's scratch); rank 3
    and 4: vs ONNX Runtime, 1 and 2 threads identical."""
    c = 24
    stats = [numpy_helper.from_array(v, n) for n, v in (
        ("sc", RNG.uniform(0.5, 2, c).astype(np.float32)), ("bi", RNG.standard_normal(c).astype(np.float32)),
        ("me", RNG.standard_normal(c).astype(np.float32)), ("va", RNG.uniform(0.5, 2, c).astype(np.float32)))]
    nodes = [
        helper.make_node("BatchNormalization", ["x", "sc", "bi", "me", "va"], ["b1"]),
        helper.make_node("Relu", ["b1"], ["y1"]),
        helper.make_node("BatchNormalization", ["z", "sc", "bi", "m", "v"], ["y2"]),
    ]
    model = _model(nodes, [("x", [2, c, 37, 41]), ("z", [3, c, 1500]), ("m", [c]), ("v", [c])],
                   ["y1", "y2"], stats)
    source = lower(model)[0]
    assert source.count("static void par_task_") == 2
    feeds = {"x": RNG.standard_normal((2, c, 37, 41)).astype(np.float32),
             "z": RNG.standard_normal((3, c, 1500)).astype(np.float32),
             "m": RNG.standard_normal(c).astype(np.float32),
             "v": RNG.uniform(0.5, 2, c).astype(np.float32)}
    _check(model, feeds, rtol=1e-5, atol=1e-5)


def test_constant_fill_splits_and_matches(monkeypatch) -> None:
    """ConstantOfShape (a constant shape) filled in blocks on the pool: 301x1000 floats,
    a partial last block (folding off, as for an output over MAX_FOLD_BYTES)."""
    monkeypatch.setattr(node_eval, "MAX_FOLD_BYTES", 0)
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["k"],
                         value=numpy_helper.from_array(np.array([0.25], np.float32))),
        helper.make_node("Add", ["k", "x"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array([301, 1000], np.int64), "s")]
    model = _model(nodes, [("x", [1000])], ["y"], inits)
    assert "par_task_" in lower(model)[0]
    _check(model, {"x": RNG.standard_normal(1000).astype(np.float32)})


def test_copies_split_and_match() -> None:
    """Transpose (a channel shuffle, a tiled 2-D transpose, one with a fused epilogue),
    Concat of two graph inputs, Pad (constant and reflect; at batch 1 split along the
    channels, reflect and edge with the last axis cropped on one side) on the pool."""
    nodes = [
        helper.make_node("Reshape", ["x", "s5"], ["x5"]),
        helper.make_node("Transpose", ["x5"], ["t1"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Transpose", ["w"], ["t2"], perm=[1, 0]),
        helper.make_node("Transpose", ["x"], ["t3a"], perm=[0, 2, 3, 1]),
        helper.make_node("Sigmoid", ["t3a"], ["t3"]),
        helper.make_node("Concat", ["x", "x2"], ["c"], axis=1),
        helper.make_node("Pad", ["x", "p"], ["p1"], mode="constant"),
        helper.make_node("Pad", ["x", "p"], ["p2"], mode="reflect"),
        # batch 1: split along the channels; the last axis cropped on one side
        helper.make_node("Pad", ["x1", "p"], ["p3"], mode="reflect"),
        helper.make_node("Pad", ["x1", "q"], ["p4"], mode="edge"),
    ]
    inits = [numpy_helper.from_array(np.array([2, 4, 6, 33, 35], np.int64), "s5"),
             numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "p"),
             numpy_helper.from_array(np.array([0, 0, 1, -2, 0, 0, -1, 3], np.int64), "q")]
    model = _model(nodes, [("x", [2, 24, 33, 35]), ("w", [301, 517]), ("x2", [2, 5, 33, 35]),
                           ("x1", [1, 24, 33, 35])],
                   ["t1", "t2", "t3", "c", "p1", "p2", "p3", "p4"], inits)
    source = lower(model)[0]
    assert source.count("static void par_task_") >= 8
    feeds = {"x": RNG.standard_normal((2, 24, 33, 35)).astype(np.float32),
             "w": RNG.standard_normal((301, 517)).astype(np.float32),
             "x2": RNG.standard_normal((2, 5, 33, 35)).astype(np.float32),
             "x1": RNG.standard_normal((1, 24, 33, 35)).astype(np.float32)}
    _check(model, feeds)


_GATE_C = r"""
static void noop(void* c, int64_t t, void* s) { (void)c; (void)t; (void)s; }
int32_t gate_start(void) { ml_set_num_threads(2); ml_parallel_for(2, noop, 0, 0, 0); return ml_pool.started; }
int32_t gate_asleep(void) { return ml_pool_asleep(); }
int64_t gate_tasks(double work) { return ml_par_tasks_mem(work, 1000); }
"""


def test_sleeping_pool_wakes_only_for_large_ops() -> None:
    src = "#define _GNU_SOURCE\n" + kernel_header("threadpool.h") + _GATE_C
    lib = build_shared(src)
    lib.gate_tasks.restype, lib.gate_tasks.argtypes = ctypes.c_int64, [ctypes.c_double]
    assert lib.gate_start() == 2
    small = float(generate.PARALLEL_MIN_WORK)
    wake = float(1 << 21)
    # the worker sleeps after ML_SPIN_NS (0.3 ms) without a job
    deadline = time.monotonic() + 5.0
    while not lib.gate_asleep() and time.monotonic() < deadline:
        time.sleep(0.002)
    assert lib.gate_asleep()
    assert lib.gate_tasks(small) == 1
    assert lib.gate_tasks(wake) == 8
    assert lib.gate_tasks(small / 2) == 1


def test_softmax_columns_split_and_match() -> None:
    """Softmax and LogSoftmax along a strided axis (over channels; YOLOv8's class
    softmax) split into blocks of columns: a large one (1 x 80 x 8400) on the pool, a
    batch of two with a partial last block (2 x 7 x 300) and a fused Relu; ORT's
    values, the same bits at 1 and 2 threads."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["s1"], axis=1),
        helper.make_node("LogSoftmax", ["z"], ["l2"], axis=1),
        helper.make_node("Relu", ["l2"], ["s2"]),
    ]
    model = _model(nodes, [("x", [1, 80, 8400]), ("z", [2, 7, 300])], ["s1", "s2"])
    source = lower(model)[0]
    assert source.count("static void par_task_") >= 1
    feeds = {"x": (3 * RNG.standard_normal((1, 80, 8400))).astype(np.float32),
             "z": (3 * RNG.standard_normal((2, 7, 300))).astype(np.float32)}
    _check(model, feeds)


def test_norm_rows_split_and_match() -> None:
    """InstanceNormalization (planes of 48 x 48), LayerNormalization with its mean and
    inverse-deviation outputs (rows of 384) and a fused Relu: the rows split over the
    pool; ORT's values, the same bits at 1 and 2 threads."""
    c, d = 96, 384
    nodes = [
        helper.make_node("InstanceNormalization", ["x", "g", "b"], ["n1"], epsilon=1e-5),
        helper.make_node("LayerNormalization", ["z", "lg", "lb"], ["l", "mu", "inv"], axis=-1),
        helper.make_node("Relu", ["l"], ["n2"]),
    ]
    inits = [numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "g"),
             numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array(RNG.standard_normal(d).astype(np.float32), "lg"),
             numpy_helper.from_array(RNG.standard_normal(d).astype(np.float32), "lb")]
    model = _model(nodes, [("x", [1, c, 48, 48]), ("z", [1, 300, d])],
                   ["n1", "n2", "mu", "inv"], inits)
    source = lower(model)[0]
    assert source.count("static void par_task_") >= 2
    feeds = {"x": RNG.standard_normal((1, c, 48, 48)).astype(np.float32),
             "z": RNG.standard_normal((1, 300, d)).astype(np.float32)}
    _check(model, feeds, rtol=1e-5, atol=1e-5)


def test_row_reductions_split_and_match() -> None:
    """ReduceMax / ReduceSum / ReduceL2 over contiguous rows (the last axis) split their
    rows over the pool: ORT's values, the same bits at 1 and 2 threads."""
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["a"], axes=[-1], keepdims=0),
        helper.make_node("ReduceSum", ["x", "ax"], ["b"], keepdims=1),
        helper.make_node("ReduceL2", ["x"], ["c"], axes=[-1], keepdims=0),
    ]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "ax")]
    model = _model(nodes, [("x", [96, 40, 70])], ["a", "b", "c"], inits)
    model.opset_import[0].version = 13
    source = lower(model)[0]
    assert source.count("static void par_task_") >= 3
    _check(model, {"x": RNG.standard_normal((96, 40, 70)).astype(np.float32)},
           rtol=1e-5, atol=1e-5)
