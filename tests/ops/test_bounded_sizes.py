"""Data-dependent sizes bounded by the user (issue 13): Range on run-time values of any
type, Expand to a run-time shape, Tile by run-time repeats, ConstantOfShape of a
run-time shape and OneHot of a run-time depth (and a Loop, as with max_trip_count) compile with ``max_sizes={"node": N}`` (CLI ``--max-size node=N``),
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
    ("OneHot", {"i": np.zeros((2,), np.int64), "d": np.array(3, np.int64),
                "v": np.array([0, 1], np.float32)}, "depth"),
])
def test_no_bound_is_refused_with_the_hint(op, inputs, what):
    name = op.lower()
    with pytest.raises(UnsupportedOpError, match=rf"node '{name}'.*{what}.*"
                       rf"max_sizes=\{{'{name}': N\}}.*--max-size {name}=N"):
        monolib.compile(_model(op, inputs, opset=11 if op in ("Range", "OneHot") else 17))


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


def test_loop_takes_max_sizes_too():
    """One table of user bounds: a Loop's scan outputs are planned at ``max_sizes``
    as at ``max_trip_count`` (its trip count is their length)."""
    from onnx import TensorProto as T
    from onnx import helper

    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         helper.make_node("Add", ["s_in", "fi"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"])],
        "body", [vi("i", T.INT64, []), vi("c_in", T.BOOL, []), vi("s_in", T.FLOAT, [])],
        [vi("c_out", T.BOOL, []), vi("s_out", T.FLOAT, []), vi("scan", T.FLOAT, [])])
    loop = helper.make_node("Loop", ["m", "", "s0"], ["s", "y"], body=body, name="lp")
    graph = helper.make_graph([loop], "g", [vi("m", T.INT64, []), vi("s0", T.FLOAT, [])],
                              [vi("s", T.FLOAT, []), vi("y", T.FLOAT, ["t"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    _, gm = _module(model, max_sizes={"lp": 5})
    for m in (0, 3, 5):
        feeds = {"m": np.array(m, np.int64), "s0": np.array(RNG.standard_normal(), np.float32)}
        gm.run(**feeds)
        want = ort_run(model, feeds)[1]
        assert np.array_equal(gm.get_output(1).numpy(), want)
    _past_bound(gm, {"m": np.array(6, np.int64), "s0": np.array(0, np.float32)}, "lp")


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot_bounded_depth(axis):
    idx = np.array([[0, 2, -1], [5, 1, 3]], np.int64)
    feeds = lambda i, d: {"i": i, "d": np.array(d, np.float32),
                          "v": np.array([-1.5, 2.0], np.float32)}
    model = _model("OneHot", feeds(idx, 4), {"axis": axis}, opset=11)
    lib, gm = _module(model, max_sizes={"onehot": 6})
    assert lib.get_graph_json()["symbols"][0]["hi"] == 6
    for d in (1, 3, 4, 6, 5.7):
        _same(gm, model, feeds(RNG.integers(-6, 7, (2, 3)), d))
    _past_bound(gm, feeds(idx, 7), "onehot")


def _resize_model(attrs, what: str, n: int, opset: int = 13, dtype=np.float32):
    """Resize of x [1, 2, 3, 4] with run-time ``what`` (``scales`` or ``sizes``, n values)."""
    x = RNG.standard_normal((1, 2, 3, 4)).astype(dtype)
    given = np.ones(n, np.float32 if what == "scales" else np.int64)
    inputs = {"x": x, "roi": None, "scales": None, "sizes": None}
    inputs[what] = given
    if what == "scales":
        del inputs["sizes"]
    return _model("Resize", inputs, attrs, opset=opset)


def _resize_same(gm, model, what, value, dtype=np.float32, exact=True, run=ort_run):
    feeds = {"x": RNG.standard_normal((1, 2, 3, 4)).astype(dtype),
             what: np.array(value, np.float32 if what == "scales" else np.int64)}
    gm.run(**feeds)
    (want,) = run(model, feeds)
    got = gm.get_output(0).numpy()
    assert got.shape == want.shape, (value, got.shape, want.shape)
    if exact:
        assert np.array_equal(got, want), value
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(value))


@pytest.mark.parametrize("coord, nearest", [
    ("half_pixel", "round_prefer_floor"), ("asymmetric", "floor"),
    ("align_corners", "round_prefer_ceil"), ("pytorch_half_pixel", "ceil")])
def test_resize_nearest_run_time_sizes(coord, nearest):
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    model = _resize_model(attrs, "sizes", 4)
    _, gm = _module(model, max_sizes={"resize": 128})  # 1 * 2 * H * W <= 128
    for sizes in ([1, 2, 6, 8], [1, 2, 5, 3], [1, 2, 1, 1], [1, 2, 3, 4], [1, 2, 8, 8],
                  [1, 1, 7, 9], [2, 2, 2, 5]):
        _resize_same(gm, model, "sizes", sizes)
    _past_bound(gm, {"x": np.zeros((1, 2, 3, 4), np.float32),
                     "sizes": np.array([1, 2, 9, 8], np.int64)}, "resize")


@pytest.mark.parametrize("mode, coord", [
    ("linear", "half_pixel"), ("linear", "asymmetric"), ("linear", "pytorch_half_pixel"),
    ("cubic", "half_pixel"), ("nearest", "asymmetric")])
def test_resize_run_time_scales(mode, coord):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    model = _resize_model(attrs, "scales", 4)
    _, gm = _module(model, max_sizes={"resize": 288})  # 1 * 2 * 12 * 12
    # (ORT's linear/cubic resize only the last two axes of a 4-D input)
    for scales in ([1, 1, 2, 2], [1, 1, 1.5, 0.5], [1, 1, 0.7, 1.3], [1, 1, 1, 3], [1, 1, 4, 3],
                   [1, 1, 1, 1]):
        _resize_same(gm, model, "scales", scales, exact=mode == "nearest")
    _past_bound(gm, {"x": np.zeros((1, 2, 3, 4), np.float32),
                     "scales": np.array([1, 1, 4, 3.25], np.float32)}, "resize")  # 2*12*13 > 288


def test_resize_run_time_sizes_axes_policy_cubic_exclude():
    attrs = {"mode": "cubic", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger",
             "exclude_outside": 1, "cubic_coeff_a": -0.5,
             "coordinate_transformation_mode": "half_pixel_symmetric"}
    model = _resize_model(attrs, "sizes", 2, opset=19)
    _, gm = _module(model, max_sizes={"resize": 60})
    for sizes in ([6, 8], [5, 20], [2, 2], [9, 4], [3, 4]):
        _resize_same(gm, model, "sizes", sizes, exact=False)
    _past_bound(gm, {"x": np.zeros((1, 2, 3, 4), np.float32),
                     "sizes": np.array([12, 16], np.int64)}, "resize")  # 12 x 16 > 60


def test_resize_run_time_linear_double_align_corners_sizes():
    """float64 (ORT has no double Resize): against ONNX's reference implementation."""
    from onnx.reference import ReferenceEvaluator

    attrs = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    model = _resize_model(attrs, "sizes", 4, dtype=np.float64)
    _, gm = _module(model, max_sizes={"resize": 200})
    for sizes in ([1, 2, 6, 8], [1, 2, 2, 7], [1, 2, 1, 1], [1, 2, 10, 10]):
        _resize_same(gm, model, "sizes", sizes, dtype=np.float64, exact=False,
                     run=lambda m, f: ReferenceEvaluator(m).run(None, f))


def test_expand_run_time_input_dim():
    """An input dim that is a run-time dim (1 or more at run time) broadcast by a
    run-time shape: its output dim is data-dependent, checked against N too."""
    x = np.zeros((2, 1), np.float32)
    model = _model("Expand", {"x": x, "shape": np.array([1, 1], np.int64)})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "n"
    _, gm = _module(model, dims={"n": (1, 4)}, max_sizes={"expand": 12})
    for rows, shp in ((1, [3, 4]), (4, [1, 3]), (3, [3, 1]), (1, [0, 5]), (2, [2, 6])):
        _same(gm, model, {"x": RNG.standard_normal((rows, 1)).astype(np.float32),
                          "shape": np.array(shp, np.int64)})
    _past_bound(gm, {"x": np.zeros((4, 1), np.float32), "shape": np.array([1, 4], np.int64)},
                "expand")  # 4 x 4 > 12
    _past_bound(gm, {"x": np.zeros((3, 1), np.float32), "shape": np.array([2, 1], np.int64)},
                "expand")  # 3 vs 2
