"""Frontend: weights, constants, folding, aliases, names, metadata (tiny models)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from frontend.onnx_util import F32, I64, make_model, requires_ops
from monolib.compiler.frontend import import_model
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(0)


@requires_ops("Add", "Mul", "Relu")
def test_initializers_and_constant_nodes_become_constants():
    w = RNG.standard_normal((2, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", 1, [3], [1, 2, 3])),
        helper.make_node("Constant", [], ["k"], value_float=0.5),
        helper.make_node("Add", ["x", "c"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "w"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "k"], ["m2"], name="mul2"),
        helper.make_node("Relu", ["m2"], ["y"], name="relu"),
    ]
    model = make_model(nodes, [("x", F32, [2, 3])], [("y", F32, [2, 3])], {"w": w})
    g = import_model(model)
    assert [n.op_type for n in g.nodes] == ["Add", "Mul", "Mul", "Relu"]
    add, mul, mul2, _ = g.nodes
    np.testing.assert_array_equal(add.inputs[1].const, [1, 2, 3])
    assert add.inputs[1].dtype == np.float32
    np.testing.assert_array_equal(mul.inputs[1].const, w)
    assert mul2.inputs[1].const.shape == () and mul2.inputs[1].const == np.float32(0.5)
    assert [v.name for v in g.inputs] == ["x"] and [v.name for v in g.outputs] == ["y"]
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(evaluate(g, {"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-6)


@requires_ops("Add", "Mul")
def test_constant_value_int_and_ints_attrs():
    nodes = [
        helper.make_node("Constant", [], ["a"], value_int=3),
        helper.make_node("Constant", [], ["b"], value_ints=[1, 2]),
        helper.make_node("Constant", [], ["f"], value_floats=[1.5, 2.5]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Mul", ["x", "f"], ["y"]),
    ]
    model = make_model(nodes, [("x", F32, [2])], [("y", F32, [2]), ("s", I64, [2])])
    g = import_model(model)
    assert [n.op_type for n in g.nodes] == ["Mul"]
    s = g.outputs[1]
    assert s.name == "s" and s.is_const and s.dtype == np.int64
    np.testing.assert_array_equal(s.const, [4, 5])
    x = np.array([1, 2], np.float32)
    y, s_out = evaluate(g, {"x": x})
    np.testing.assert_array_equal(y, [1.5, 5.0])
    np.testing.assert_array_equal(s_out, [4, 5])


@requires_ops("Gather", "Unsqueeze", "Concat", "Reshape", "Cast", "Mul")
def test_shape_chains_fold_with_static_shapes():
    # flatten x [N, C, H, W] to [N, C*H*W] through Shape/Gather/Mul/Concat/Reshape
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Constant", [], ["i0"], value=helper.make_tensor("i0", I64, [], [0])),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Constant", [], ["m1"], value_ints=[-1]),
        helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
        helper.make_node("Cast", ["shape"], ["shape_f"], to=F32),
        helper.make_node("Cast", ["shape_f"], ["shape_i"], to=I64),
        helper.make_node("Reshape", ["x", "shape_i"], ["y"]),
        helper.make_node("Size", ["x"], ["size"]),
    ]
    model = make_model(
        nodes,
        [("x", F32, ["N", 3, "H", 4])],
        [("y", F32, ["N", None]), ("size", I64, [])],
        {"ax": np.array([0], np.int64)},
    )
    g = import_model(model, shapes={"x": (2, 3, 5, 4)})
    assert g.op_counts() == {"Reshape": 1}
    np.testing.assert_array_equal(g.nodes[0].inputs[1].const, [2, -1])
    assert g.outputs[0].shape == (2, 60)
    assert g.outputs[1].is_const and int(g.outputs[1].const) == 120
    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    got, want = evaluate(g, {"x": x}), ort_run(model, {"x": x})
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_shape_start_end_opset15():
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=-1)]
    model = make_model(nodes, [("x", F32, [2, 3, 5, 4])], [("s", I64, [2])], opset=15)
    g = import_model(model)
    assert g.nodes == [] and g.outputs[0].name == "s"
    np.testing.assert_array_equal(g.outputs[0].const, [3, 5])
    np.testing.assert_array_equal(
        evaluate(g, {"x": np.zeros((2, 3, 5, 4), np.float32)})[0],
        ort_run(model, {"x": np.zeros((2, 3, 5, 4), np.float32)})[0],
    )


@requires_ops("Relu")
def test_identity_and_dropout_alias_their_input():
    nodes = [
        helper.make_node("Identity", ["x"], ["i"]),
        helper.make_node("Relu", ["i"], ["r"], name="relu"),
        helper.make_node("Dropout", ["r"], ["d", "mask"], ratio=0.3),
        helper.make_node("Identity", ["d"], ["y"]),
    ]
    model = make_model(nodes, [("x", F32, [4])], [("y", F32, [4])], opset=11)
    g = import_model(model)
    assert [n.op_type for n in g.nodes] == ["Relu"]
    relu = g.nodes[0]
    assert relu.inputs[0] is g.inputs[0]
    # the graph output keeps its ONNX name although Relu computes it
    assert relu.outputs[0] is g.outputs[0] and g.outputs[0].name == "y"
    x = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(evaluate(g, {"x": x})[0], ort_run(model, {"x": x})[0])


@requires_ops("Relu", "Identity")
def test_output_that_is_an_input_gets_a_copy():
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    model = make_model(nodes, [("x", F32, [3])], [("y", F32, [3]), ("z", F32, [3])])
    g = import_model(model)
    assert [v.name for v in g.outputs] == ["y", "z"]
    assert g.outputs[0] is not g.inputs[0]
    x = np.array([-1, 0, 1], np.float32)
    y, z = evaluate(g, {"x": x})
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(z, [0, 0, 1])


@requires_ops("LeakyRelu")
def test_attribute_defaults_and_node_fields():
    nodes = [helper.make_node("LeakyRelu", ["x"], ["y"], name="lr")]
    model = make_model(nodes, [("x", F32, [3])], [("y", F32, [3])], opset=16)
    g = import_model(model)
    (n,) = g.nodes
    assert n.attrs == {"alpha": pytest.approx(0.01)}
    assert n.opset == 16 and n.domain == "" and n.name == "lr"


def test_metadata_and_load_from_bytes_and_path(tmp_path):
    nodes = [helper.make_node("Shape", ["x"], ["y"])]
    model = make_model(nodes, [("x", F32, [2, 7])], [("y", I64, [2])])
    helper.set_model_props(model, {"character": "a\nb\nc", "other": "1"})
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    for src in (model, model.SerializeToString(), str(path), path):
        g = import_model(src)
        assert g.metadata == {"character": "a\nb\nc", "other": "1"}
        np.testing.assert_array_equal(g.outputs[0].const, [2, 7])


@requires_ops("Relu", "Add")
def test_unused_nodes_and_inputs():
    nodes = [
        helper.make_node("Relu", ["x"], ["dead"]),
        helper.make_node("Add", ["x", "x"], ["y"]),
    ]
    model = make_model(nodes, [("x", F32, [2]), ("unused", F32, [1])], [("y", F32, [2])])
    g = import_model(model)
    assert [n.op_type for n in g.nodes] == ["Add"]
    assert [v.name for v in g.inputs] == ["x", "unused"]


@requires_ops("Relu")
def test_unsorted_nodes_are_sorted():
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    model = make_model(nodes, [("x", F32, [2])], [("y", F32, [2])], check=False)
    model.ir_version = 10
    # the checker refuses unsorted graphs, so sort-tolerance is tested on the walker itself
    from monolib.compiler.frontend.order import topological_order

    order = topological_order(model.graph.node, {"x"})
    assert [n.output[0] for n in order] == ["a", "y"]
