"""Frontend errors: dynamic dims, unsupported ops (all at once), checker, loading."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from frontend.onnx_util import F32, make_model, requires_ops
from monolib.compiler.frontend import import_model
from monolib.errors import CompileError, MonolibError, ShapeError, UnsupportedOpError


def _relu_model(shape, opset=17):
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [("x", F32, shape)],
        [("y", F32, shape)],
        opset=opset,
    )


@pytest.mark.parametrize(
    "shape, dim, symbol",
    [(["batch", 3, 8], 0, "'batch'"), ([1, 3, "W"], 2, "'W'"), ([-1, 3, 8], 0, None)],
)
def test_dynamic_dim_without_shape_names_input_and_dim(shape, dim, symbol):
    with pytest.raises(ShapeError) as e:
        import_model(_relu_model(shape))
    msg = str(e.value)
    assert "'x'" in msg and f"dim {dim}" in msg and "shapes=" in msg
    if symbol:
        assert symbol in msg


def test_given_shape_must_agree_with_declared_dims():
    with pytest.raises(ShapeError, match=r"'x'.*rank 2.*rank 3"):
        import_model(_relu_model(["N", 3, 8]), shapes={"x": (1, 3)})
    with pytest.raises(ShapeError, match=r"'x': dim 1 is 4.*declares 3"):
        import_model(_relu_model(["N", 3, 8]), shapes={"x": (1, 4, 8)})
    with pytest.raises(CompileError, match="'y' is not an input"):
        import_model(_relu_model(["N", 3, 8]), shapes={"y": (1, 3, 8)})


@requires_ops("Relu")
def test_minus_one_dims_take_the_given_shape():
    g = import_model(_relu_model([-1, 3, -1]), shapes={"x": (2, 3, 5)})
    assert g.inputs[0].shape == (2, 3, 5) and g.outputs[0].shape == (2, 3, 5)


def test_every_unsupported_op_is_listed_once():
    then_g = helper.make_graph(
        [helper.make_node("FancyOp", ["x"], ["t"], domain="com.example", name="in_branch")],
        "then",
        [],
        [helper.make_tensor_value_info("t", F32, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F32, None)],
    )
    nodes = [
        helper.make_node("FancyOp", ["x"], ["a"], domain="com.example", name="fancy1"),
        helper.make_node("OtherOp", ["a"], ["b"], domain="com.example", name="other1"),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    model = make_model(
        nodes,
        [("x", F32, [2]), ("c", onnx.TensorProto.BOOL, [])],
        [("y", F32, [2]), ("b", F32, [2])],
        extra_opsets={"com.example": 1},
    )
    with pytest.raises(UnsupportedOpError) as e:
        import_model(model, constants={"c": True})
    msg = str(e.value)
    assert "2 unsupported operator(s)" in msg
    assert "com.example::FancyOp (opset 1)" in msg and "'fancy1'" in msg and "'in_branch'" in msg
    assert "com.example::OtherOp (opset 1)" in msg and "'other1'" in msg


def test_checker_failure_is_a_compile_error():
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"])]
    model = make_model(nodes, [("x", F32, [2])], [("y", F32, [2])], check=False)
    with pytest.raises(CompileError, match="checker rejected the model.*nowhere"):
        import_model(model)


def test_unsupported_opset_is_named():
    # an older opset is converted (tests/frontend/test_old_opsets.py); a newer one than
    # the installed onnx knows is refused, naming both
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(UnsupportedOpError, match=f"opset {newest + 1}.*11 to {newest}"):
        import_model(_relu_model([2], opset=newest + 1))


def test_bad_model_arguments():
    with pytest.raises(CompileError, match="not found"):
        import_model("/nonexistent/model.onnx")
    with pytest.raises(CompileError, match="not a serialized ONNX model"):
        import_model(b"\xff\x00garbage")
    with pytest.raises(CompileError, match="path, bytes or onnx.ModelProto"):
        import_model(12)


def test_external_data_is_rejected(tmp_path):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    w.external_data.add(key="location", value="w.bin")
    (tmp_path / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F32, [4])],
        [helper.make_tensor_value_info("y", F32, [4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(CompileError, match="external data"):
        import_model(model)


def test_errors_are_monolib_errors():
    assert issubclass(ShapeError, MonolibError) and issubclass(UnsupportedOpError, MonolibError)


@requires_ops("Relu")
def test_opset_range_boundaries():
    assert import_model(_relu_model([2], opset=11)).nodes[0].opset == 11
    newest = onnx.defs.onnx_opset_version()
    assert import_model(_relu_model([2], opset=newest)).nodes[0].opset == newest
    model = _relu_model([2], opset=newest)
    model.opset_import[0].version = newest + 1
    with pytest.raises(CompileError, match=f"opset {newest + 1}|{newest + 1}.*opset"):
        import_model(model)


def test_shape_values_must_be_ints():
    with pytest.raises(ShapeError, match="'x': shape .* is not a sequence of ints"):
        import_model(_relu_model(["N", 3]), shapes={"x": ("a", 3)})
    with pytest.raises(ShapeError, match="'x': shape .* negative"):
        import_model(_relu_model(["N", 3]), shapes={"x": (-2, 3)})


def test_input_without_declared_shape():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", F32, None)], [("y", F32, [2])], check=False
    )
    # the ONNX checker itself refuses a graph input with no shape field
    with pytest.raises(CompileError, match="checker rejected.*shape"):
        import_model(model)
