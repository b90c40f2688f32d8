"""PassManager, DeadCodeElimination and FoldConstants on hand-built graphs."""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import requires_ops

from monolib.compiler.ir import Graph, Node, Value
from monolib.compiler.passes import (
    DeadCodeElimination,
    FoldConstants,
    Pass,
    PassManager,
    PassResult,
    simplify,
)
from monolib.compiler.passes.node_eval import make_const, run_infer
from monolib.compiler.reference_eval import evaluate
from monolib.errors import CompileError, InputError


def _node(op, inputs, name, **attrs):
    out = Value(f"{name}_out", (), np.float32)
    node = Node(op, name, inputs, [out], attrs, "", 17)
    run_infer(node)
    return node


@requires_ops("Add", "Relu", "Mul")
def test_fold_constants_and_dce_to_fixed_point():
    x = Value("x", (3,), np.float32)
    a = make_const("a", np.array([1, 2, 3], np.float32))
    b = make_const("b", np.float32(2))
    ab = _node("Mul", [a, b], "ab")  # constant: folds
    r = _node("Relu", [ab.outputs[0]], "r")  # then this one folds too
    y = _node("Add", [x, r.outputs[0]], "y")
    dead = _node("Relu", [x], "dead")
    g = Graph("g", [x], [y.outputs[0]], [ab, r, y, dead])
    result = PassManager([FoldConstants(), DeadCodeElimination()])(g)
    assert result.modified and g.op_counts() == {"Add": 1}
    np.testing.assert_array_equal(g.nodes[0].inputs[1].const, [2, 4, 6])
    np.testing.assert_array_equal(evaluate(g, {"x": np.ones(3, np.float32)})[0], [3, 5, 7])
    assert not simplify(g).modified


@requires_ops("Relu")
def test_constant_output_keeps_its_value_object():
    a = make_const("a", np.array([-1, 2], np.float32))
    n = _node("Relu", [a], "r")
    out = n.outputs[0]
    g = Graph("g", [], [out], [n])
    assert FoldConstants()(g).modified
    assert g.nodes == [] and g.outputs[0] is out and out.is_const
    np.testing.assert_array_equal(evaluate(g, {})[0], [0, 2])


def test_shape_and_size_fold_from_static_shape():
    x = Value("x", (2, 5, 3), np.float32)
    s_out, z_out = Value("s", (), np.int64), Value("z", (), np.int64)
    g = Graph(
        "g",
        [x],
        [s_out, z_out],
        [
            Node("Shape", "s", [x], [s_out], {"start": -2}, "", 15),
            Node("Size", "z", [x], [z_out], {}, "", 15),
        ],
    )
    assert FoldConstants()(g).modified and g.nodes == []
    np.testing.assert_array_equal(s_out.const, [5, 3])
    assert s_out.shape == (2,) and z_out.shape == () and int(z_out.const) == 30


def test_pass_manager_rejects_a_pass_that_never_settles():
    class Always(Pass):
        def call(self, graph):
            return PassResult(graph, True)

    class Bad(Pass):
        def call(self, graph):
            return graph

    g = Graph("g", [], [], [])
    with pytest.raises(CompileError, match="fixed point"):
        PassManager([Always()], max_rounds=3)(g)
    assert PassManager([Always()], fixed_point=False)(g).modified
    with pytest.raises(TypeError, match="PassResult"):
        Bad()(g)


@requires_ops("Relu")
def test_evaluate_checks_feeds():
    x = Value("x", (2,), np.float32)
    n = _node("Relu", [x], "r")
    g = Graph("g", [x], [n.outputs[0]], [n])
    with pytest.raises(InputError, match="no value given for graph input 'x'"):
        evaluate(g, {})
    with pytest.raises(InputError, match="'x': shape \\[3\\]"):
        evaluate(g, {"x": np.zeros(3, np.float32)})
    with pytest.raises(InputError, match="'x': dtype float64"):
        evaluate(g, {"x": np.zeros(2)})
    with pytest.raises(InputError, match="unknown input name"):
        evaluate(g, {"x": np.zeros(2, np.float32), "q": 1})


@requires_ops("Expand")
def test_huge_constant_results_are_not_folded(monkeypatch):
    from monolib.compiler.passes import node_eval

    monkeypatch.setattr(node_eval, "MAX_FOLD_BYTES", 1000)
    small = make_const("s", np.ones((1, 4), np.float32))
    shape = make_const("shape", np.array([512, 4], np.int64))
    n = _node("Expand", [small, shape], "grow")  # 8 KiB out of 48 bytes: left to run time
    g = Graph("g", [], [n.outputs[0]], [n])
    assert not FoldConstants()(g).modified and g.op_counts() == {"Expand": 1}
    monkeypatch.setattr(node_eval, "MAX_FOLD_BYTES", 1 << 20)
    assert FoldConstants()(g).modified and g.outputs[0].const.shape == (512, 4)
