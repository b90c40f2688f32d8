"""float64 ``MatMul`` (the plain-loop path beside gemm.h's float32 one): broadcast batch
dims, 1-D operands and a fused elementwise tail, against NumPy in float64."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from monolib.onnx_backend import MonolibBackend

RNG = np.random.default_rng(41)


@pytest.mark.parametrize("sa,sb", [((2, 1, 3, 5), (4, 5, 6)), ((5,), (2, 5, 3)), ((3, 4), (4,))])
def test_float64_matmul_with_tail(sa, sb):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    want = np.tanh(np.matmul(a, b) + 0.5)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]),
             helper.make_node("Add", ["m", "c"], ["s"]),
             helper.make_node("Tanh", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.DOUBLE, sa),
                     helper.make_tensor_value_info("b", TensorProto.DOUBLE, sb)],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, want.shape)],
        [helper.make_tensor("c", TensorProto.DOUBLE, [], [0.5])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    got = MonolibBackend.prepare(model, "CPU").run([a, b])[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
