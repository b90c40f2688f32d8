"""Frontend: If with a constant condition is inlined (constants= feeds the condition);
on a run-time condition it stays a node holding both branches."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from frontend.onnx_util import F32, I64, make_model, requires_ops
from monolib.compiler.frontend import import_model
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run
from monolib.errors import CompileError, ShapeError


def _branch(name: str, op: str, const: float, nested: bool = False):
    """A branch computing ``op(x, const)`` (reads ``x`` from the outer scope); with
    ``nested`` its result goes through an inner If on ``flag`` (also outer)."""
    c = helper.make_node("Constant", [], [f"{name}_c"], value_float=const)
    body = helper.make_node(op, ["x", f"{name}_c"], [f"{name}_r"])
    nodes = [c, body]
    out = f"{name}_r"
    if nested:
        inner_then = helper.make_graph(
            [helper.make_node("Neg", [f"{name}_r"], [f"{name}_neg"])],
            f"{name}_it",
            [],
            [helper.make_tensor_value_info(f"{name}_neg", F32, None)],
        )
        inner_else = helper.make_graph(
            [helper.make_node("Identity", [f"{name}_r"], [f"{name}_id"])],
            f"{name}_ie",
            [],
            [helper.make_tensor_value_info(f"{name}_id", F32, None)],
        )
        nodes.append(
            helper.make_node(
                "If", ["flag"], [f"{name}_out"], then_branch=inner_then, else_branch=inner_else
            )
        )
        out = f"{name}_out"
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, F32, None)])


def _sr_model(nested: bool = False):
    nodes = [
        helper.make_node(
            "Constant", [], ["k16"], value=helper.make_tensor("k16", I64, [], [16000])
        ),
        helper.make_node("Equal", ["sr", "k16"], ["is16"]),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Size", ["xs"], ["rank"]),
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", I64, [], [2])),
        helper.make_node("Equal", ["rank", "two"], ["flag"]),
        helper.make_node(
            "If",
            ["is16"],
            ["y"],
            name="the_if",
            then_branch=_branch("then", "Mul", 2.0, nested),
            else_branch=_branch("else", "Add", 1.0, nested),
        ),
    ]
    return make_model(nodes, [("x", F32, ["N", 3]), ("sr", I64, [])], [("y", F32, ["N", 3])])


@requires_ops("Equal", "Mul", "Add")
@pytest.mark.parametrize("sr, op", [(16000, "Mul"), (8000, "Add")])
def test_if_on_constant_input_is_inlined(sr, op):
    model = _sr_model()
    g = import_model(model, shapes={"x": (2, 3)}, constants={"sr": sr})
    assert g.op_counts() == {op: 1}
    assert [v.name for v in g.inputs] == ["x"] and g.outputs[0].name == "y"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = ort_run(model, {"x": x, "sr": np.array(sr, np.int64)})[0]
    np.testing.assert_array_equal(evaluate(g, {"x": x})[0], want)


@requires_ops("Equal", "Mul", "Add", "Neg")
def test_nested_if_reading_outer_scopes():
    model = _sr_model(nested=True)
    g = import_model(model, shapes={"x": (2, 3)}, constants={"sr": 16000})
    assert g.op_counts() == {"Mul": 1, "Neg": 1}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = ort_run(model, {"x": x, "sr": np.array(16000, np.int64)})[0]
    np.testing.assert_array_equal(evaluate(g, {"x": x})[0], want)


@requires_ops("Equal", "Mul", "Add", "Neg")
@pytest.mark.parametrize("nested", [False, True])
def test_if_on_runtime_input_keeps_both_branches(nested):
    """Without constants= the If stays (issue 13, ops/control/if_.py): both branches
    imported as subgraphs, the outer ``x`` a captured input of the node."""
    model = _sr_model(nested)
    g = import_model(model, shapes={"x": (2, 3)})
    assert g.op_counts() == {"Equal": 1, "If": 1}
    node = g.nodes[-1]
    assert node.attrs["_formal"] == 1 and [v.name for v in node.inputs[1:]] == ["x"]
    assert set(node.attrs["then_branch"].op_counts()) == ({"Mul", "Neg"} if nested else {"Mul"})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for sr in (16000, 8000):
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        np.testing.assert_array_equal(evaluate(g, feeds)[0], ort_run(model, feeds)[0])


@requires_ops("Equal", "Mul", "Add")
def test_constants_checks_name_shape_and_value():
    with pytest.raises(CompileError, match="'rate' is not an input"):
        import_model(_sr_model(), shapes={"x": (2, 3)}, constants={"rate": 16000})
    with pytest.raises(ShapeError, match="'sr'"):
        import_model(_sr_model(), shapes={"x": (2, 3)}, constants={"sr": [16000, 1]})
    g = import_model(_sr_model(), shapes={"x": (2, 3)}, constants={"sr": np.int32(16000)})
    assert g.op_counts() == {"Mul": 1}


@requires_ops("Add")
def test_error_inside_a_branch_names_the_branch():
    bad = helper.make_graph(
        [
            helper.make_node("Constant", [], ["v"], value_floats=[1.0, 2.0, 3.0, 4.0]),
            helper.make_node("Add", ["x", "v"], ["r"], name="bad_add"),
        ],
        "bad_branch",
        [],
        [helper.make_tensor_value_info("r", F32, None)],
    )
    ok = _branch("ok", "Add", 1.0)
    nodes = [helper.make_node("If", ["c"], ["y"], name="sel", then_branch=bad, else_branch=ok)]
    model = make_model(nodes, [("x", F32, [2, 3]), ("c", 9, [])], [("y", F32, [2, 3])])
    with pytest.raises(CompileError) as e:
        import_model(model, constants={"c": True})
    msg = str(e.value)
    assert "'bad_add'" in msg and "branch 'bad_branch' of If 'sel'" in msg
    g = import_model(model, constants={"c": False})
    assert g.op_counts() == {"Add": 1}
