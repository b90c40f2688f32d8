"""Clear refusals through the public API (``monolib.compile``): every unsupported
operator in ONE error before any compile work, a dynamic dim named with its input, the
ONNX checker's own message (issue 6, part 3)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.compiler.frontend import onnx as frontend
from monolib.errors import CompileError, ShapeError, UnsupportedOpError


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def no_compile_work(monkeypatch):
    """Fail the test if the importer, the code generator or the C compiler is reached."""
    from monolib.compiler.backends.c import generate as codegen
    from monolib.export import toolchain

    def reached(what):
        def fail(*args, **kwargs):
            raise AssertionError(f"{what} ran before the refusal")
        return fail

    monkeypatch.setattr(frontend._Importer, "import_main", reached("the importer"))
    monkeypatch.setattr(codegen, "generate", reached("the code generator"))
    monkeypatch.setattr(toolchain, "run_tool", reached("the C compiler"))


def test_every_unsupported_op_in_one_error_before_any_work(no_compile_work):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="fine"),
        helper.make_node("FancyOp", ["r"], ["a"], domain="com.example", name="fancy_a"),
        helper.make_node("FancyOp", ["a"], ["b"], domain="com.example", name="fancy_b"),
        helper.make_node("Gizmo", ["b"], ["c"], domain="org.other", name="gizmo"),
        helper.make_node("Relu", ["c"], ["y"], name="also_fine"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [_vi("x", [2])], [_vi("y", [2])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 3),
                       helper.make_opsetid("org.other", 1)])
    with pytest.raises(UnsupportedOpError) as info:
        monolib.compile(model, target="c")
    msg = str(info.value)
    assert msg.startswith("2 unsupported operator(s)"), msg
    assert "com.example::FancyOp (opset 3)" in msg and "'fancy_a', 'fancy_b'" in msg
    assert "org.other::Gizmo (opset 1)" in msg and "'gizmo'" in msg
    assert "fine" not in msg.replace("fancy", "")  # supported nodes are not listed


def test_unsupported_opset_is_refused_before_any_work(no_compile_work):
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [_vi("x", [2])], [_vi("y", [2])]),
        opset_imports=[helper.make_opsetid("", 5)])
    # opset 5 converts (tests/frontend/test_old_opsets.py); one newer than onnx knows cannot
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
    with pytest.raises(UnsupportedOpError) as info:
        monolib.compile(model, target="c")
    msg = str(info.value)
    assert f"opset {model.opset_import[0].version}" in msg and "newer onnx" in msg, msg


def test_dynamic_dim_without_shape_names_input_and_dim():
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["img"], ["y"])], "g",
                          [_vi("img", [1, 3, "height", 8])], [_vi("y", [1, 3, "height", 8])]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ShapeError) as info:
        monolib.compile(model, target="c")
    msg = str(info.value)
    assert "'img'" in msg and "dim 2" in msg and "'height'" in msg and "shapes=" in msg
    # the named fix works
    monolib.compile(model, target="c", shapes={"img": (1, 3, 5, 8)})


def test_checker_failure_carries_the_checkers_message():
    bad = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"], bogus=1)], "g",
                          [_vi("x", [2])], [_vi("y", [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError) as checker:
        onnx.checker.check_model(bad)
    first = str(checker.value).strip().splitlines()[0]
    with pytest.raises(CompileError) as info:
        monolib.compile(bad, target="c")
    msg = str(info.value)
    assert "ONNX checker" in msg and first in msg, (first, msg)
