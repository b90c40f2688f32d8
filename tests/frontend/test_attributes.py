"""Attribute conversion and schema defaults (no op registry needed)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from monolib.compiler.frontend.attributes import node_attributes, schema_defaults
from monolib.compiler.frontend.order import implicit_inputs, topological_order
from monolib.errors import CompileError


def test_defaults_follow_the_schema_version():
    conv = helper.make_node("Conv", ["x", "w"], ["y"])
    attrs = node_attributes(conv, 12)
    assert attrs == {"group": 1, "auto_pad": "NOTSET"}
    resize = node_attributes(helper.make_node("Resize", ["x", "", "s"], ["y"]), 13)
    assert resize["mode"] == "nearest" and resize["coordinate_transformation_mode"] == "half_pixel"
    assert resize["cubic_coeff_a"] == pytest.approx(-0.75)
    assert "antialias" not in resize and "antialias" in schema_defaults("Resize", 18)
    # Softmax's axis default changed at opset 13 (1 -> -1)
    assert schema_defaults("Softmax", 12)["axis"] == 1
    assert schema_defaults("Softmax", 13)["axis"] == -1


def test_given_attributes_are_converted():
    t = helper.make_tensor("v", onnx.TensorProto.FLOAT, [2], [1.5, 2.5])
    body = helper.make_graph([], "body", [], [])
    node = helper.make_node(
        "Foo",
        ["x"],
        ["y"],
        domain="com.example",
        f=0.5,
        i=3,
        s="text",
        t=t,
        g=body,
        fs=[1.0, 2.0],
        is_=[1, 2],
        ss=["a", "b"],
    )
    attrs = node_attributes(node, 1, convert_graph=lambda g: ("graph", g.name))
    assert attrs["f"] == 0.5 and attrs["i"] == 3 and attrs["s"] == "text"
    assert isinstance(attrs["t"], np.ndarray) and attrs["t"].dtype == np.float32
    np.testing.assert_array_equal(attrs["t"], [1.5, 2.5])
    assert attrs["g"] == ("graph", "body")
    assert attrs["fs"] == [1.0, 2.0] and attrs["is_"] == [1, 2] and attrs["ss"] == ["a", "b"]


def test_sparse_tensor_attribute_is_rejected():
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.0]),
        helper.make_tensor("i", onnx.TensorProto.INT64, [1], [0]),
        [4],
    )
    node = helper.make_node("Constant", [], ["y"], sparse_value=sparse, name="sp")
    with pytest.raises(CompileError, match="'sp'.*SPARSE_TENSOR"):
        node_attributes(node, 17)


def test_implicit_inputs_of_nested_subgraphs():
    inner = helper.make_graph(
        [helper.make_node("Neg", ["outer2"], ["n"])],
        "inner",
        [],
        [helper.make_tensor_value_info("n", 1, None)],
    )
    body = helper.make_graph(
        [
            helper.make_node("Add", ["outer1", "local"], ["a"]),
            helper.make_node("If", ["a"], ["r"], then_branch=inner, else_branch=inner),
        ],
        "body",
        [helper.make_tensor_value_info("local", 1, None)],
        [helper.make_tensor_value_info("r", 1, None)],
    )
    assert implicit_inputs(body) == {"outer1", "outer2"}
    uses = helper.make_node("If", ["c"], ["z"], then_branch=body, else_branch=body)
    makes = helper.make_node("Relu", ["x"], ["outer1"])
    order = topological_order([uses, makes], {"c", "x", "outer2"})
    assert [n.op_type for n in order] == ["Relu", "If"]
    with pytest.raises(CompileError, match="'outer2'"):
        topological_order([uses, makes], {"c", "x"})


def test_cycle_is_reported():
    a = helper.make_node("Relu", ["b"], ["a"], name="ra")
    b = helper.make_node("Relu", ["a"], ["b"], name="rb")
    with pytest.raises(CompileError, match="cycle"):
        topological_order([a, b], set())
