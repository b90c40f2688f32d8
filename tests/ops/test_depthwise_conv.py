"""Depthwise convolution (``ml_dwconv2d`` of ops/nn/conv_depthwise.h, ``emit_depthwise`` of
ops/nn/conv_dw_along_w.py).

The unrolled path (3x3/5x5, strides 1 and 2 each way, tiles of 4 and 3 output rows) and
the run-time-loop path match the NumPy reference for pads 0/1/2/asymmetric, odd sizes,
rows narrower than a vector, wider than three and in between, fewer output rows than a
tile and a last tile moved back over rows already done, 1 to 48 channels, with and
without bias, with the harness's non-idempotent epilogue (an output row whose epilogue
ran twice, or never, shows); also with 4- and 16-float vectors. A compiled model with
fused HardSwish/Relu matches ONNX Runtime and gives the same bits on 1 and 2 threads. The
scratch size conv.py reserves is the C kernel's own formula.
"""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
from frontend.onnx_util import F32, make_model
from harness import EPI, VECTOR_WIDTHS, NodeContext, make_node, run_c, run_threads
from onnx import helper

from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.build import lower
from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn import conv, conv_dw_along_w
from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
from monolib.compiler.testing import build_shared, ort_run

RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _w_vectorised(monkeypatch):
    """These tests are ml_dwconv2d's: the rule keeps it over the channel-blocked kernel
    (test_depthwise_blocked.py)."""
    monkeypatch.setattr(conv, "dw_costs", lambda d, c, fast, vw=None: {
        "depthwise": 0.0, "depthwise_cb": 1.0})


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


# name: (x shape, kernel, attrs (group added), entry point expected)
CASES = {
    "3x3_s11_p1_wide": ((1, 16, 20, 37), 3, {"pads": [1, 1, 1, 1]}, "3_11"),
    "3x3_s11_p1_narrower_than_a_vector": ((1, 7, 9, 5), 3, {"pads": [1, 1, 1, 1]}, "3_11_r3"),
    "3x3_s11_p0_one_channel": ((1, 1, 11, 19), 3, {}, "3_11_r3"),
    "3x3_s22_p1_odd": ((2, 48, 17, 35), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "3_22_r3"),
    "3x3_s22_p0_two_rows_unused_column": ((1, 7, 5, 20), 3, {"strides": [2, 2]}, "3_22_r3"),
    "3x3_s21_p1": ((1, 16, 24, 41), 3, {"pads": [1, 1, 1, 1], "strides": [2, 1]}, "3_21"),
    "3x3_s12_p1_seven_rows": ((1, 7, 7, 45), 3, {"pads": [1, 1, 1, 1], "strides": [1, 2]}, "3_12"),
    "3x3_asym_pads": ((1, 16, 13, 29), 3, {"pads": [0, 1, 2, 0]}, "3_11_r3"),
    "5x5_s11_p2": ((1, 16, 21, 43), 5, {"pads": [2, 2, 2, 2]}, "5_11_r3"),
    "5x5_s22_p2": ((1, 7, 23, 50), 5, {"pads": [2, 2, 2, 2], "strides": [2, 2]}, "5_22"),
    "5x5_s21_p2_three_rows": (
        (1, 16, 6, 83),
        5,
        {"pads": [2, 2, 2, 2], "strides": [2, 1]},
        "5_21_r3",
    ),
    "5x5_s12_p2": ((1, 1, 6, 33), 5, {"pads": [2, 2, 2, 2], "strides": [1, 2]}, "5_12_r3"),
    "5x5_input_smaller_than_window": ((1, 7, 4, 3), 5, {"pads": [2, 2, 2, 2]}, "5_11"),
    "5x5_asym_s2": ((1, 16, 15, 40), 5, {"pads": [1, 2, 3, 0], "strides": [2, 2]}, "5_22"),
    # the run-time-loop path
    "3x3_dilated": ((1, 7, 14, 30), 3, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, "any"),
    "7x7": ((1, 16, 15, 26), 7, {"pads": [3, 3, 3, 3]}, "any"),
    "3x3_stride3": ((1, 7, 16, 29), 3, {"pads": [1, 1, 1, 1], "strides": [3, 3]}, "any"),
    "5x5_pads_over_4": ((1, 7, 9, 12), 5, {"pads": [5, 5, 5, 5]}, "any"),
    "1x5": ((1, 16, 7, 40), (1, 5), {"pads": [0, 2, 0, 2]}, "any"),
}


