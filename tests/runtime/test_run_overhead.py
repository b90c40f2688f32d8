"""The per-run path of ``GraphModule`` (issue 14: Python per run was ~7 us on a
one-input model): plain NumPy inputs of the exact dtype and shape are copied straight
into the arena, checked in full before any copy; ``get_output`` of a static graph is a
zero-copy view of the arena that the next run overwrites; anything else (a list, a
wrong dtype or shape, a param, an unknown name) takes the checked path with its
errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.runtime import GraphModule, InputError, cpu

RNG = np.random.default_rng(3)


@pytest.fixture(scope="module")
def gm() -> GraphModule:
    """y = Relu(a) + b, z = a * 2: two inputs [3, 5], two outputs."""
    nodes = [
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Add", ["r", "b"], ["y"]),
        helper.make_node("Mul", ["a", "two"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes, "overhead",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 5]) for n in "ab"],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 5]) for n in "yz"],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return GraphModule(monolib.compile(model)["default"](cpu()))


def _feeds():
    return {n: RNG.standard_normal((3, 5)).astype(np.float32) for n in "ab"}


def test_plain_inputs_skip_the_checked_path(gm, monkeypatch) -> None:
    feeds = _feeds()
    monkeypatch.setattr(GraphModule, "_checked", lambda *a: pytest.fail("checked path taken"))
    gm.run(**feeds)
    np.testing.assert_array_equal(gm.get_output(0).numpy(), np.maximum(feeds["a"], 0) + feeds["b"])
    # a strided view of the right dtype and shape is copied correctly too
    wide = RNG.standard_normal((3, 10)).astype(np.float32)
    gm.set_input(a=wide[:, ::2])
    np.testing.assert_array_equal(gm.get_input("a").numpy(), wide[:, ::2])


def test_outputs_are_views_of_the_arena(gm) -> None:
    feeds = _feeds()
    gm.run(**feeds)
    out = gm.get_output(1)
    arr = np.asarray(out)
    assert np.shares_memory(arr, gm.executor.output_view(1))
    np.testing.assert_array_equal(arr, feeds["a"] * 2)
    kept = out.numpy()  # a copy survives the next run
    gm.run(a=feeds["a"] + 1, b=feeds["b"])
    np.testing.assert_array_equal(arr, (feeds["a"] + 1) * 2)  # the view sees the new run
    np.testing.assert_array_equal(kept, feeds["a"] * 2)
    buf = np.empty((3, 5), np.float32)
    gm.get_output(0, out=buf)  # `out` still fills a buffer of the caller's
    np.testing.assert_array_equal(buf, np.maximum(feeds["a"] + 1, 0) + feeds["b"])


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros((3, 5), np.float64), "dtype float64"),
        (np.zeros((3, 4), np.float32), r"shape \[3, 4\]"),
    ],
)
def test_a_bad_input_changes_nothing(gm, bad, match) -> None:
    good = _feeds()
    gm.set_input(**good)
    with pytest.raises(InputError, match=match):
        gm.set_input(a=np.ones((3, 5), np.float32), b=bad)
    np.testing.assert_array_equal(gm.get_input("a").numpy(), good["a"])  # a not copied


def test_other_values_take_the_checked_path(gm) -> None:
    lists = {n: RNG.standard_normal((3, 5)).astype(np.float32).tolist() for n in "ab"}
    gm.run(**lists)
    np.testing.assert_allclose(gm.get_output(1).numpy(), np.array(lists["a"], np.float32) * 2)
    with pytest.raises(InputError, match="unknown input 'c'"):
        gm.set_input(c=np.zeros((3, 5), np.float32))
    with pytest.raises(InputError, match="out of range"):
        gm.get_output(2)
