"""Softmax / LogSoftmax over contiguous float32 rows (kernels/softmax.h): rows split
over the thread pool give the single-thread result bit for bit; the values match a
float64 NumPy reference, rows holding NaN, +inf or only -inf included (NaN rows, as
NumPy and ONNX Runtime give); a fused elementwise tail is applied."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.build import lower
from monolib.runtime import GraphModule, cpu, set_num_threads

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(3)
ROWS, N = 48, 3001  # 48 x 3001 x 16 flops is above the pool's threshold; N odd: tails


def _model():
    """x [48, 3001] -> Softmax (last axis) -> y; LogSoftmax -> z; Softmax of x seen as
    [2, 24, 3001] times 3 -> w (the Mul fused into the Softmax op)."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["y"], axis=-1),
        helper.make_node("LogSoftmax", ["x"], ["z"], axis=-1),
        helper.make_node("Reshape", ["x", "shape3"], ["x3"]),
        helper.make_node("Softmax", ["x3"], ["s3"], axis=-1),
        helper.make_node("Mul", ["s3", "three"], ["w"]),
    ]
    graph = helper.make_graph(
        nodes,
        "softmax_rows",
        [helper.make_tensor_value_info("x", F32, [ROWS, N])],
        [
            helper.make_tensor_value_info("y", F32, [ROWS, N]),
            helper.make_tensor_value_info("z", F32, [ROWS, N]),
            helper.make_tensor_value_info("w", F32, [2, 24, N]),
        ],
        [
            numpy_helper.from_array(np.array([2, 24, N], np.int64), "shape3"),
            numpy_helper.from_array(np.array(3, np.float32), "three"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


def _input() -> np.ndarray:
    x = (RNG.standard_normal((ROWS, N)) * 8).astype(np.float32)
    x[1, 7] = np.nan
    x[2, 100] = np.inf
    x[3, :] = -np.inf
    x[4, ::3] = -np.inf  # exp gives exact zeros there
    x[5, :] = RNG.uniform(-200, 200, N)  # exp arguments far below -104: zeros
    return x


def _softmax64(x: np.ndarray, log: bool) -> np.ndarray:
    v = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        m = v.max(axis=-1, keepdims=True)
        s = np.exp(v - m).sum(axis=-1, keepdims=True)
        return (v - m - np.log(s)) if log else np.exp(v - m) / s


def _close(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> None:
    """Relative error within a few ulps plus the rounding of x - max in float32 (half
    an ulp of |x - max|, which exp turns into that much relative error); results below
    float32's smallest normal (1.2e-38) may be flushed to 0 (the kernel's exp does)."""
    with np.errstate(invalid="ignore"):
        shift = np.abs(x - x.max(axis=-1, keepdims=True)).astype(np.float64)
    bound = 8e-7 + shift * 2.0**-24 * 1.25
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    err = np.abs(got[~nan] - want[~nan])
    rel = np.where(err <= np.finfo(np.float32).tiny, 0.0,
                   err / np.maximum(np.abs(want[~nan]), 1e-38))
    worst = (rel / bound[~nan]).max()
    assert worst <= 1.0, worst


@pytest.fixture(scope="module")
def factory():
    return monolib.compile(_model(), target="c")


@pytest.fixture
def restore_threads():
    yield
    set_num_threads(len(os.sched_getaffinity(0)))


def _run(factory, x, threads):
    set_num_threads(threads)
    gm = GraphModule(factory["default"](cpu()))
    gm.run(x=x)
    return [gm.get_output(i).numpy().copy() for i in range(3)]


def test_rows_use_the_kernel():
    source = lower(_model())[0]
    assert source.count("ml_softmax_f32(&") == 3
    assert "ml_parallel_for" in source[source.index("static void ml_softmax_f32") :]


def test_threads_match_one_thread_and_float64(factory, restore_threads):
    x = _input()
    one = _run(factory, x, 1)
    two = _run(factory, x, 2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    y, z, w = one
    _close(y, _softmax64(x, False), x)
    # log-softmax: absolute error of (x - m) - log(s), a few ulps of the larger terms
    np.testing.assert_allclose(z, _softmax64(x, True), rtol=1e-6, atol=2e-6, equal_nan=True)
    # NaN and +inf rows are NaN throughout, as NumPy's (and ORT's) are; an all -inf row too
    for r in (1, 2, 3):
        assert np.isnan(y[r]).all() and np.isnan(z[r]).all()
    assert (y[4, ::3] == 0).all() and np.isneginf(z[4, ::3]).all()
    assert np.isclose(y[5].sum(), 1.0, rtol=1e-5)
    # opset 13 over the last axis of [2, 24, N], then the fused Mul by 3
    _close(w, 3 * _softmax64(x.reshape(2, 24, N), False), x.reshape(2, 24, N))