def _node(name: str, bias: bool = True):
    xs, k, attrs, _ = CASES[name]
    c = xs[1]
    kh, kw = (k, k) if isinstance(k, int) else k
    attrs = {**attrs, "group": c}
    ins = [r(*xs), r(c, 1, kh, kw, scale=0.3), r(c) if bias else None]
    node = make_node("Conv", ins, attrs, const=[1, 2] if bias else [1], opset=11)
    return (ins if bias else ins[:2]), node


def _check(ins, node, options=(), epilogue=True) -> None:
    ref = op_of(node).reference(node, list(ins))[0]
    want = ref * EPI[0] + EPI[1] if epilogue else ref
    got = run_c(node, ins, "affine" if epilogue else None, options)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_depthwise_matches_reference(name: str) -> None:
    ins, node = _node(name)
    ctx = NodeContext(node, "affine")
    src = op_of(node).emit(node, ctx)
    assert f"ml_dw_units_{CASES[name][3]})" in src, src
    _check(ins, node)


def test_depthwise_without_bias_or_epilogue() -> None:
    for name in ("3x3_s22_p1_odd", "5x5_s11_p2", "7x7"):
        ins, node = _node(name, bias=False)
        _check(ins, node, epilogue=False)


@pytest.mark.parametrize("width", sorted(VECTOR_WIDTHS))
@pytest.mark.parametrize(
    "name", ["3x3_s22_p1_odd", "5x5_s11_p2", "3x3_s11_p1_narrower_than_a_vector"]
)
def test_depthwise_other_vector_widths(name: str, width: str) -> None:
    ins, node = _node(name)
    _check(ins, node, VECTOR_WIDTHS[width])


def test_scratch_is_the_kernels_formula() -> None:
    """conv.py reserves max over vector widths of ml_dw_scratch_floats: the same numbers
    as the C function for each width, on fast and run-time-loop shapes."""
    dims = []
    for name in sorted(CASES):
        node = _node(name)[1]
        dims.append(as_2d(list(CASES[name][0][2:]), conv_geometry(node)))
    dims += [
        as_2d([320, 320], conv_geometry(_node_for((1, 4, 320, 320), 3, [1, 1, 1, 1], [2, 2]))),
        as_2d([3000, 1700], conv_geometry(_node_for((1, 1, 3000, 1700), 5, [2, 2, 2, 2], [1, 1]))),
    ]
    keys = ("W", "OH", "OW", "KH", "KW", "SH", "SW", "PL", "DH", "DW")
    table = ", ".join(str(d[k]) for d in dims for k in keys)
    src = (
        "#include <stdint.h>\n#include <string.h>\n"
        + kernel_header("gemm.h")
        + kernel_header("conv.h")
        + kernel_header("conv_depthwise.h")
        + f"static const int64_t T[] = {{{table}}};\n"
        "void scratch(int64_t* out, int n) { for (int i = 0; i < n; ++i) { const int64_t* t = "
        "T + 10 * i; out[i] = ml_dw_scratch_floats(t[0], t[1], t[2], (int)t[3], (int)t[4], "
        "(int)t[5], (int)t[6], t[7], (int)t[8], (int)t[9]); } }\n"
    )
    for vw, options in (
        (4, ["-DML_VW=4", "-DML_NP=1"]),
        (8, ["-DML_VW=8", "-DML_NP=1"]),
        (16, ["-DML_VW=16", "-DML_NP=2"]),
    ):
        lib = build_shared(src, options)
        out = (ctypes.c_int64 * len(dims))()
        lib.scratch(out, len(dims))
        assert list(out) == [conv_dw_along_w.dw_scratch_floats(d, vw) for d in dims], vw


def _node_for(xs, k, pads, strides):
    ins = [r(*xs), r(xs[1], 1, k, k)]
    return make_node(
        "Conv", ins, {"group": xs[1], "pads": pads, "strides": strides}, const=[1], opset=11
    )


# -- a compiled model on the thread pool ---------------------------------------------------


