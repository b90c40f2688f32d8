"""MaxPool/AveragePool/LpPool beyond 2-D and float32: 3-D windows with pads, strides,
dilations and ceil_mode, int8/uint8 MaxPool, and Indices in both storage orders,
against ``onnx.reference``."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(1)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 1],
                     "dilations": [2, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 2, 2], "strides": [2, 1, 2], "pads": [1, 1, 0, 1, 0, 1],
                         "count_include_pad": 1, "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [2, 2, 3], "auto_pad": "SAME_UPPER"}),
])
def test_3d(op, attrs):
    x = RNG.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)
    check_node(op, {"x": x}, ["y"], **attrs)


@pytest.mark.parametrize("dtype", [np.int8])
def test_maxpool_int(dtype):
    x = RNG.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 2, 6, 5)).astype(dtype)
    # onnx.reference pads integer inputs with NaN and fails: ONNX Runtime is the oracle
    check_node("MaxPool", {"x": x}, ["y"], kernel_shape=[3, 2], pads=[1, 1, 1, 0],
               oracle="ort")


@pytest.mark.parametrize("order", [0, 1])
def test_maxpool_indices(order):
    x = RNG.permutation(2 * 2 * 5 * 6 * 3).astype(np.float32).reshape(2, 2, 5, 6, 3)
    check_node("MaxPool", {"x": x}, ["y", "i"], kernel_shape=[2, 2, 2], strides=[2, 2, 1],
               storage_order=order)


def test_lppool_3d_p3():
    x = RNG.standard_normal((1, 2, 4, 5, 6)).astype(np.float32)
    check_node("LpPool", {"x": x}, ["y"], opset=18, kernel_shape=[2, 3, 2], p=3,
               pads=[1, 0, 1, 0, 1, 0], strides=[1, 2, 2], rtol=1e-4)


def test_maxpool_propagates_nan():
    # NumPy's max is the oracle: ONNX Runtime and onnx.reference drop NaN depending on
    # where it sits in the window
    from onnx import TensorProto, helper

    from monolib.onnx_backend import MonolibBackend

    x = RNG.standard_normal((1, 1, 4, 6)).astype(np.float32)
    x[0, 0, 0, 1] = x[0, 0, 3, 5] = x[0, 0, 2, 2] = np.nan  # first, last and inner taps
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 3], pads=[0, 1, 1, 0])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [1, 1, 4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 5])])
    got = MonolibBackend.prepare(helper.make_model(graph), "CPU").run([x])[0]
    xp = np.pad(x[0, 0], [(0, 1), (1, 0)], constant_values=-np.inf)
    want = np.lib.stride_tricks.sliding_window_view(xp, (2, 3)).max(axis=(2, 3))
    np.testing.assert_array_equal(got[0, 0], want)
