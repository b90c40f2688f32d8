"""Data-dependent sizes bounded by the user (issue 13): Range on run-time values of any
type, Expand to a run-time shape, Tile by run-time repeats and ConstantOfShape of a
run-time shape compile with ``max_sizes={"node": N}`` (CLI ``--max-size node=N``),
memory planned at ``N``. Each is checked against ONNX Runtime on random data at sizes
up to the bound, 0 and at the bound; a run past the bound stops with an
``ExecutionError`` naming the node (never a write past the buffer); no bound is
refused naming the node and the option."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import monolib
from monolib.compiler.testing import make_node_model, ort_run
from monolib.errors import ExecutionError, UnsupportedOpError

RNG = np.random.default_rng(13)


def _model(op: str, inputs: dict[str, np.ndarray], attrs=None, opset: int = 17):
    """One node named ``op.lower()`` reading graph inputs shaped like ``inputs``."""
    model = make_node_model(op, inputs, attrs, opset=opset)
    model.graph.node[0].name = op.lower()
    return model


def _module(model, **kw):
    lib = monolib.compile(model, **kw)
    return lib, monolib.GraphModule(lib["default"](monolib.cpu()))


def _same(gm, model, feeds):
    gm.run(**feeds)
    (want,) = ort_run(model, feeds)
    got = gm.get_output(0).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    assert np.array_equal(got, want), feeds


def _past_bound(gm, feeds, node: str):
    with pytest.raises(ExecutionError, match=rf"node '{node}'"):
        gm.run(**feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_range_bounded(dtype):
    one = lambda v: np.array(v, dtype)
    model = _model("Range", {"s": one(0), "l": one(1), "d": one(1)}, opset=11)
    lib, gm = _module(model, max_sizes={"range": 40})
    (sym,) = lib.get_graph_json()["symbols"]
    assert sym["computed"] and sym["hi"] == 40
    cases = [(0, 40, 1), (5, 5, 1), (9, 2, 1), (-3, 17, 2), (10, -7, -3), (4, 0, -1)]
    if np.dtype(dtype).kind == "f":
        cases += [(0.5, 3.2, 0.3), (1.0, -2.0, -0.1), (0.1, 0.7, 0.1), (-1.25, 8.75, 0.25)]
    for s, l, d in cases:
        _same(gm, model, {"s": one(s), "l": one(l), "d": one(d)})
    _past_bound(gm, {"s": one(0), "l": one(41), "d": one(1)}, "range")
    _same(gm, model, {"s": one(3), "l": one(1), "d": one(1)})  # usable after the error


def test_range_int16_user_bound_below_type_bound():
    one = lambda v: np.array(v, np.int16)
    model = _model("Range", {"s": one(0), "l": one(1), "d": one(1)}, opset=11)
    lib, gm = _module(model, max_sizes={"range": 8})
    assert lib.get_graph_json()["symbols"][0]["hi"] == 8
    _same(gm, model, {"s": one(-4), "l": one(4), "d": one(1)})
    _past_bound(gm, {"s": one(-4), "l": one(5), "d": one(1)}, "range")


def test_expand_bounded():
    x = RNG.standard_normal((3, 1)).astype(np.float32)
    shape = np.array([2, 1, 4], np.int64)
    model = _model("Expand", {"x": x, "shape": shape})
    lib, gm = _module(model, max_sizes={"expand": 12})
    syms = lib.get_graph_json()["symbols"]
    assert len(syms) == 2 and all(s["computed"] for s in syms)  # axes 0 and 2; axis 1 is 3
    for shp in ([2, 1, 4], [1, 3, 1], [4, 1, 1], [1, 1, 1], [0, 3, 5], [3, 3, 0],
                [12, 3, 1], [1, 3, 12], [3, 1, 4]):
        _same(gm, model, {"x": RNG.standard_normal((3, 1)).astype(np.float32),
                          "shape": np.array(shp, np.int64)})
    _past_bound(gm, {"x": x, "shape": np.array([13, 3, 1], np.int64)}, "expand")
    _past_bound(gm, {"x": x, "shape": np.array([4, 1, 4], np.int64)}, "expand")  # 16 > 12
    _past_bound(gm, {"x": x, "shape": np.array([1, 2, 1], np.int64)}, "expand")  # 3 vs 2


def test_expand_bounded_raises_rank_int64():
    x = np.arange(4, dtype=np.int64).reshape(4)
    model = _model("Expand", {"x": x, "shape": np.array([1, 1], np.int64)})
    _, gm = _module(model, max_sizes={"expand": 5})
    for shp in ([5, 4], [0, 1], [2, 1], [1, 4]):
        _same(gm, model, {"x": RNG.integers(-9, 9, 4), "shape": np.array(shp, np.int64)})
    _past_bound(gm, {"x": x, "shape": np.array([6, 4], np.int64)}, "expand")


def test_tile_bounded():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    model = _model("Tile", {"x": x, "r": np.array([1, 1], np.int64)})
    lib, gm = _module(model, max_sizes={"tile": 36})
    assert len(lib.get_graph_json()["symbols"]) == 2
    for reps in ([1, 1], [3, 2], [0, 4], [2, 0], [6, 1], [1, 6], [2, 3]):  # 2*3*r0*r1 <= 36
        _same(gm, model, {"x": RNG.standard_normal((2, 3)).astype(np.float32),
                          "r": np.array(reps, np.int64)})
    _past_bound(gm, {"x": x, "r": np.array([1, 7], np.int64)}, "tile")  # 2 * 21 > 36
    _past_bound(gm, {"x": x, "r": np.array([-1, 1], np.int64)}, "tile")


@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([2.5], np.float64)])
def test_constant_of_shape_bounded(value):
    attrs = {} if value is None else {"value": onnx.numpy_helper.from_array(value)}
    model = _model("ConstantOfShape", {"shape": np.array([1, 1], np.int64)}, attrs)
    lib, gm = _module(model, max_sizes={"constantofshape": 20})
    assert [s["hi"] for s in lib.get_graph_json()["symbols"]] == [20, 20]
    for shp in ([4, 5], [0, 3], [20, 1], [1, 20], [2, 0]):
        _same(gm, model, {"shape": np.array(shp, np.int64)})
    _past_bound(gm, {"shape": np.array([3, 7], np.int64)}, "constantofshape")


@pytest.mark.parametrize("op, inputs, what", [
    ("Range", {"s": np.array(0.0, np.float32), "l": np.array(1.0, np.float32),
               "d": np.array(1.0, np.float32)}, "start, limit, delta"),
    ("Expand", {"x": np.zeros((1,), np.float32), "shape": np.array([2], np.int64)}, "shape"),
    ("Tile", {"x": np.zeros((2,), np.float32), "r": np.array([2], np.int64)}, "repeats"),
    ("ConstantOfShape", {"shape": np.array([2], np.int64)}, "input"),
])
def test_no_bound_is_refused_with_the_hint(op, inputs, what):
    name = op.lower()
    with pytest.raises(UnsupportedOpError, match=rf"node '{name}'.*{what}.*"
                       rf"max_sizes=\{{'{name}': N\}}.*--max-size {name}=N"):
        monolib.compile(_model(op, inputs, opset=11 if op == "Range" else 17))


def test_cli_max_size(tmp_path):
    from monolib.cli import main

    x = np.zeros((1,), np.float32)
    model = _model("Expand", {"x": x, "shape": np.array([1], np.int64)})
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out = tmp_path / "m.so"
    assert main(["compile", str(path), "-o", str(out), "--max-size", "expand=6"]) == 0
    gm = monolib.GraphModule(monolib.load_module(str(out))["default"](monolib.cpu()))
    _same(gm, model, {"x": np.array([1.5], np.float32), "shape": np.array([6], np.int64)})
    _past_bound(gm, {"x": x, "shape": np.array([7], np.int64)}, "expand")
