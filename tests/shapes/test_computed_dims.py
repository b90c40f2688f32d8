"""Computed (data-dependent) dims, issue 13: a dim whose size a kernel writes during
``monolib_run`` (NonZero's count here). The symbol API, the graph JSON entry
(``"computed": true``) and its reader, the tools' label, and whole models whose later
ops (Shape, Cast, ReduceSum, Gather) read the computed size, run through the Python
executor and the C API, matched with ONNX Runtime, the empty result included."""

from __future__ import annotations

import ctypes
import json
import os
import sys

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import monolib
from monolib.abi.symbols import ComputedSymbol, dynamic_layout
from monolib.compiler.symbolic import Dim, computed_symbol, is_computed
from monolib.compiler.testing import ort_run, run_model
from monolib.errors import ContainerError, ShapeError, UndecidableDimError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "capi"))


def test_computed_symbol_api():
    s = computed_symbol("NonZero/7 count", hi=24)
    assert s.name.isidentifier() and s.name.startswith("NonZero_7_count")
    assert (s.lo, s.hi, s.step) == (0, 24, 1) and is_computed(s) and s.computed
    assert computed_symbol("NonZero/7 count", hi=24).name != s.name  # fresh each time
    d = Dim.of(s)
    assert is_computed(d) and not is_computed(d * 2) and (d * 3).hi == 72
    # "empty?" skips no code (kernels loop 0 times); other questions stay undecidable
    assert (d == 0) is False and ((d * 4) == 0) is False
    with pytest.raises(UndecidableDimError):
        bool(d - 1 == 0)
    assert s.as_json() == {"name": s.name, "lo": 0, "hi": 24, "step": 1, "computed": True}
    with pytest.raises(ShapeError):
        computed_symbol("bad", hi=-1)


def _graph(symbols, arena=4096):
    return {"symbols": symbols, "sym_offset": 0, "shape_offset": 64, "arena_bytes": arena,
            "inputs": [{"name": "x", "shape": ["n"]}], "outputs": [{"name": "y", "shape": [2]}],
            "specializations": [{"symbols": {"n": 4}}]}


def test_graph_json_reads_computed_symbols():
    layout = dynamic_layout(_graph([{"name": "n", "lo": 1, "hi": 8, "step": 1},
                                    {"name": "c", "lo": 0, "hi": 8, "computed": True}]), 4096)
    n, c = layout.symbols
    assert not n.computed and c.computed and isinstance(c, ComputedSymbol)
    assert c.label() == "c\u2208[0,8] computed"
    # lo 0 and "named by no input" are for computed symbols only
    with pytest.raises(ContainerError, match="no input's dim"):
        dynamic_layout(_graph([{"name": "n", "lo": 1, "hi": 8},
                               {"name": "c", "lo": 1, "hi": 8}]), 4096)
    with pytest.raises(ContainerError, match="bounds"):
        dynamic_layout(_graph([{"name": "n", "lo": 0, "hi": 8}]), 4096)
    with pytest.raises(ContainerError, match="not a bool"):
        dynamic_layout(_graph([{"name": "n", "lo": 1, "hi": 8},
                               {"name": "c", "lo": 0, "hi": 8, "computed": 1}]), 4096)


def _nonzero_model(shape):
    nodes = [h.make_node("NonZero", ["x"], ["i"], name="nz"),
             h.make_node("Shape", ["i"], ["s"]),
             h.make_node("Cast", ["i"], ["f"], to=T.FLOAT),
             h.make_node("ReduceSum", ["f"], ["sum"], keepdims=0)]
    outs = [h.make_tensor_value_info("i", T.INT64, [len(shape), "k"]),
            h.make_tensor_value_info("s", T.INT64, [2]),
            h.make_tensor_value_info("sum", T.FLOAT, [])]
    if len(shape) == 1:  # the selected elements, gathered by the computed indices
        nodes.append(h.make_node("Gather", ["x", "i"], ["g"], axis=0))
        outs.append(h.make_tensor_value_info("g", T.FLOAT, [1, "k"]))
    g = h.make_graph(nodes, "nz", [h.make_tensor_value_info("x", T.FLOAT, shape)], outs)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


def _cases(rng, shape):
    x = rng.normal(size=shape).astype(np.float32)
    return [x * (rng.random(shape) > 0.6), np.zeros(shape, np.float32), x]


def test_nonzero_count_flows_to_later_ops():
    rng = np.random.default_rng(0)
    model = _nonzero_model([5])
    for x in _cases(rng, (5,)):
        got, want = run_model(model, {"x": x}), ort_run(model, {"x": x})
        for a, b in zip(got, want):
            assert a.shape == b.shape and np.array_equal(a, b)


