"""Compress and Unique on run-time data (issue 13): the output size is a computed dim,
real C kernels (ops/tensor/compress.py, unique.py) matched with ONNX Runtime on random
data, the empty result included; constant inputs still fold / use a table."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import make_node_model, ort_run


def _check(model, feeds_list):
    lib = monolib.compile(model)
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    for feeds in feeds_list:
        want = ort_run(model, feeds)
        gm.run(**feeds)
        for i, w in enumerate(want):
            got = gm.get_output(i).numpy()
            assert got.shape == w.shape and np.array_equal(got, w), (i, feeds)
    return lib


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_run_time_condition(axis):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    n = 5 if axis in (1, -1) else (3 if axis == 0 else 15)
    m = n - 1  # a condition shorter than the dim: only its first m slices count
    attrs = {} if axis is None else {"axis": axis}
    model = make_node_model("Compress", {"x": x, "c": np.zeros(m, bool)}, attrs)
    conds = [rng.random(m) > 0.5, np.zeros(m, bool), np.ones(m, bool)]
    lib = _check(model, [{"x": rng.normal(size=x.shape).astype(np.float32), "c": c}
                         for c in conds])
    (sym,) = lib.get_graph_json()["symbols"]
    assert sym["computed"] and sym["hi"] == m


def test_compress_constant_condition_has_a_static_shape():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    model = make_node_model("Compress", {"x": x, "c": np.array([1, 0, 1], bool)}, {"axis": 0},
                            constant_inputs=["c"])
    lib = _check(model, [{"x": x}])
    assert "symbols" not in lib.get_graph_json()


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique_run_time(sorted_, axis):
    rng = np.random.default_rng(7 + sorted_)
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    x = rng.integers(0, 3, size=(6, 4)).astype(np.float32)
    model = make_node_model("Unique", {"x": x}, attrs, outputs=4)
    cases = [rng.integers(0, 3, size=x.shape).astype(np.float32),
             np.full(x.shape, 2.5, np.float32),  # one unique value / slice
             rng.normal(size=x.shape).astype(np.float32)]  # all distinct
    if axis == 0:  # repeated rows
        cases.append(np.repeat(rng.integers(0, 2, size=(3, 4)), 2, axis=0).astype(np.float32))
    _check(model, [{"x": c} for c in cases])


def test_unique_int64_3d_with_one_output():
    rng = np.random.default_rng(9)
    x = rng.integers(-2, 2, size=(2, 3, 2)).astype(np.int64)
    model = make_node_model("Unique", {"x": x}, {"axis": 1})
    _check(model, [{"x": rng.integers(-2, 2, size=x.shape).astype(np.int64)} for _ in range(3)])
