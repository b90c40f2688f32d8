"""Range on run-time start/limit/delta (issue 13): for int16 the length is a computed
dim bounded by the type (65536) (the kernel computes it when the op runs), matched
with ONNX Runtime including empty and negative-step ranges; any other type is refused
naming the node and how to bound it."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import make_node_model, ort_run
from monolib.errors import UnsupportedOpError


def test_range_run_time_int16_values():
    dtype = np.int16  # the one type of Range (int16/32/64, float, double) with a small bound
    one = lambda v: np.array(v, dtype)
    model = make_node_model("Range", {"s": one(0), "l": one(1), "d": one(1)}, opset=11)
    lib = monolib.compile(model)
    (sym,) = lib.get_graph_json()["symbols"]
    assert sym["computed"] and sym["hi"] == 1 << (8 * np.dtype(dtype).itemsize)
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    cases = [(0, 10, 3), (5, 5, 1), (9, 2, 1), (20, 3, 2), (200, 11, 7), (10, -7, -3),
             (-5, 300, 1), (4, 0, -1)]
    for s, l, d in cases:
        feeds = {"s": one(s), "l": one(l), "d": one(d)}
        gm.run(**feeds)
        (want,) = ort_run(model, feeds)
        got = gm.get_output(0).numpy()
        assert got.shape == want.shape and np.array_equal(got, want), (s, l, d)


def test_range_unbounded_type_is_refused():
    one = lambda v: np.array(v, np.int64)
    model = make_node_model("Range", {"s": one(0), "l": one(1), "d": one(1)}, opset=11)
    with pytest.raises(UnsupportedOpError, match=r"Range \(node .*start, limit, delta are "
                       r"run-time int64 values.*no finite bound.*constants="):
        monolib.compile(model)
