"""LRN against ONNX Runtime and a NumPy transcription of the spec (``onnx.reference``'s
LRN sums channels only for ``c < N``, a bug): odd and even sizes (asymmetric
windows), windows wider than C, 3-D and 4-D inputs, float64."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from monolib.compiler.testing import ort_run
from monolib.onnx_backend import MonolibBackend

RNG = np.random.default_rng(3)
ALPHA, BETA, BIAS = 0.02, 0.75, 2.0


def _spec(x, size):
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    s = sum(sq[:, i : i + x.shape[1]] for i in range(size))
    return x / (BIAS + ALPHA / size * s) ** BETA


@pytest.mark.parametrize("shape,size,dtype", [((2, 7, 3, 4), 5, np.float32),
                                              ((1, 6, 5), 4, np.float32),
                                              ((2, 3, 2, 2), 9, np.float64)])
def test_lrn(shape, size, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=ALPHA, beta=BETA, bias=BIAS)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", t, shape)],
                              [helper.make_tensor_value_info("y", t, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    (got,) = MonolibBackend.prepare(model, "CPU").run([x])
    np.testing.assert_allclose(got, _spec(x, size), rtol=1e-5, atol=1e-6)
    if dtype == np.float32 and len(shape) == 4:
        np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
