"""A depthwise convolution with the 1x1 convolution before it and/or after it, run by
bands of rows (``passes/conv_bands.py``, ``ops/nn/conv_band.py``, ``ops/nn/conv_band.h``).

With the size threshold lowered and bands of a few rows (so that small graphs take many
bands, halo rows carried from band to band, and runs of rows split over threads), each
kind of chain (expansion + depthwise, depthwise + projection, all three with a residual
Add on the projection) matches ONNX Runtime for 3x3 and 5x5 windows, strides 1 and 2,
symmetric and asymmetric pads, odd sizes, rows narrower than a vector, a batch of 2,
fused epilogues (Clip, a per-channel scale, HardSwish); each gives the same bits on 1, 2
and 3 threads, and the intermediates get no storage. What must not chain stays apart:
an intermediate read elsewhere or returned, an epilogue that reads data varying across
the image, a depthwise conv off the fast path, and chains below the default threshold;
a 1x1 between two depthwise convs goes with the chain that keeps more bytes. The
scratch size conv_band.py reserves is the C kernel's own formula.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.build import lower
from monolib.compiler.ops.nn import conv_band
from monolib.compiler.passes.conv_bands import fuse_conv_bands
from monolib.compiler.pipeline import prepare
from monolib.compiler.testing import build_shared, ort_run
from monolib.runtime import set_num_threads


def _chain(n, k, c, h, w, kernel, stride, pads, *, pw="clip_scale", dw="HardSwish",
           extra=(), outputs=("y",), dilation=1, expand=True, project=False):
    """x [n, k, h, w] -> (Conv 1x1 k -> c, pw epilogue) -> depthwise Conv -> dw act
    -> (Conv 1x1 c -> k + the depthwise conv's input, a residual, where it has the
    shape). Without ``expand``, x has c channels."""
    rng = np.random.default_rng(k * 100 + c)
    cin = k if expand else c
    oh = (h + pads[0] + pads[2] - ((kernel - 1) * dilation + 1)) // stride + 1
    ow = (w + pads[1] + pads[3] - ((kernel - 1) * dilation + 1)) // stride + 1
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, k, 1, 1)) * 0.3).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((c, 1, kernel, kernel)) * 0.3)
                                .astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b2"),
        numpy_helper.from_array((rng.standard_normal((k, c, 1, 1)) * 0.3).astype(np.float32), "w3"),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
        numpy_helper.from_array((rng.random((c, 1, 1)) + 0.5).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.random((1, c, h, w)).astype(np.float32), "plane"),
    ]
    nodes = []
    if expand:
        nodes.append(helper.make_node("Conv", ["x", "w1", "b1"], ["a"]))
        if pw == "clip_scale":
            nodes += [helper.make_node("Clip", ["a", "lo", "hi"], ["a2"]),
                      helper.make_node("Mul", ["a2", "scale"], ["b"])]
        elif pw == "plane":  # varies across the image: cannot run on a band
            nodes.append(helper.make_node("Add", ["a", "plane"], ["b"]))
        else:
            nodes.append(helper.make_node("Identity", ["a"], ["b"]))
    nodes += [
        helper.make_node("Conv", ["b" if expand else "x", "w2", "b2"], ["d"], group=c,
                         pads=list(pads), strides=[stride, stride],
                         kernel_shape=[kernel, kernel], dilations=[dilation, dilation]),
        helper.make_node(dw, ["d"], ["y" if not project else "e"]),
    ]
    shapes = {"y": [n, c, oh, ow], "b": [n, c, h, w], "z": [n, c, h, w], "e": [n, c, oh, ow]}
    if project:
        residual = (oh, ow, k) == (h, w, cin)
        nodes.append(helper.make_node("Conv", ["e", "w3"], ["p" if residual else "y"]))
        if residual:
            nodes.append(helper.make_node("Add", ["p", "x"], ["y"]))
        shapes["y"] = [n, k, oh, ow]
    nodes += list(extra)
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, cin, h, w])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _bands(model) -> list:
    _, fusion, _ = prepare(model)
    return [f for f in fuse_conv_bands(fusion).ops if f.kind == "band"]


@pytest.fixture
def small_bands(monkeypatch):
    """Every chain qualifies; bands of 4 output rows (700 floats of rows)."""
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


KINDS = {  # chain: (_chain keywords, the band op's fused types)
    "expand_dw": ({}, ["Clip", "Mul", "Conv", "HardSwish"]),
    "dw_project": ({"expand": False, "project": True}, ["HardSwish", "Conv"]),
    "expand_dw_project": ({"project": True}, ["Clip", "Mul", "Conv", "HardSwish", "Conv"]),
}


def _run_threads(model, x) -> list[np.ndarray]:
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    runs = []
    try:
        for threads in (1, 2, 3):
            set_num_threads(threads)
            gm.run(x=x)
            runs.append(gm.get_output(0).numpy().copy())
    finally:
        set_num_threads(1)
    return runs


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_chains_run_by_bands_match_onnxruntime(name, kind, small_bands):
    kw, fused = KINDS[kind]
    model = _chain(*CASES[name], **kw)
    bands = _bands(model)
    assert len(bands) == 1 and bands[0].fused_types[:len(fused)] == fused
    assert bands[0].fused_types[len(fused):] in ([], ["Add"])  # the residual, where it fits
    n, k, c, h, w = CASES[name][:5]
    x = np.random.default_rng(1).standard_normal((n, k if kw.get("expand", True) else c, h, w))
    x = x.astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    runs = _run_threads(model, x)
    tol = 1e-5 * max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(runs[0], want, rtol=0, atol=tol)
    for got in runs[1:]:  # rows split over threads: each computes its own halo rows
        np.testing.assert_array_equal(got, runs[0])


def test_the_intermediates_get_no_storage(small_bands, monkeypatch):
    model = _chain(*CASES["3x3_s2_p1_even"], project=True)
    banded = monolib.compile(model).graph_json
    monkeypatch.setattr(conv_band, "BAND_MIN_BYTES", 1 << 60)
    plain = monolib.compile(model).graph_json
    assert len(banded["nodes"]) == len(plain["nodes"]) - 2
    node = next(n for n in banded["nodes"] if "Conv" in n.get("fused", []))
    assert not {"a", "b", "d", "e"} & set(node["inputs"])
    # the 32 x 64 x 64 expanded tensor (512 KiB) and the 32 x 32 x 32 depthwise output
    # (128 KiB) are gone from the arena (the scratch of a band is a few KiB here)
    assert banded["arena_bytes"] <= plain["arena_bytes"] - 4 * 32 * 64 * 64


@pytest.mark.parametrize("case", ["returned", "read_twice", "varies_across_image",
                                  "dilated", "below_threshold"])
def test_what_does_not_chain(case, small_bands, monkeypatch):
    shape = (1, 8, 12, 37, 29, 3, 1, (1, 1, 1, 1))
    if case == "returned":
        model = _chain(*shape, outputs=("y", "b"))
    elif case == "read_twice":
        model = _chain(*shape, extra=[helper.make_node("Relu", ["b"], ["z"])], outputs=("y", "z"))
    elif case == "varies_across_image":
        model = _chain(*shape, pw="plane")
    elif case == "dilated":  # ml_dwconv2d's run-time-loop path
        model = _chain(*shape[:7], (2, 2, 2, 2), dilation=2, project=True)
    else:
        monkeypatch.setattr(conv_band, "BAND_MIN_BYTES", 4 * conv_band.L2_BYTES)
        model = _chain(*shape, project=True)
    assert _bands(model) == []
    x = np.random.default_rng(2).standard_normal((1, 8, 37, 29)).astype(np.float32)
    gm = monolib.GraphModule(monolib.compile(model)["default"](monolib.cpu()))
    gm.run(x=x)
    want = ort_run(model, {"x": x})
    for i, w in enumerate(want):
        np.testing.assert_allclose(gm.get_output(i).numpy(), w, rtol=0, atol=1e-4)


def test_a_projection_that_would_rather_expand_starts_the_next_chain(small_bands):
    """dw -> 1x1 -> dw: the 1x1 goes with the second depthwise conv when the tensor it
    would keep is the larger (here 4x: 32 channels from 8)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), nm)
             for nm, s in (("w0", (8, 1, 3, 3)), ("w1", (32, 8, 1, 1)), ("w2", (32, 1, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["d0"], group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d0", "w1"], ["e"]),
             helper.make_node("Conv", ["e", "w2"], ["y"], group=32, pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 30, 30])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 30, 30])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    bands = _bands(model)
    assert [[p.anchor.inputs[1].shape for p in b.parts] for b in bands] == [
        [(32, 8, 1, 1), (32, 1, 3, 3)]]
    x = rng.standard_normal((1, 8, 30, 30)).astype(np.float32)
    got = _run_threads(model, x)[0]
    np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=0, atol=1e-4)


