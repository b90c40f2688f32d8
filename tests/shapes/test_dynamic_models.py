"""Libraries with run-time dims (issue 12): compiled once, run at three or more sizes
(both bounds included), matched against ONNX Runtime; refusals by type and message.

The op models are small one- or few-node graphs; the PP-OCR models (``slow``) are the
classifier at batch 1..8, the recognizer at widths 32..1280 and the detector at any
page size in steps of 32 (Magika and Silero: test_dynamic_magika_silero.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.build import compile as compile_model
from monolib.compiler.build import lower
from monolib.errors import CompileError, ShapeError, UndecidableDimError

F = TensorProto.FLOAT
RNG = np.random.default_rng(20261125)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def _i64(name, values):
    return name, np.array(values, dtype=np.int64)


def _check(model, sizes, atol=1e-4, gm=None, **kwargs):
    """Compile ``model`` once with ``kwargs`` (or use the executor ``gm``) and match ONNX
    Runtime at every input shape of ``sizes`` (``[{"x": shape}, ...]``): values and
    output shapes. Integer inputs get bytes (0..255)."""
    pytest.importorskip("onnxruntime")
    from monolib.compiler.testing import ort_run

    if gm is None:
        gm = monolib.GraphModule(compile_model(model, **kwargs)["default"](monolib.cpu()))
    _, dtypes = gm.get_input_info()
    for shapes in sizes:
        feeds = {
            k: (RNG.integers(0, 256, s) if np.dtype(dtypes[k]).kind in "iu"
                else RNG.standard_normal(s) * 0.5).astype(dtypes[k])
            for k, s in shapes.items()
        }
        for k, a in feeds.items():
            gm.set_input(k, a)
        gm.run()
        want = ort_run(model, feeds)
        for i, w in enumerate(want):
            got = gm.get_output(i).numpy()
            assert got.shape == w.shape, (shapes, i)
            np.testing.assert_allclose(got, w, atol=atol, rtol=1e-4, err_msg=str(shapes))


def _batch(*rest):
    return [{"x": (b, *rest)} for b in (1, 5, 8)]


def test_elementwise_chain_run_time_batch():
    m = _model(
        [helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["u"]),
         helper.make_node("Mul", ["u", "x"], ["y"])],
        [("x", F, ["batch", 16])], [("y", F, ["batch", 16])], [("b", _w(16))],
    )
    _check(m, _batch(16), dims={"batch": (1, 8)})
    _, graph_json, _ = lower(m, dims={"batch": (1, 8)})
    assert graph_json["version"] == 2
    assert graph_json["symbols"] == [{"name": "batch", "lo": 1, "hi": 8, "step": 1}]
    assert graph_json["inputs"][0]["shape"] == ["batch", 16]
    assert graph_json["inputs"][0]["max_nbytes"] == 8 * 16 * 4


def test_matmul_and_gemm_run_time_rows():
    mm = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                [("x", F, ["batch", "seq", 32])], [("y", F, ["batch", "seq", 24])],
                [("w", _w(32, 24))])
    sizes = [{"x": (1, 1, 32)}, {"x": (3, 7, 32)}, {"x": (8, 20, 32)}]
    _check(mm, sizes, dims={"batch": (1, 8), "seq": (1, 20)})
    gemm = _model([helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)],
                  [("x", F, ["batch", 32])], [("y", F, ["batch", 24])],
                  [("w", _w(24, 32)), ("c", _w(24))])
    _check(gemm, _batch(32), dims={"batch": (1, 8)})


def test_softmax_static_axis_run_time_outer():
    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
               [("x", F, ["batch", 10])], [("y", F, ["batch", 10])])
    _check(m, _batch(10), dims={"batch": (1, 8)})


def test_shape_chain_reshape_transpose_concat_slice():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds symbolically (the target
    [batch, -1] keeps its Dim); Transpose, Concat and Slice take the run-time dim."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b0"], axis=0),
        helper.make_node("Unsqueeze", ["b0", "ax0"], ["b1"]),
        helper.make_node("Concat", ["b1", "m1"], ["ns"], axis=0),
        helper.make_node("Reshape", ["x", "ns"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
        helper.make_node("Concat", ["t", "t"], ["c"], axis=1),
        helper.make_node("Slice", ["c", "st", "en", "axs"], ["y"]),
    ]
    m = _model(nodes, [("x", F, ["batch", 3, 4])], [("y", F, [12, None])],
               [_i64("i0", 0), _i64("ax0", [0]), _i64("m1", [-1]), _i64("st", [1]),
                _i64("en", [1000]), _i64("axs", [1])])
    _check(m, _batch(3, 4), dims={"batch": (1, 8)})
    _, graph_json, _ = lower(m, dims={"batch": (1, 8)})
    assert graph_json["outputs"][0]["shape"] == [12, "(2*batch - 1)"]


def test_shape_value_read_as_data_is_materialised():
    """A Shape of a run-time shape used as data (a graph output, a Cast feeding an Add)
    is filled from the symbol values when the op runs."""
    m = _model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Cast", ["s"], ["sf"], to=F),
         helper.make_node("Add", ["r", "sf"], ["y"])],
        [("x", F, ["batch", 2])], [("y", F, ["batch", 2]), ("s", TensorProto.INT64, [2])],
    )
    _check(m, _batch(2), dims={"batch": (1, 8)})


def _conv_model(k=3, group=1, cin=4, cout=8, pad=1, stride=1):
    return _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2,
                          group=group),
         helper.make_node("Relu", ["c"], ["y"])],
        [("x", F, ["batch", cin, "h", "w"])], [("y", F, ["batch", cout, None, None])],
        [("w", _w(cout, cin // group, k, k)), ("b", _w(cout))],
    )


_HW = {"batch": (1, 4), "h": (8, 64), "w": (8, 64)}


def _images(c):
    return [{"x": (1, c, 8, 8)}, {"x": (2, c, 13, 21)}, {"x": (4, c, 64, 64)}]


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"k": 1, "pad": 0}, {"stride": 2}, {"cin": 32, "cout": 32},
     {"group": 4, "cin": 4, "cout": 4}, {"group": 4, "cin": 4, "cout": 4, "stride": 2}],
    ids=["3x3", "1x1", "stride2", "wide", "depthwise", "depthwise-stride2"],
)
def test_conv_run_time_image(kwargs):
    _check(_conv_model(**kwargs), _images(kwargs.get("cin", 4)), dims=_HW)


@pytest.mark.parametrize(
    "node",
    [
        helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["x"], ["y"]),
    ],
    ids=["maxpool", "avgpool", "global"],
)
def test_pools_run_time_image(node):
    m = _model([node], [("x", F, ["batch", 4, "h", "w"])], [("y", F, ["batch", 4, None, None])])
    _check(m, _images(4), dims=_HW)


def test_resize_nearest_integer_upsample():
    m = _model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")],
               [("x", F, ["batch", 4, "h", "w"])], [("y", F, ["batch", 4, None, None])],
               [("s", np.array([1, 1, 2, 2], np.float32))], opset=13)
    _check(m, _images(4), dims=_HW)


_PROPERTY_GM: dict = {}


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 4), st.integers(8, 64), st.integers(8, 64), st.sampled_from([1, 2]))
def test_property_random_in_bound_shapes(batch, h, w, stride):
    """Conv -> MaxPool -> Resize, compiled once per stride, at random in-bound shapes."""
    if stride not in _PROPERTY_GM:
        m = _model(
            [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[stride] * 2),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Resize", ["p", "", "s"], ["y"], mode="nearest")],
            [("x", F, ["batch", 4, "h", "w"])], [("y", F, ["batch", 6, None, None])],
            [("w", _w(6, 4, 3, 3)), ("s", np.array([1, 1, 2, 2], np.float32))], opset=13,
        )
        gm = monolib.GraphModule(compile_model(m, dims=_HW)["default"](monolib.cpu()))
        _PROPERTY_GM[stride] = (m, gm)
    m, gm = _PROPERTY_GM[stride]
    if (h + 2 - 3) // stride + 1 < 2 or (w + 2 - 3) // stride + 1 < 2:
        return  # the pool needs a 2x2 window
    _check(m, [{"x": (batch, 4, h, w)}], gm=gm)


def _misc_models():
    """(id, model, dims, sizes): shape computations and ops over a run-time axis."""
    b = {"batch": (1, 8)}
    n = {"n": (1, 64)}
    expand = _model([helper.make_node("Shape", ["y"], ["s"]),
                     helper.make_node("Expand", ["x", "s"], ["z"])],
                    [("x", F, [1, 4]), ("y", F, ["batch", 4])], [("z", F, ["batch", 4])])
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])
    const_of_shape = _model([helper.make_node("Shape", ["y"], ["s"]),
                             helper.make_node("ConstantOfShape", ["s"], ["c"], value=fill),
                             helper.make_node("Add", ["c", "y"], ["z"])],
                            [("y", F, ["batch", 4])], [("z", F, ["batch", 4])])
    position_ids = _model(
        [helper.make_node("Shape", ["y"], ["s"]),
         helper.make_node("Gather", ["s", "i0"], ["k"], axis=0),
         helper.make_node("Range", ["z0", "k", "one"], ["r"]),
         helper.make_node("Cast", ["r"], ["rf"], to=F),
         helper.make_node("Unsqueeze", ["rf", "ax1"], ["ru"]),
         helper.make_node("Add", ["y", "ru"], ["z"])],
        [("y", F, ["batch", 4])], [("z", F, ["batch", 4])],
        [_i64("i0", 0), _i64("z0", 0), _i64("one", 1), _i64("ax1", [1])],
    )
    softmax = _model([helper.make_node("Softmax", ["y"], ["z"], axis=-1)],
                     [("y", F, [2, "n"])], [("z", F, [2, "n"])])
    concat = _model([helper.make_node("Concat", ["y", "y"], ["z"], axis=0)],
                    [("y", F, ["n", 3])], [("z", F, [None, 3])])
    gather = _model([helper.make_node("Gather", ["y", "i"], ["z"], axis=1)],
                    [("y", F, [2, "n"])], [("z", F, [2, 2])], [_i64("i", [0, 0])])
    flatten = _model([helper.make_node("Flatten", ["y"], ["z"], axis=1)],
                     [("y", F, ["n", 3, 4])], [("z", F, [None, 12])])
    rows = [{"y": (k, 4)} for k in (1, 5, 8)]
    return [
        ("expand", expand, b, [{"x": (1, 4), **r} for r in rows]),
        ("constant_of_shape", const_of_shape, b, rows),
        ("range_position_ids", position_ids, b, rows),
        ("softmax_run_time_axis", softmax, n, [{"y": (2, k)} for k in (1, 7, 64)]),
        ("concat_run_time_axis", concat, n, [{"y": (k, 3)} for k in (1, 7, 64)]),
        ("gather_run_time_axis", gather, n, [{"y": (2, k)} for k in (1, 7, 64)]),
        ("flatten", flatten, n, [{"y": (k, 3, 4)} for k in (1, 7, 64)]),
    ]


@pytest.mark.parametrize("case", _misc_models(), ids=lambda c: c[0])
def test_shape_computations_and_run_time_axes(case):
    _, model, dims, sizes = case
    _check(model, sizes, dims=dims)


# -- refusals --------------------------------------------------------------------------
def test_refusals_name_node_op_and_dim():
    linear = _model(
        [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")],
        [("x", F, [1, 4, "h", 8])], [("y", F, [1, 4, None, None])],
        [("s", np.array([1, 1, 1.5, 2], np.float32))], opset=13,
    )
    with pytest.raises(UndecidableDimError, match=r"Resize.*axis 2 has a run-time length"):
        lower(linear, dims={"h": (8, 64)})
    # two run-time dims that may differ do not broadcast
    add = _model([helper.make_node("Add", ["x", "z"], ["y"])],
                 [("x", F, ["a", 4]), ("z", F, ["b", 4])], [("y", F, [None, 4])])
    with pytest.raises(ShapeError, match=r"'Add_0'.*not broadcastable"):
        lower(add, dims={"a": (1, 8), "b": (1, 8)})
    assert issubclass(UndecidableDimError, CompileError)


@pytest.mark.parametrize("target", ["opencl", "cuda"])
def test_device_targets_refuse_run_time_dims(target):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["batch", 4])],
               [("y", F, ["batch", 4])])
    with pytest.raises(CompileError, match=rf"target {target}: run-time dims \(batch in \[1, 8\]\)"):
        compile_model(m, target=target, dims={"batch": (1, 8)})


# -- real models -----------------------------------------------------------------------
def _ppocr(key):
    """A model of ``monolib.models`` (fetched once, cached)."""
    from monolib.models import fetch_model

    return onnx.load(str(fetch_model(key)))


@pytest.mark.slow
def test_ppocr_cls_run_time_batch():
    _check(_ppocr("ppocr_cls"), [{"x": (b, 3, 48, 192)} for b in (1, 3, 8)],
           shapes={"x": ((1, 8), 3, 48, 192)})


@pytest.mark.slow
def test_ppocr_rec_run_time_width():
    _check(_ppocr("ppocr_rec"), [{"x": (1, 3, 48, w)} for w in (32, 100, 333, 1280)],
           shapes={"x": (1, 3, 48, (32, 1280))}, atol=1e-4)


@pytest.mark.slow
def test_ppocr_det_run_time_page():
    sizes = [{"x": (1, 3, h, w)} for h, w in ((32, 32), (480, 640), (736, 736), (1280, 1280))]
    _check(_ppocr("ppocr_det"), sizes,
           shapes={"x": (1, 3, (32, 1280, 32), (32, 1280, 32))}, atol=1e-4)


def test_opt_shapes_get_a_static_path():
    """An opt_shapes entry is compiled statically into the same library (weights stored
    once); monolib_run takes it on an exact match, the generic path otherwise."""
    m = _conv_model(k=1, pad=0, cin=8, cout=8)  # both paths pack the weights alike
    kwargs = {"dims": _HW, "opt_shapes": {"x": [(1, 8, 32, 32)]}}
    source, graph_json, params = lower(m, **kwargs)
    assert graph_json["specializations"] == [{"symbols": {"batch": 1, "h": 32, "w": 32}}]
    assert "ml_spec0(params, arena)" in source and "S[0] == 1 && S[1] == 32" in source
    _, _, generic_params = lower(m, dims=_HW)
    assert params.nbytes == generic_params.nbytes  # the weights are stored once
    _check(m, [{"x": (1, 8, 32, 32)}, {"x": (2, 8, 32, 32)}, {"x": (1, 8, 8, 64)}], **kwargs)