def test_computed_dim_beside_an_input_symbol_and_in_the_graph_json():
    rng = np.random.default_rng(1)
    model = _nonzero_model([2, "n"])
    factory = monolib.compile(model, shapes={"x": (2, (1, 6))})
    syms = factory.get_graph_json()["symbols"]
    assert [s.get("computed", False) for s in syms] == [False, True]
    assert syms[1]["lo"] == 0 and syms[1]["hi"] == 12  # the element count at the bounds
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    for n in (1, 6, 3):
        for x in _cases(rng, (2, n)):
            gm.run(x=x)
            want = ort_run(model, {"x": x})
            for k, b in enumerate(want[:3]):
                a = gm.get_output(k).numpy()
                assert a.shape == b.shape and np.array_equal(a, b)


def test_c_api_reports_the_computed_shape_and_inspect_labels_it(tmp_path, capsys):
    from capihelp import bind, last_error

    from monolib.cli import main

    model = _nonzero_model([6])
    path = monolib.compile(model).export_library(str(tmp_path / "libnz.so"))
    assert main(["inspect", path]) == 0
    assert "\u2208[0,6] computed" in capsys.readouterr().out
    assert main(["inspect", "--json", path]) == 0
    (graph,) = json.loads(capsys.readouterr().out)["graphs"].values()
    assert [s.get("computed") for s in graph["symbols"]] == [True]
    lib = bind(path)
    handle = lib.monolib_open()
    assert handle, last_error(lib)
    try:
        for x in (np.array([0, 2, 0, 3, 4, 0], np.float32), np.zeros(6, np.float32)):
            assert lib.monolib_set_input(handle, 0, x.ctypes.data, x.nbytes) == 0, last_error(lib)
            assert lib.monolib_run_model(handle) == 0, last_error(lib)
            shape = (ctypes.c_int64 * 2)()
            assert lib.monolib_output_shape(handle, 0, shape) == 0
            want = np.array(np.nonzero(x), np.int64)
            assert tuple(shape) == want.shape
            got = np.empty(want.shape, np.int64)
            rc = lib.monolib_get_output(handle, 0, got.ctypes.data, got.nbytes)
            assert rc == 0, last_error(lib)
            assert np.array_equal(got, want)
    finally:
        lib.monolib_close(handle)


