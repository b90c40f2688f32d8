"""BitCast (same-width reinterpretation, to bool, width mismatch refused) and
CenterCropPad (crop and pad in one node, negative axes) against ``onnx.reference``."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from refnode import check_node

from monolib.onnx_backend import MonolibBackend
from monolib.errors import ShapeError


def test_bitcast_float64_to_uint64_and_back():
    x = np.array([[1.5, -0.0, np.inf], [np.nan, 1e-300, -2.0]])
    got = check_node("BitCast", {"x": x}, ["y"], opset=26, to=TensorProto.UINT64)[0]
    assert got.tobytes() == x.tobytes()


def test_bitcast_width_mismatch_refused():
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT64)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    with pytest.raises(ShapeError, match="widths differ"):
        MonolibBackend.prepare(model, "CPU")


def test_center_crop_pad_mixed():
    x = np.arange(5 * 6 * 7, dtype=np.int32).reshape(5, 6, 7)
    check_node("CenterCropPad", {"x": x}, ["y"], opset=18, axes=[-1, 0],
               consts={"shape": np.array([4, 8])})
