"""A 1x1 convolution and the depthwise convolution that reads it, run by bands of rows
(``passes/conv_bands.py``, ``ops/nn/conv_band.py``, ``ops/nn/conv_band.h``).

With the size threshold lowered and bands of a few rows (so that small graphs take many
bands, halo rows carried from band to band, and runs of rows split over threads), the
pairs match ONNX Runtime for 3x3 and 5x5 windows, strides 1 and 2, symmetric and
asymmetric pads, odd sizes, rows narrower than a vector, a batch of 2, fused epilogues on
both convolutions (Clip, a per-channel scale, HardSwish); they give the same bits on 1, 2
and 3 threads, and the intermediate gets no storage. What must not pair stays two ops:
an intermediate read elsewhere or returned, an epilogue that reads data varying across
the image, a depthwise conv off the fast path, and pairs below the default threshold.
The scratch size conv_band.py reserves is the C kernel's own formula.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.ops.nn import conv_band
from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
from monolib.compiler.pipeline import prepare
from monolib.compiler.passes.conv_bands import fuse_conv_bands
from monolib.compiler.testing import build_shared, ort_run
from monolib.runtime import set_num_threads


def _pair(n, k, c, h, w, kernel, stride, pads, *, pw="clip_scale", dw="HardSwish",
          extra=(), outputs=("y",), dilation=1):
    """x [n, k, h, w] -> Conv 1x1 (k -> c) -> pw epilogue -> depthwise Conv -> dw act."""
    rng = np.random.default_rng(k * 100 + c)
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, k, 1, 1)) * 0.3).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((c, 1, kernel, kernel)) * 0.3)
                                .astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2"),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
        numpy_helper.from_array((rng.random((c, 1, 1)) + 0.5).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.random((1, c, h, w)).astype(np.float32), "plane"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"])]
    if pw == "clip_scale":
        nodes += [helper.make_node("Clip", ["a", "lo", "hi"], ["a2"]),
                  helper.make_node("Mul", ["a2", "scale"], ["b"])]
    elif pw == "plane":  # varies across the image: cannot run on a band
        nodes += [helper.make_node("Add", ["a", "plane"], ["b"])]
    else:
        nodes += [helper.make_node("Identity", ["a"], ["b"])]
    nodes += [
        helper.make_node("Conv", ["b", "w2", "b2"], ["d"], group=c, pads=list(pads),
                         strides=[stride, stride], kernel_shape=[kernel, kernel],
                         dilations=[dilation, dilation]),
        helper.make_node(dw, ["d"], ["y"]),
        *extra,
    ]
    span = (kernel - 1) * dilation + 1
    oh = (h + pads[0] + pads[2] - span) // stride + 1
    ow = (w + pads[1] + pads[3] - span) // stride + 1
    shapes = {"y": [n, c, oh, ow], "b": [n, c, h, w], "z": [n, c, h, w]}
    graph = helper.make_graph(
        nodes, "pair", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, k, h, w])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _bands(model) -> list:
    _, fusion, _ = prepare(model)
    return [f for f in fuse_conv_bands(fusion).ops if f.kind == "band"]


@pytest.fixture
def small_bands(monkeypatch):
    """Every pair qualifies; bands of 4 output rows (700 floats of expanded rows)."""
    monkeypatch.setattr(conv_band, "BAND_MIN_BYTES", 0)
    monkeypatch.setattr(conv_band, "BAND_FLOATS", 700)


CASES = {
    "3x3_s1_p1_odd": (1, 8, 12, 37, 29, 3, 1, (1, 1, 1, 1)),
    "3x3_s2_p1_even": (1, 16, 32, 64, 64, 3, 2, (1, 1, 1, 1)),
    "3x3_s2_p1_odd_rows": (1, 4, 6, 35, 21, 3, 2, (1, 1, 1, 1)),
    "5x5_s2_p2_batch2": (2, 5, 7, 23, 50, 5, 2, (2, 2, 2, 2)),
    "5x5_s1_p2": (1, 6, 18, 30, 17, 5, 1, (2, 2, 2, 2)),
    "3x3_asym_pads_narrow": (1, 3, 13, 9, 5, 3, 1, (0, 1, 2, 0)),
    "3x3_s1_p0": (1, 7, 10, 26, 40, 3, 1, (0, 0, 0, 0)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pairs_run_by_bands_match_onnxruntime(name, small_bands):
    model = _pair(*CASES[name])
    bands = _bands(model)
    assert len(bands) == 1 and bands[0].fused_types == ["Clip", "Mul", "Conv", "HardSwish"]
    n, k, _, h, w = CASES[name][:5]
    x = np.random.default_rng(1).standard_normal((n, k, h, w)).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    runs = []
    try:
        for threads in (1, 2, 3):
            set_num_threads(threads)
            gm.run(x=x)
            runs.append(gm.get_output(0).numpy().copy())
    finally:
        set_num_threads(1)
    tol = 1e-5 * max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(runs[0], want, rtol=0, atol=tol)
    for got in runs[1:]:  # rows split over threads: each computes its own halo rows
        np.testing.assert_array_equal(got, runs[0])


def test_the_intermediate_gets_no_storage(small_bands, monkeypatch):
    model = _pair(*CASES["3x3_s2_p1_even"])
    banded = monolib.compile(model).graph_json
    monkeypatch.setattr(conv_band, "BAND_MIN_BYTES", 1 << 60)
    plain = monolib.compile(model).graph_json
    assert len(banded["nodes"]) == len(plain["nodes"]) - 1
    node = next(n for n in banded["nodes"] if "Conv" in n.get("fused", []))
    assert "b" not in node["inputs"] and "a" not in node["inputs"]
    # the 32 x 64 x 64 intermediate (512 KiB) is gone from the arena
    assert banded["arena_bytes"] <= plain["arena_bytes"] - 4 * 32 * 64 * 64 + 4 * 2 ** 17


@pytest.mark.parametrize("case", ["returned", "read_twice", "varies_across_image",
                                  "dilated", "below_threshold"])
def test_what_does_not_pair(case, small_bands, monkeypatch):
    shape = (1, 8, 12, 37, 29, 3, 1, (1, 1, 1, 1))
    if case == "returned":
        model = _pair(*shape, outputs=("y", "b"))
    elif case == "read_twice":
        model = _pair(*shape, extra=[helper.make_node("Relu", ["b"], ["z"])], outputs=("y", "z"))
    elif case == "varies_across_image":
        model = _pair(*shape, pw="plane")
    elif case == "dilated":  # ml_dwconv2d's run-time-loop path
        model = _pair(*shape[:7], (2, 2, 2, 2), dilation=2)
    else:
        monkeypatch.setattr(conv_band, "BAND_MIN_BYTES", 4 * conv_band.L2_BYTES)
        model = _pair(*shape)
    assert _bands(model) == []
    x = np.random.default_rng(2).standard_normal((1, 8, 37, 29)).astype(np.float32)
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    gm.run(x=x)
    want = ort_run(model, {"x": x})
    for i, w in enumerate(want):
        np.testing.assert_allclose(gm.get_output(i).numpy(), w, rtol=0, atol=1e-4)


def test_scratch_is_the_kernels_formula(small_bands):
    """conv_band.py reserves max over vector widths of ml_pwdw_scratch_floats: the same
    numbers as the C function for each width."""
    rows = []
    for name in sorted(CASES):
        band = _bands(_pair(*CASES[name]))[0]
        p, d = band.parts
        dd = as_2d(list(p.out.shape[2:]), conv_geometry(d.anchor))
        k, c = p.anchor.inputs[0].shape[1], p.out.shape[1]
        rows.append((k, c, dd, conv_band.band_rows(p, d)))
    keys = ("W", "OH", "OW", "KH", "SH", "SW", "PL")
    table = ", ".join(str(v) for k, c, d, r in rows for v in (k, c, *(d[q] for q in keys), r))
    src = (
        "#include <stdint.h>\n#include <string.h>\n"
        + kernel_header("gemm.h") + kernel_header("conv.h") + kernel_header("conv_depthwise.h")
        + kernel_header("conv_band.h")
        + f"static const int64_t T[] = {{{table}}};\n"
        "void scratch(int64_t* out, int n) { for (int i = 0; i < n; ++i) { const int64_t* t = "
        "T + 10 * i; out[i] = ml_pwdw_scratch_floats(t[0], t[1], t[2], t[3], t[4], (int)t[5], "
        "(int)t[6], (int)t[7], t[8], t[9]); } }\n"
    )
    for vw, options in ((4, ["-DML_VW=4", "-DML_NP=1"]), (8, ["-DML_VW=8", "-DML_NP=1"]),
                        (16, ["-DML_VW=16", "-DML_NP=2"])):
        lib = build_shared(src, options)
        out = (ctypes.c_int64 * len(rows))()
        lib.scratch(out, len(rows))
        assert list(out) == [conv_band.band_scratch_floats(k, c, d, r, vw)
                             for k, c, d, r in rows], vw
