"""softmax.h: the row max in four vector chains, exp fused with the row sum.

Rows of odd lengths (tails shorter than a vector and than the four-chain step), the max
at every position, -inf masks (exact zeros), exponents far below the max (exp
subnormal: 0) and NaN rows, vs NumPy in float64 and ONNX Runtime; 1 and 2 threads give
the same bits (rows are split, each row is computed alone).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.compiler.testing import ort_run
from monolib.runtime import GraphModule, cpu, set_num_threads

RNG = np.random.default_rng(11)


def _model(op: str, shape: tuple[int, ...]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], axis=-1)], "sm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray, threads: int) -> np.ndarray:
    fac = monolib.compile(model, shapes={"x": x.shape})
    set_num_threads(threads)
    try:
        gm = GraphModule(fac["default"](cpu()))
        gm.run(x=x)
        return gm.get_output(0).numpy().copy()
    finally:
        set_num_threads(1)


def _want(op: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    z = x64 - x64.max(axis=-1, keepdims=True)
    if op == "Softmax":
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("n", [1, 5, 17, 63, 64, 65, 131, 1001])
def test_rows_match_numpy_and_ort(op: str, n: int) -> None:
    rows = 7
    x = (RNG.standard_normal((rows, n)) * 5).astype(np.float32)
    for r in range(rows):  # the max in every lane, chain and the tail in turn
        x[r, (r * 37) % n] = 30.0
    y1, y2 = _run(_model(op, x.shape), x, 1), _run(_model(op, x.shape), x, 2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_allclose(y1, _want(op, x), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(y1, ort_run(_model(op, x.shape), {"x": x})[0],
                               rtol=2e-6, atol=1e-6)


def test_masks_far_exponents_and_nan() -> None:
    n = 83
    x = RNG.standard_normal((4, n)).astype(np.float32)
    x[0, ::3] = -np.inf  # masked: exactly 0
    x[1] = -20.0  # the sum stays ~1, so a subnormal exp would survive the scaling
    x[1, 0], x[1, 1:40] = 0.0, -90.0  # exp(-90) is subnormal: flushed to exactly 0
    x[2, 70] = np.nan  # a NaN row stays NaN
    x[3, :] = -1e30  # a constant row: uniform
    y = _run(_model("Softmax", x.shape), x, 1)
    assert np.all(y[0, ::3] == 0.0) and np.all(y[0, 1::3] > 0)
    assert np.all(y[1, 1:40] == 0.0)
    want = _want("Softmax", x[1:2])[0]
    np.testing.assert_allclose(y[1, [0, *range(40, n)]], want[[0, *range(40, n)]], rtol=2e-6)
    assert np.isnan(y[2]).all()
    np.testing.assert_allclose(y[3], np.full(n, 1.0 / n), rtol=1e-6)
    np.testing.assert_allclose(y.sum(axis=-1)[[0, 1, 3]], 1.0, rtol=1e-5)