def test_shape_arithmetic_on_a_computed_count():
    """Exported post-processing reads the count through Shape -> Gather -> Concat ->
    Reshape, ConstantOfShape and Range: all fold symbolically over the computed dim."""
    from onnx import numpy_helper as nh

    inits = [nh.from_array(np.array([0], np.int64), "z0"),
             nh.from_array(np.array([2, 2], np.int64), "two2"),
             nh.from_array(np.array(0, np.int64), "zs"),
             nh.from_array(np.array(1, np.int64), "one")]
    nodes = [h.make_node("NonZero", ["x"], ["nz"]),
             h.make_node("Transpose", ["nz"], ["sel"], perm=[1, 0]),
             h.make_node("Shape", ["sel"], ["ss"]),
             h.make_node("Gather", ["ss", "z0"], ["k"], axis=0),
             h.make_node("Concat", ["k", "two2"], ["tgt"], axis=0),
             h.make_node("Concat", ["sel", "sel"], ["selx"], axis=1),
             h.make_node("Reshape", ["selx", "tgt"], ["r"]),
             h.make_node("ConstantOfShape", ["ss"], ["zeros"]),
             h.make_node("Squeeze", ["k"], ["ks"]),
             h.make_node("Range", ["zs", "ks", "one"], ["ids"])]
    outs = [h.make_tensor_value_info("r", T.INT64, ["k", 2, 2]),
            h.make_tensor_value_info("zeros", T.FLOAT, ["k", 2]),
            h.make_tensor_value_info("ids", T.INT64, ["k"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [3, 4])], outs, inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    lib = monolib.compile(model)
    assert len(lib.get_graph_json()["symbols"]) == 1  # only NonZero's count
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    for x in _cases(np.random.default_rng(4), (3, 4)):
        gm.run(x=x)
        for i, want in enumerate(ort_run(model, {"x": x})):
            got = gm.get_output(i).numpy()
            assert got.shape == want.shape and np.array_equal(got, want)


def test_debug_executor_reads_a_computed_shape():
    from monolib.runtime.debug_executor import create

    dbg = create(monolib.compile(_nonzero_model([5])))
    for x in (np.array([0, 1, 0, 2, 3], np.float32), np.zeros(5, np.float32)):
        dbg.set_input("x", x)
        assert np.array_equal(dbg.debug_get_output(0).numpy(), np.array(np.nonzero(x)))


def test_opt_shapes_with_computed_dims():
    """The static path at x [2, 3] computes NonZero's count in its own slot and
    monolib_run copies it to the generic one, where the output shapes are read."""
    model = _nonzero_model([2, "n"])
    lib = monolib.compile(model, shapes={"x": (2, (1, 6))}, opt_shapes={"x": [(2, 3)]})
    assert lib.get_graph_json()["specializations"] == [{"symbols": {"n": 3}}]
    run_spec = lib.imported_modules[0].source.split("static void ml_spec0")[1].split("}")[0]
    assert "= ((const int64_t*)(arena + " in run_spec  # the count copied to its slot
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    rng = np.random.default_rng(12)
    for n in (3, 5, 3):
        for x in _cases(rng, (2, n)):
            gm.run(x=x)
            assert gm.executor.shapes.specialized() == (0 if n == 3 else None)
            for k, want in enumerate(ort_run(model, {"x": x})[:3]):
                got = gm.get_output(k).numpy()
                assert got.shape == want.shape and np.array_equal(got, want)


_W = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
_CONSUMERS = {
    "matmul": [h.make_node("MatMul", ["f", "W"], ["o"])],
    "gemm": [h.make_node("Gemm", ["f", "W"], ["o"])],
    "softmax_over_k": [h.make_node("Softmax", ["f"], ["o"], axis=0)],
    "softmax": [h.make_node("Softmax", ["f"], ["o"], axis=1)],
    "reducemax_over_k": [h.make_node("ReduceMax", ["f"], ["o"], axes=[0], keepdims=1)],
    "concat_k": [h.make_node("Concat", ["f", "f"], ["o"], axis=0)],
    "concat": [h.make_node("Concat", ["f", "f"], ["o"], axis=1)],
    "transpose": [h.make_node("Transpose", ["f"], ["o"], perm=[1, 0])],
    "cumsum_over_k": [h.make_node("CumSum", ["f", "ax0"], ["o"])],
    "layernorm": [h.make_node("LayerNormalization", ["f", "g2", "b2"], ["o"], axis=-1)],
    "pad_k": [h.make_node("Pad", ["f", "pads"], ["o"])],
    "where": [h.make_node("Greater", ["f", "half"], ["c"]),
              h.make_node("Where", ["c", "f", "half"], ["o"])],
}


@pytest.mark.parametrize("name", sorted(_CONSUMERS))
def test_ops_after_a_computed_dim(name):
    """NonZero's indices as float [k, 2] into ops of other families (GEMM, reductions,
    softmax over k, concat, pad, norms): each matches ORT, the empty k included."""
    from onnx import numpy_helper as nh

    nodes = [h.make_node("NonZero", ["x"], ["nz"]),
             h.make_node("Transpose", ["nz"], ["t"], perm=[1, 0]),
             h.make_node("Cast", ["t"], ["f"], to=T.FLOAT), *_CONSUMERS[name]]
    inits = [nh.from_array(_W, "W"), nh.from_array(np.array(0, np.int64), "ax0"),
             nh.from_array(np.ones(2, np.float32), "g2"),
             nh.from_array(np.zeros(2, np.float32), "b2"),
             nh.from_array(np.array([1, 0, 0, 1], np.int64), "pads"),
             nh.from_array(np.array(0.5, np.float32), "half")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                     [h.make_tensor_value_info("o", T.FLOAT, ["p", "q"])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    for x in _cases(np.random.default_rng(6), (3, 4)):
        gm.run(x=x)
        (want,) = ort_run(model, {"x": x})
        got = gm.get_output(0).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.uint8, np.float32])
def test_nonzero_dtypes_nan_and_negative_zero(dtype):
    from monolib.compiler.testing import make_node_model

    rng = np.random.default_rng(8)
    x = (rng.integers(0, 3, size=(2, 3, 4)) * (rng.random((2, 3, 4)) > 0.5)).astype(dtype)
    if dtype == np.float32:  # NaN counts as nonzero, -0.0 as zero
        x[0, 0, :2] = [np.nan, -0.0]
    model = make_node_model("NonZero", {"x": x}, opset=13)
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    for v in (x, np.zeros_like(x)):
        gm.run(x=v)
        (want,) = ort_run(model, {"x": v})
        assert np.array_equal(gm.get_output(0).numpy(), want)
