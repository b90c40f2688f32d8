"""Models with external data (ONNX's format for weights over protobuf's 2 GB limit):
compiled from their path, the weights read from beside the file."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.errors import CompileError


def _model(w: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[1]])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_compile_from_path_reads_external_data(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 64)).astype(np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(_model(w), str(path), save_as_external_data=True, location="m.weights",
              size_threshold=0)
    assert (tmp_path / "m.weights").stat().st_size >= w.nbytes  # really external
    gm = monolib.GraphModule(monolib.compile(str(path))["default"](monolib.cpu()))
    x = rng.standard_normal((1, 256)).astype(np.float32)
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), x @ w, rtol=1e-5, atol=1e-5)


def test_missing_external_file_is_a_compile_error(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(np.ones((8, 4), np.float32)), str(path), save_as_external_data=True,
              location="gone.bin", size_threshold=0)
    (tmp_path / "gone.bin").unlink()
    with pytest.raises(CompileError, match="m.onnx"):
        monolib.compile(str(path))
