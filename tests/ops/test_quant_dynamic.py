"""Dynamically quantized graphs (as ``onnxruntime.quantization.quantize_dynamic`` writes
them) through the whole compiler: ``DynamicQuantizeLinear``'s vectorised, split kernel
(``quant/dql.h``) on sizes off the 16-lane vectors, NaN and infinities, 1 and 2 threads
bit-identical; equal to ONNX Runtime and to the NumPy reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from harness import run_threads

from monolib.compiler.ops.quant.dynamic_quantize import DynamicQuantizeLinear
from monolib.compiler.testing import make_node_model, ort_run

R = np.random.default_rng(21)


def _dql_ref(x: np.ndarray) -> list[np.ndarray]:
    return DynamicQuantizeLinear().reference(None, [x])


def test_dynamic_quantize_split_equals_ort_and_reference():
    """Sizes below, at and past the vector width and the split's blocks (600011 floats:
    past the pool's wake-up work, so split over 2 threads, with an odd tail): y, scale
    and zero point equal ORT's and the reference's, and the same at 1 and 2 threads."""
    for n in (5, 16, 47, 4099, 600011):
        x = (R.standard_normal(n) * 3 + 0.7).astype(np.float32)
        model = make_node_model("DynamicQuantizeLinear", {"x": x}, opset=11, outputs=3)
        one, two = run_threads(model, {"x": x})
        for a, b, c, d in zip(one, two, ort_run(model, {"x": x}), _dql_ref(x)):
            np.testing.assert_array_equal(a, b, err_msg=f"n={n}: 1 vs 2 threads")
            np.testing.assert_array_equal(a, c, err_msg=f"n={n}: vs ORT")
            np.testing.assert_array_equal(a, d, err_msg=f"n={n}: vs reference")


def test_dynamic_quantize_nan_and_all_positive():
    """NaN is skipped by min/max and quantizes to 0 (in the vector body and in the
    tail); an all-positive input has zero point 0 (min is 0) and its max maps to 255."""
    x = (R.standard_normal(70) * 2).astype(np.float32)
    x[[3, 40, 69]] = np.nan
    pos = R.uniform(0.5, 4.0, 333).astype(np.float32)
    for v in (x, pos):
        model = make_node_model("DynamicQuantizeLinear", {"x": v}, opset=11, outputs=3)
        one, two = run_threads(model, {"x": v})
        want = _dql_ref(v)
        for a, b, w in zip(one, two, want):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, w)
    assert one[2] == 0 and one[0].max() == 255


# -- few-row products with byte-packed weights (q8gemv.h) ---------------------------------


def _exact(a, b, za, zb):
    return (a.astype(np.int64) - np.int64(za)) @ (b.astype(np.int64) - np.asarray(zb, np.int64))


def _q8_model(m, k, n, wtype, per_col):
    a = R.integers(0, 256, (m, k)).astype(np.uint8)
    info = np.iinfo(wtype)
    b = R.integers(info.min, info.max + 1, (k, n)).astype(wtype)
    # zero points at the ends of their range: |a - za| and |b - zb| reach 255
    za = np.array(255, np.uint8)
    zb = (R.integers(info.min, info.max + 1, n) if per_col else np.array(info.min)).astype(wtype)
    ins = {"a": a, "b": b, "za": za, "zb": zb}
    model = make_node_model("MatMulInteger", ins, opset=13, constant_inputs=["b", "zb"])
    return model, {"a": a, "za": za}, _exact(a, b, za, zb).astype(np.int32)


Q8_CASES = [
    (1, 1, 1, np.uint8, False),
    (1, 37, 17, np.uint8, True),
    (2, 5, 33, np.int8, True),
    (3, 1030, 19, np.uint8, False),
    (4, 64, 16, np.int8, False),
]


def test_q8_products_exact_and_chosen():
    """1 to 4 rows of a run-time uint8 A times constant uint8/int8 weights (K off the
    quads of 4, N off the 16-column panels, zero points per tensor and per column): the
    exact int32 sums, through the byte-packed kernel where the CPU has AVX-512 VNNI, or
    AVX2 and one row (the generated C calls it), else through qgemm.h."""
    import monolib
    from monolib.compiler.ops.quant._q8 import use_q8
    from monolib.compiler.testing import run_model

    for m, k, n, wt, per_col in Q8_CASES:
        model, feeds, want = _q8_model(m, k, n, wt, per_col)
        src = monolib.compile(model).imported_modules[0].get_source()
        assert ("ml_q8gemv_par(&q8_)" in src) == use_q8(m), (m, k, n)
        np.testing.assert_array_equal(run_model(model, feeds)[0], want, err_msg=str((m, k, n, wt)))


def test_q8_portable_and_avx2_kernels_exact():
    """The int16 pmaddwd form (no AVX-512 VNNI: taken where the compiling CPU has it and
    the target not) and the portable one: the same sums."""
    from monolib.compiler.testing import run_model

    for m, k, n, wt, per_col in Q8_CASES[1:4]:
        model, feeds, want = _q8_model(m, k, n, wt, per_col)
        for target in ("c -mattr=-avx512f", "c -mattr=-avx2,-avx512f"):
            np.testing.assert_array_equal(
                run_model(model, feeds, target=target)[0], want, err_msg=target
            )


def test_q8_split_equal():
    """A batch-1 product large enough to be split over 2 threads by column chunks: the
    exact sums at 1 and 2 threads."""
    model, feeds, want = _q8_model(1, 1024, 4100, np.uint8, True)
    one, two = run_threads(model, feeds)
    np.testing.assert_array_equal(one[0], want)
    np.testing.assert_array_equal(two[0], want)


# -- whole quantize_dynamic graphs ---------------------------------------------------------


def _float_model(tmp_path):
    """Float Conv (odd sizes, padding, stride, groups) -> Sigmoid*x -> Conv 1x1 -> MatMul
    -> LSTM (T 12, batch 1), as ``quantize_dynamic`` then rewrites; weights of their own
    seed (see test_quantize_dynamic_graph_matches_ort)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1128)
    f = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
    inits = [
        numpy_helper.from_array(v, k)
        for k, v in {
            "w1": f(10, 3, 3, 3),
            "b1": f(10),
            "w2": f(12, 5, 3, 3),
            "w3": f(7, 12, 1, 1),
            "wm": f(7 * 9 * 11, 40),
            "wl": f(1, 64, 40),
            "rl": f(1, 64, 16),
            "bl": f(1, 128),
            "shape": np.array([1, -1], np.int64),
            "shape3": np.array([1, 1, 40], np.int64),
        }.items()
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 0, 1, 2], strides=[2, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s1"]),
        helper.make_node("Mul", ["c1", "s1"], ["m1"]),
        helper.make_node("Conv", ["m1", "w2"], ["c2"], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c2", "w3"], ["c3"]),
        helper.make_node("Reshape", ["c3", "shape"], ["r"]),
        helper.make_node("MatMul", ["r", "wm"], ["mm"]),
        helper.make_node("Reshape", ["mm", "shape3"], ["seq"]),
        helper.make_node("Concat", ["seq"] * 12, ["seq12"], axis=0),
        helper.make_node("LSTM", ["seq12", "wl", "rl", "bl"], ["y", "yh"], hidden_size=16),
    ]
    graph = helper.make_graph(
        nodes,
        "qd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 17, 11])],
        [
            helper.make_tensor_value_info("mm", TensorProto.FLOAT, [1, 40]),
            helper.make_tensor_value_info("yh", TensorProto.FLOAT, [1, 1, 16]),
        ],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path / "f.onnx"
    onnx.save(model, path)
    return path


def test_quantize_dynamic_graph_matches_ort(tmp_path):
    """A float model quantized by ``onnxruntime.quantization.quantize_dynamic`` (uint8
    and int8 weights: DynamicQuantizeLinear, ConvInteger with padding, stride and groups,
    MatMulInteger, DynamicQuantizeLSTM): ORT's outputs within float rounding (the
    integer sums are exact; the float chains around them round in another order), and
    1 and 2 threads bit-identical. Input and weights have their own seeds, not the
    module's stream (which the tests run before this one move): ORT's u8s8 kernel for
    int8 weights sums pairs with vpmaddubsw, which saturates at 2^15, so on some inputs
    its MatMulInteger is not the exact sum (0.054 off in 1 of the 40 outputs on one
    draw) and the comparison passed or failed by the order the tests ran in."""
    pytest.importorskip("onnxruntime.quantization")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = _float_model(tmp_path)
    x = np.random.default_rng(20261128).uniform(-1, 1, (1, 3, 17, 11)).astype(np.float32)
    for wt in (QuantType.QUInt8, QuantType.QInt8):
        dst = tmp_path / f"q{wt.name}.onnx"
        quantize_dynamic(src, dst, weight_type=wt)
        model = onnx.load(dst)
        ops = {n.op_type for n in model.graph.node}
        assert {
            "DynamicQuantizeLinear",
            "ConvInteger",
            "MatMulInteger",
            "DynamicQuantizeLSTM",
        } <= ops, ops
        one, two = run_threads(model, {"x": x})
        want = ort_run(model, {"x": x})
        for a, b, w in zip(one, two, want):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, w, rtol=0, atol=2e-5 * max(1.0, float(np.abs(w).max())))


# -- convolutions with byte-packed weights (q8gemv.h's ml_q8conv) --------------------------


def _conv_exact(x, w, xz, wz, strides, pads, dil, group):
    """ConvInteger's int32 sums by NumPy (NCHW, 2-D)."""
    xi = np.pad(
        x.astype(np.int64) - int(xz), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3]))
    )
    wi = w.astype(np.int64) - np.asarray(wz, np.int64).reshape(-1, 1, 1, 1)
    n, _, h, wd = xi.shape
    m, cg, kh, kw = wi.shape
    oh = (h - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dil[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for g in range(group):
        xs = xi[:, g * cg : (g + 1) * cg]
        for ky in range(kh):
            for kx in range(kw):
                patch = xs[
                    :,
                    :,
                    ky * dil[0] : ky * dil[0] + strides[0] * (oh - 1) + 1 : strides[0],
                    kx * dil[1] : kx * dil[1] + strides[1] * (ow - 1) + 1 : strides[1],
                ]
                y[:, g * mg : (g + 1) * mg] += np.einsum(
                    "nchw,mc->nmhw", patch, wi[g * mg : (g + 1) * mg, :, ky, kx]
                )
    return y.astype(np.int32)


CONV_CASES = [  # x shape, w shape, strides, pads (t, l, b, r), dilations, group, weight type, per-channel
    ((1, 3, 9, 13), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.uint8, False),
    ((2, 4, 11, 7), (6, 2, 3, 2), (2, 1), (0, 1, 2, 0), (1, 2), 2, np.int8, True),
    ((1, 7, 5, 21), (13, 7, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, np.uint8, True),
    ((1, 5, 17, 6), (7, 5, 2, 3), (3, 2), (1, 0, 1, 1), (2, 1), 1, np.int8, False),
]


def _conv_model(xs, ws, strides, pads, dil, group, wt, per_col):
    x = R.integers(0, 256, xs).astype(np.uint8)
    info = np.iinfo(wt)
    w = R.integers(info.min, info.max + 1, ws).astype(wt)
    xz = np.array(255, np.uint8)  # |x - xz| reaches 255; padding must be xz
    wz = (R.integers(info.min, info.max + 1, ws[0]) if per_col else np.array(info.min)).astype(wt)
    model = make_node_model(
        "ConvInteger",
        {"x": x, "w": w, "xz": xz, "wz": wz},
        {"strides": list(strides), "pads": list(pads), "dilations": list(dil), "group": group},
        opset=13,
        constant_inputs=["w", "wz"],
    )
    return model, {"x": x, "xz": xz}, _conv_exact(x, w, xz, wz, strides, pads, dil, group)


def test_q8_conv_exact_chosen_and_threads():
    """uint8 images against constant uint8/int8 weights (odd sizes, K off the quads,
    padding filled with the zero point, stride, dilation, groups, per-channel zero
    points): the exact sums, through ml_q8conv where the CPU has AVX-512 VNNI, at 1 and
    2 threads; the int16-widened (AVX2) and portable builds give the same."""
    import monolib
    from monolib.compiler.ops.quant._q8 import use_q8conv
    from monolib.compiler.testing import run_model

    for case in CONV_CASES:
        model, feeds, want = _conv_model(*case)
        src = monolib.compile(model).imported_modules[0].get_source()
        assert ("ml_q8conv_par(&qc_)" in src) == use_q8conv(1), case
        for got in run_threads(model, feeds):
            np.testing.assert_array_equal(got[0], want, err_msg=str(case))
    for case in CONV_CASES[:2]:
        model, feeds, want = _conv_model(*case)
        for target in ("c -mattr=-avx512f", "c -mattr=-avx2,-avx512f"):
            np.testing.assert_array_equal(
                run_model(model, feeds, target=target)[0], want, err_msg=target
            )


def test_q8_conv_split_equal():
    """A convolution large enough to be split over 2 threads by column chunks (each
    packs its own B blocks and column sums): the exact sums at 1 and 2 threads."""
    model, feeds, want = _conv_model(
        (1, 32, 40, 40), (64, 32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, np.uint8, True
    )
    one, two = run_threads(model, feeds)
    np.testing.assert_array_equal(one[0], want)
    np.testing.assert_array_equal(two[0], want)


def test_depthwise_float_sums_exact():
    """Depthwise ConvInteger (qgemm.h's ml_qdwconv): sums taken in float, exact while
    a channel's taps keep them below 2^24 (here |x - xz| and |w - wz| reach 255: 9 and
    25 taps, stride 1 over the plane as one vector, stride 2, dilation, uneven padding),
    and the int32 form past ML_QDW_FTAPS taps (17x17 = 289); int8 and uint8 images; 1
    and 2 threads."""
    cases = [
        ((1, 16, 14, 14), 5, (1, 1), (2, 2, 2, 2), (1, 1), np.uint8),
        ((1, 8, 13, 17), 3, (2, 2), (1, 0, 1, 2), (1, 1), np.int8),
        ((2, 5, 9, 11), 3, (1, 2), (2, 1, 0, 2), (2, 1), np.uint8),
        ((1, 3, 20, 19), 17, (1, 1), (8, 8, 8, 8), (1, 1), np.int8),
    ]
    for xs, k, strides, pads, dil, xt in cases:
        c = xs[1]
        xi, wi = np.iinfo(xt), np.iinfo(np.int8)
        x = R.integers(xi.min, xi.max + 1, xs).astype(xt)
        w = R.integers(wi.min, wi.max + 1, (c, 1, k, k)).astype(np.int8)
        xz = np.array(xi.max, xt)
        wz = np.full(c, wi.min, np.int8)
        attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dil), "group": c}
        model = make_node_model(
            "ConvInteger",
            {"x": x, "w": w, "xz": xz, "wz": wz},
            attrs,
            opset=13,
            constant_inputs=["w", "wz"],
        )
        want = _conv_exact(x, w, xz, wz, strides, pads, dil, c)
        for got in run_threads(model, {"x": x, "xz": xz}):
            np.testing.assert_array_equal(got[0], want, err_msg=str((xs, k, strides)))
