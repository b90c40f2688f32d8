"""GRAPH attributes of ops the frontend does not inline become ``ir.Graph`` objects
that read outer-scope values directly; Dropout in training mode is refused."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from frontend.onnx_util import F32, make_model, requires_ops
from monolib.compiler.frontend import import_model
from monolib.compiler.ir import Graph
from monolib.compiler.ops.base import OpDef, register, registered_ops

DOMAIN = "test.monolib.frontend"


if (DOMAIN, "ApplyBody") not in registered_ops():

    @register
    class ApplyBody(OpDef):
        """Test-only op: output 0 has the type of input 0; holds a GRAPH ``body``."""

        op_type = "ApplyBody"
        domain = DOMAIN
        since_version = 1
        foldable = False

        def infer(self, node):
            x = node.inputs[0]
            return [(x.shape, x.dtype)]


@requires_ops("Add", "Mul")
def test_graph_attribute_is_imported_with_outer_scope_reads():
    body = helper.make_graph(
        [
            helper.make_node("Add", ["inner_in", "outer_w"], ["s"]),
            helper.make_node("Mul", ["s", "k"], ["out"]),
        ],
        "body",
        [helper.make_tensor_value_info("inner_in", F32, [3])],
        [helper.make_tensor_value_info("out", F32, [3])],
        [helper.make_tensor("k", F32, [], [2.0])],
    )
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["outer_w"]),
        helper.make_node("ApplyBody", ["x"], ["y"], domain=DOMAIN, body=body),
    ]
    model = make_model(nodes, [("x", F32, [3])], [("y", F32, [3])], extra_opsets={DOMAIN: 1})
    g = import_model(model)
    assert g.op_counts() == {"Mul": 1, "ApplyBody": 1}
    outer_mul, apply = g.nodes
    sub = apply.attrs["body"]
    assert isinstance(sub, Graph)
    assert [v.shape for v in sub.inputs] == [(3,)]
    assert [n.op_type for n in sub.nodes] == ["Add", "Mul"]
    # the body reads the outer Mul's output object itself, and its constant k
    assert sub.nodes[0].inputs[1] is outer_mul.outputs[0]
    assert sub.nodes[1].inputs[1].is_const and float(sub.nodes[1].inputs[1].const) == 2.0
    assert sub.outputs[0] is sub.nodes[1].outputs[0]


def test_dropout_in_training_mode_is_a_node_inference_an_identity():
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")]
    model = make_model(
        nodes, [("x", F32, [3]), ("t", 9, [])], [("y", F32, [3])], {"r": np.float32(0.5)}
    )
    # training (constant or run-time): the random mask in C (ops/math/dropout.py)
    assert import_model(model, constants={"t": True}).op_counts() == {"Dropout": 1}
    assert import_model(model).op_counts() == {"Dropout": 1}
    g = import_model(model, constants={"t": False})
    assert g.op_counts() == {"Identity": 1}  # y is a copy of the graph input x
    assert g.outputs[0].name == "y"
