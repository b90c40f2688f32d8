"""Slice with starts/ends/steps read at run time (issue 13): each sliced dim is a
computed dim bounded by the input dim; the kernel applies the spec's clamping when it
runs. Matched with ONNX Runtime: negative and out-of-range indices, negative steps,
empty results, a constant axes input, and later ops reading the sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import monolib
from monolib.compiler.testing import ort_run

BIG = 2**62


def _model(with_steps: bool):
    ins = [h.make_tensor_value_info("x", T.FLOAT, [4, 6, 5]),
           h.make_tensor_value_info("s", T.INT64, [2]),
           h.make_tensor_value_info("e", T.INT64, [2])]
    names = ["x", "s", "e", "ax"]
    if with_steps:
        ins.append(h.make_tensor_value_info("st", T.INT64, [2]))
        names.append("st")
    nodes = [h.make_node("Slice", names, ["y"], name="sl"),
             h.make_node("Neg", ["y"], ["z"]),
             h.make_node("Shape", ["z"], ["zs"])]
    g = h.make_graph(nodes, "g", ins,
                     [h.make_tensor_value_info("z", T.FLOAT, ["a", 6, "c"]),
                      h.make_tensor_value_info("zs", T.INT64, [3])],
                     [numpy_helper.from_array(np.array([2, 0], np.int64), "ax")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("with_steps", [False, True])
def test_slice_run_time_bounds(with_steps):
    model = _model(with_steps)
    lib = monolib.compile(model)
    syms = lib.get_graph_json()["symbols"]
    assert sorted(s["hi"] for s in syms) == [4, 5] and all(s["computed"] for s in syms)
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    rng = np.random.default_rng(4)
    cases = [([1, 0], [4, 3], [1, 1]), ([-3, -10], [BIG, -1], [1, 1]), ([3, 2], [1, 2], [1, 1]),
             ([4, 3], [-BIG, 0], [-1, -2]), ([0, 0], [5, 4], [2, 3]), ([-1, 9], [-6, -9], [-2, -1])]
    for s, e, st in cases if with_steps else [c for c in cases if c[2] == [1, 1]]:
        feeds = {"x": rng.normal(size=(4, 6, 5)).astype(np.float32),
                 "s": np.array(s, np.int64), "e": np.array(e, np.int64)}
        if with_steps:
            feeds["st"] = np.array(st, np.int64)
        gm.run(**feeds)
        for i, want in enumerate(ort_run(model, feeds)):
            got = gm.get_output(i).numpy()
            assert got.shape == want.shape and np.array_equal(got, want), (s, e, st, i)