def _model() -> onnx.ModelProto:
    """PP-OCR-like: dw 3x3 (3 channels: split in bands of rows) + HardSwish as Add, Clip,
    Mul, Div; dw 5x5 stride 2 (24 channels) + bias + Relu; dw 3x3 stride (2, 1). The
    first two are over the thread pool's threshold (2M multiply-adds)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], group=3, pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c1", "three"], ["a1"]),
        helper.make_node("Clip", ["a1", "zero", "six"], ["k1"]),
        helper.make_node("Mul", ["c1", "k1"], ["m1"]),
        helper.make_node("Div", ["m1", "six"], ["y1"]),
        helper.make_node(
            "Conv", ["s", "w2", "b2"], ["c2"], group=24, pads=[2, 2, 2, 2], strides=[2, 2]
        ),
        helper.make_node("Relu", ["c2"], ["y2"]),
        helper.make_node(
            "Conv", ["s", "w3", "b3"], ["y3"], group=24, pads=[1, 1, 1, 1], strides=[2, 1]
        ),
    ]
    weights = {
        "w1": r(3, 1, 3, 3),
        "w2": r(24, 1, 5, 5, scale=0.3),
        "b2": r(24, scale=0.3),
        "w3": r(24, 1, 3, 3, scale=0.3),
        "b3": r(24, scale=0.3),
        **{k: np.array(v, np.float32) for k, v in (("three", 3.0), ("zero", 0.0), ("six", 6.0))},
    }
    return make_model(
        nodes,
        [("x", F32, [1, 3, 300, 131]), ("s", F32, [1, 24, 121, 153])],
        [
            ("y1", F32, [1, 3, 300, 131]),
            ("y2", F32, [1, 24, 61, 77]),
            ("y3", F32, [1, 24, 61, 153]),
        ],
        weights,
    )


def test_compiled_depthwise_on_one_and_two_threads() -> None:
    model = _model()
    source, _, _ = lower(model, None, None)
    for units in ("ml_dw_units_3_11)", "ml_dw_units_5_22)", "ml_dw_units_3_21)"):
        assert units in source
    assert source.count("ml_dwconv2d(") == 4  # the definition and three calls
    feeds = {"x": r(1, 3, 300, 131, scale=3.0), "s": r(1, 24, 121, 153)}
    want = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    assert (one[0] >= -0.375).all() and (one[1] >= 0).all()  # HardSwish, Relu
    for a, b in zip(one, two):  # tasks own whole rows: the same sums
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("algo,fn", [("depthwise(rows=3)", "ml_dwconv2d("),
                                     ("depthwise_cb", "ml_dwcb_conv2d(")])
def test_images_are_one_job(algo, fn) -> None:
    """A batch is one call (along W or channel-blocked) whose units are every image's:
    on 2 and 3 threads each image's output is the same bits as on 1 and as a batch-1
    library's, and matches ONNX Runtime."""
    import monolib
    from frontend.onnx_util import F32, make_model
    from harness import run_threads
    from onnx import helper

    from monolib.compiler.build import lower
    from monolib.compiler.testing import ort_run
    from monolib.compiler.tuning.select import Selection, selecting

    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=24, pads=[1, 1, 1, 1],
                              name="dw"),
             helper.make_node("Relu", ["c"], ["y"])]
    weights = {"w": rng.standard_normal((24, 1, 3, 3)).astype(np.float32),
               "b": rng.standard_normal(24).astype(np.float32)}

    def model(n):
        return make_model(nodes, [("x", F32, [n, 24, 12, 40])], [("y", F32, [n, 24, 12, 40])],
                          weights, opset=14)

    feeds = {"x": rng.standard_normal((3, 24, 12, 40)).astype(np.float32)}
    with selecting(Selection(forced={"dw": algo})):
        source, _, _ = lower(model(3), None, None)
        call = source[source.rindex(fn):]
        assert source.count(fn) == 2 and call.startswith(fn + "3, 24, "), call[:40]
        two, three, one = run_threads(model(3), feeds, (2, 3, 1))
        single = monolib.GraphModule(monolib.compile(model(1))["default"](monolib.cpu()))
    want = ort_run(model(3), feeds)[0]
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[0], three[0])
    for i in range(3):
        single.run(x=feeds["x"][i : i + 1])
        np.testing.assert_array_equal(single.get_output(0).numpy()[0], one[0][i])
