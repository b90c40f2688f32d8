"""The ONNX checker run on a skeleton of a model with large initializers
(frontend/check.py): same verdicts as onnx.checker, without copying the weights."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.frontend.check import LARGE_TENSOR_ELEMENTS, check_model_light
from monolib.errors import CompileError


def _model(n: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((n, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("n", [8, LARGE_TENSOR_ELEMENTS // 4])  # small, and just large
def test_valid_models_pass_and_keep_their_weights(n):
    model = _model(n)
    before = model.SerializeToString()
    check_model_light(model)
    assert model.SerializeToString() == before  # the model itself is untouched


@pytest.mark.parametrize("n", [8, LARGE_TENSOR_ELEMENTS // 4])
def test_broken_models_fail_as_with_the_checker(n):
    model = _model(n)
    model.graph.node[0].input[0] = "undefined"
    with pytest.raises(onnx.checker.ValidationError) as light:
        check_model_light(model)
    with pytest.raises(onnx.checker.ValidationError) as full:
        onnx.checker.check_model(model)
    assert "undefined" in str(light.value) and "undefined" in str(full.value)


def test_the_frontend_names_the_checker(tmp_path):
    import monolib

    model = _model(LARGE_TENSOR_ELEMENTS // 4)
    model.graph.node[0].input[0] = "undefined"
    with pytest.raises(CompileError, match="ONNX checker rejected the model.*undefined"):
        monolib.compile(model)