def test_scratch_is_the_kernels_formula(small_bands):
    """conv_band.py reserves max over vector widths of ml_band_scratch_floats: the same
    numbers as the C function for each width, for each kind of chain."""
    bands = [_bands(_chain(*CASES[name], **KINDS[kind][0]))[0]
             for name in sorted(CASES) for kind in sorted(KINDS)]
    rows = []
    for band in bands:
        p, d, q = conv_band._parts(band)
        dd = conv_band._geometry(d)
        k = p.anchor.inputs[0].shape[1] if p else 0
        c = d.out.shape[1]
        rows.append([k, int(p is not None), c, *(dd[key] for key in ("H", "W", "OH", "OW", "PL",
                     "KH", "SH", "SW")), int(q is not None), conv_band.band_rows(band)])
    table = ", ".join(str(v) for r in rows for v in r)
    src = (
        "#include <stdint.h>\n#include <string.h>\n"
        + kernel_header("gemm.h") + kernel_header("conv.h") + kernel_header("conv_depthwise.h")
        + kernel_header("conv_band.h")
        + f"static const int64_t T[] = {{{table}}};\n"
        "static const float one = 1.0f;\n"
        "void scratch(int64_t* out, int n) { for (int i = 0; i < n; ++i) { const int64_t* t = "
        "T + 13 * i; ml_band_args b; memset(&b, 0, sizeof b); b.K = t[0]; "
        "b.a = t[1] ? &one : 0; b.C = t[2]; b.H = t[3]; b.W = t[4]; b.OH = t[5]; "
        "b.OW = t[6]; b.PL = t[7]; b.KH = (int)t[8]; b.SH = (int)t[9]; b.SW = (int)t[10]; "
        "b.q = t[11] ? &one : 0; b.rows = t[12]; out[i] = ml_band_scratch_floats(&b); } }\n"
    )
    for vw, options in ((4, ["-DML_VW=4", "-DML_NP=1"]), (8, ["-DML_VW=8", "-DML_NP=1"]),
                        (16, ["-DML_VW=16", "-DML_NP=2"])):
        lib = build_shared(src, options)
        out = (ctypes.c_int64 * len(rows))()
        lib.scratch(out, len(rows))
        assert list(out) == [conv_band.band_scratch_floats(b, vw) for b in bands], vw


@pytest.mark.parametrize("least,chains", [(100_000, False), (40_000, True)])
def test_the_threshold_is_one_images(least, chains, small_bands, monkeypatch):
    """A band chain runs image by image, so one image's tensor must reach the threshold:
    12 x 37 x 29 floats are 51.5 KB an image, 206 KB for the batch of 4. The chain runs
    the 4 images in one call, the same bits at 1, 2 (whole images a task) and 3 threads
    (each image split in rows)."""
    monkeypatch.setattr(conv_band, "BAND_MIN_BYTES", least)
    model = _chain(4, 8, 12, 37, 29, 3, 1, (1, 1, 1, 1), project=True)
    assert bool(_bands(model)) == chains
    if chains:  # one call over the 4 images (whole images a task on 2 and 3 threads)
        source, _, _ = lower(model, None, None)
        assert source.count("ml_conv_band(&ba_") == 1 and "ba_.nimg = 4;" in source
    x = np.random.default_rng(3).standard_normal((4, 8, 37, 29)).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    runs = _run_threads(model, x)
    tol = 1e-5 * max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(runs[0], want, rtol=0, atol=tol)
    for got in runs[1:]:
        np.testing.assert_array_equal(got, runs[0])
