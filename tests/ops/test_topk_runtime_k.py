"""TopK with a run-time K (issue 13): the output dim along ``axis`` is a computed dim
bounded by the axis length; the C kernel reads K when it runs. Matched with ONNX
Runtime on random data (ties, K = 0, K = the whole axis, a run-time batch too)."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import make_node_model, ort_run


@pytest.mark.parametrize("axis,largest", [(-1, 1), (0, 0), (1, 1)])
def test_topk_run_time_k(axis, largest):
    rng = np.random.default_rng(3 + axis)
    x = rng.integers(0, 5, size=(4, 6, 3)).astype(np.float32)  # many ties
    model = make_node_model("TopK", {"x": x, "k": np.array([1], np.int64)},
                            {"axis": axis, "largest": largest}, outputs=2, opset=11)
    lib = monolib.compile(model)
    (sym,) = lib.get_graph_json()["symbols"]
    assert sym["computed"] and (sym["lo"], sym["hi"]) == (0, x.shape[axis])
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    for k in (2, 0, x.shape[axis], 1):
        feeds = {"x": rng.integers(0, 5, size=x.shape).astype(np.float32),
                 "k": np.array([k], np.int64)}
        gm.run(**feeds)
        for i, want in enumerate(ort_run(model, feeds)):
            got = gm.get_output(i).numpy()
            assert got.shape == want.shape and np.array_equal(got, want), (k, i)


def test_topk_run_time_k_and_batch():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(2, 7)).astype(np.float32)
    model = make_node_model("TopK", {"x": x, "k": np.array([3], np.int64)}, {"axis": 1},
                            outputs=2, opset=11)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "b"
    lib = monolib.compile(model, shapes={"x": ((1, 4), 7)})
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    for b, k in ((1, 7), (4, 3), (3, 0)):
        feeds = {"x": rng.normal(size=(b, 7)).astype(np.float32), "k": np.array([k], np.int64)}
        gm.run(**feeds)
        for i, want in enumerate(ort_run(model, feeds)):
            got = gm.get_output(i).numpy()
            assert got.shape == want.shape and np.array_equal(got, want), (b, k, i)
