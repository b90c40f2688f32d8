"""RemoveNoOps: identity-like nodes are rewired away, look-alikes are kept; results
checked against ONNX Runtime."""

from __future__ import annotations

import numpy as np
from frontend.onnx_util import F32, I64, make_model, requires_ops
from onnx import helper

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import RemoveNoOps, simplify
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(3)


def _run_both(model, shape, expect_counts):
    g = import_model(model)
    x = RNG.standard_normal(shape).astype(np.float32)
    want = ort_run(model, {"x": x})
    simplify(g)
    assert g.op_counts() == expect_counts
    for a, b in zip(evaluate(g, {"x": x}), want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    return g


@requires_ops("Cast", "Add", "Mul", "Sub", "Div", "Relu", "Sum")
def test_elementwise_noops_removed_and_lookalikes_kept():
    inits = {
        "zero": np.zeros((1, 3), np.float32),
        "one": np.float32(1.0),
        "half": np.full(3, 0.5, np.float32),
        "zbig": np.zeros((2, 2, 3), np.float32),
    }
    nodes = [
        helper.make_node("Cast", ["x"], ["c"], to=F32),
        helper.make_node("Add", ["c", "zero"], ["a"]),
        helper.make_node("Mul", ["a", "one"], ["m"]),
        helper.make_node("Div", ["m", "one"], ["d"]),
        helper.make_node("Sub", ["d", "zero"], ["s"]),
        helper.make_node("Sum", ["s"], ["u"]),
        helper.make_node("Relu", ["u"], ["r"]),
        helper.make_node("Mul", ["r", "half"], ["h"]),  # not ones: kept
        helper.make_node("Add", ["h", "zbig"], ["b"]),  # broadcasts to a bigger shape: kept
        helper.make_node("Mul", ["b", "one"], ["y"]),  # a graph output: kept
    ]
    model = make_model(nodes, [("x", F32, [2, 3])], [("y", F32, [2, 2, 3])], inits)
    g = _run_both(model, (2, 3), {"Relu": 1, "Mul": 2, "Add": 1})
    assert g.nodes[0].inputs[0] is g.inputs[0]
    assert g.outputs[0].name == "y"


@requires_ops("Slice", "Pad", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Relu")
def test_shape_noops_removed_and_lookalikes_kept():
    i64 = lambda *v: np.array(v, np.int64)
    inits = {
        "st": i64(0, 0),
        "en": i64(1 << 62, 1 << 62),
        "ax": i64(1, 2),
        "neg": i64(-1),
        "zp": i64(0, 0, 0, 0, 0, 0),
        "shp": i64(2, 1, 4),
        "a1": i64(1),
        "rst": i64(-1),
        "ren": i64(-(1 << 62)),
        "rax": i64(2),
    }
    nodes = [
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["s1"]),
        helper.make_node("Pad", ["s1", "zp"], ["p"]),
        helper.make_node("Transpose", ["p"], ["t"], perm=[1, 0, 2]),  # moves a size-1 dim only
        helper.make_node("Reshape", ["t", "shp"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "a1"], ["u"]),
        helper.make_node("Squeeze", ["u", "a1"], ["q"]),
        helper.make_node("Relu", ["q"], ["v"]),
        helper.make_node("Slice", ["v", "rst", "ren", "rax", "neg"], ["rev"]),  # reverses: kept
        helper.make_node("Transpose", ["rev"], ["y"], perm=[2, 1, 0]),  # real transpose
    ]
    model = make_model(nodes, [("x", F32, [2, 1, 4])], [("y", F32, [4, 1, 2])], inits)
    _run_both(model, (2, 1, 4), {"Relu": 1, "Slice": 1, "Transpose": 1})


@requires_ops("Cast")
def test_graph_output_noop_is_kept_and_pass_reports_no_change():
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=F32)]
    model = make_model(nodes, [("x", F32, [2])], [("y", F32, [2])])
    g = import_model(model)
    assert not RemoveNoOps()(g).modified and g.op_counts() == {"Cast": 1}
    assert I64 != F32


@requires_ops("Transpose", "Reshape", "Relu")
def test_layout_keeping_transpose_becomes_reshape():
    from monolib.compiler.passes import CollapseReshapes

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    model = make_model(nodes, [("x", F32, [3, 1, 4])], [("y", F32, [1, 3, 4])])
    g = import_model(model)
    assert CollapseReshapes()(g).modified
    reshape = g.nodes[1]
    assert reshape.op_type == "Reshape" and reshape.outputs[0].shape == (1, 3, 4)
    np.testing.assert_array_equal(reshape.inputs[1].const, [1, 3, 4])
    x = RNG.standard_normal((3, 1, 4)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(g, {"x": x})[0], ort_run(model, {"x": x})[0])
