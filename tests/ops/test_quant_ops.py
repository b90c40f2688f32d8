"""The integer-kernel quantized ops (QLinearConv, ConvInteger, QLinearMatMul,
MatMulInteger, DynamicQuantizeLinear) through the whole compiler, on shapes beyond
ONNX's node cases (those run in ``tests/test_onnx_backend.py``): sizes that are not
multiples of the 16-column / 6-row tiles or of the K pairs, zero points at the ends of
their range, per-channel scales and zero points, constant and run-time weights, the
portable (non-AVX2) kernel, the threaded split, and the refusals. Each group of cases
is ONE model of many nodes (one C compile), compared node by node.

ONNX Runtime is the reference only where its kernels are exact: for uint8 x int8 its
AVX2 (non-VNNI) GEMM adds int16 pair sums with saturation, so those cases compare with
exact NumPy sums (MatMulInteger) or ONNX's reference evaluator (QLinearConv); ORT has
no QLinearConv whose output type differs from x's.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from harness import add_inputs
from onnx import helper
from onnx.reference import ReferenceEvaluator

import monolib
from monolib.compiler.testing import make_node_model, ort_run, run_model
from monolib.errors import ShapeError, UnsupportedOpError

R = np.random.default_rng(11)


def q(dtype, *shape):
    info = np.iinfo(dtype)
    return R.integers(info.min, info.max + 1, shape).astype(dtype)


class Case:
    """One node: op, inputs (None: omitted), attrs, the inputs that are constants."""

    def __init__(self, op, ins, attrs=None, consts=(), outputs=1, ort=True):
        self.op, self.ins, self.attrs, self.consts = op, ins, attrs or {}, set(consts)
        self.outputs, self.ort = outputs, ort


def build(cases: list[Case], opset: int = 13):
    """(model, feeds, output names per case): every case a node with its own inputs."""
    nodes, inputs, inits, feeds, outs = [], [], [], {}, []
    for i, c in enumerate(cases):
        names = add_inputs({f"c{i}_{k}": v for k, v in c.ins.items()},
                           {f"c{i}_{k}" for k in c.consts}, inputs, inits, feeds)
        outs.append([f"c{i}_y{j}" for j in range(c.outputs)])
        nodes.append(helper.make_node(c.op, names, outs[-1], **c.attrs))
    graph = helper.make_graph(nodes, "quant_cases", inputs, [], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info}
    model.graph.output.extend(typed[n] for o in outs for n in o)
    return model, feeds, outs


def run_cases(cases: list[Case], opset: int = 13, **compile_kwargs):
    """monolib's outputs per case, and ORT's per case (None where ``case.ort`` is False)."""
    model, feeds, outs = build(cases, opset)
    flat = run_model(model, feeds, **compile_kwargs)
    got, k = [], 0
    for o in outs:
        got.append(flat[k : k + len(o)])
        k += len(o)
    sub = [c for c in cases if c.ort]
    want = iter(_per_case(*build(sub, opset)) if sub else [])
    return got, [next(want) if c.ort else None for c in cases]


def _per_case(model, feeds, outs):
    flat, res, k = ort_run(model, feeds), [], 0
    for o in outs:
        res.append(flat[k : k + len(o)])
        k += len(o)
    return res


# -- MatMulInteger / QLinearMatMul ------------------------------------------------------

MATMUL_SHAPES = [((1, 1), (1, 1)), ((7, 33), (33, 17)), ((6, 32), (32, 16)), ((13, 2), (2, 40)),
                 ((2, 1, 5, 19), (3, 19, 21)), ((37,), (2, 37, 19)), ((3, 37), (37,))]
TYPES = [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8), (np.int8, np.uint8)]


def _exact(a, b, za, zb):
    za = np.asarray(za, np.int64)
    return np.matmul(a.astype(np.int64) - (za[:, None] if za.ndim else za), b.astype(np.int64) - np.asarray(zb, np.int64))


def test_matmul_integer_exact():
    cases, want = [], []
    for ash, bsh in MATMUL_SHAPES:
        for ta, tb in TYPES:
            a, b = q(ta, *ash), q(tb, *bsh)
            # zero points at the ends of their range: |a - za| and |b - zb| reach 255
            za, zb = np.array(np.iinfo(ta).max, ta), np.array(np.iinfo(tb).min, tb)
            for consts in ((), ("b", "zb")):
                cases.append(Case("MatMulInteger", {"a": a, "b": b, "za": za, "zb": zb}, consts=consts,
                                  ort=(ta, tb) != (np.uint8, np.int8)))  # ORT's u8 x s8 saturates
                want.append(_exact(a, b, za, zb))
    a, b = q(np.uint8, 9, 35), q(np.uint8, 35, 18)
    za, zb = q(np.uint8, 9), q(np.uint8, 18)  # per row of A, per column of B
    for consts in ((), ("b", "zb"), ("a", "za")):
        cases.append(Case("MatMulInteger", {"a": a, "b": b, "za": za, "zb": zb}, consts=consts, ort=False))
        want.append(_exact(a, b, za, zb))
    got, ort = run_cases(cases)
    for c, g, o, w in zip(cases, got, ort, want):
        assert g[0].dtype == np.int32
        np.testing.assert_array_equal(g[0], w, err_msg=f"{c.ins['a'].shape} x {c.ins['b'].shape}")
        if o is not None:
            np.testing.assert_array_equal(g[0], o[0])


def test_qlinear_matmul_matches_ort():
    cases = []
    for ash, bsh in MATMUL_SHAPES[1:]:
        for t in (np.uint8, np.int8):
            for per_column in (False, True):
                n = bsh[-1] if len(bsh) > 1 else 1
                per_column = per_column and len(bsh) == 2  # ORT: [1, N] for a 2-D B
                lo = np.iinfo(t).min
                ins = {
                    "a": q(t, *ash), "as": np.array(0.03, np.float32), "az": np.array(lo, t),
                    "b": q(t, *bsh),
                    "bs": (R.uniform(0.001, 0.01, (1, n)) if per_column else np.array(0.004)).astype(np.float32),
                    "bz": np.full((1, n) if per_column else (), np.iinfo(t).max if t == np.uint8 else 0, t),
                    "ys": np.array(0.9, np.float32), "yz": np.array(lo + 128, t),
                }
                for consts in ((), ("b", "bs", "bz")):
                    cases.append(Case("QLinearMatMul", ins, consts=consts))
    got, want = run_cases(cases)
    for c, g, w in zip(cases, got, want):
        assert g[0].dtype == c.ins["yz"].dtype
        np.testing.assert_array_equal(g[0], w[0], err_msg=f"{c.ins['a'].shape} x {c.ins['b'].shape}")


def _threaded_portable_model():
    a, b = q(np.uint8, 160, 301), q(np.int8, 301, 300)
    return make_node_model("MatMulInteger", {"a": a, "b": b}, opset=13), {"a": a, "b": b}, _exact(a, b, 0, 0)


def test_threaded_split_equal():
    """GEMMs and a depthwise convolution large enough to be split over 2 threads: equal
    to the exact sums / to ORT."""
    model, feeds, want = _threaded_portable_model()
    convs = [((1, 32, 40, 40), (64, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
             ((1, 64, 64, 64), (64, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1]})]
    cases = [Case("QLinearConv", _qconv_inputs(xs, ws, np.uint8, np.uint8, np.uint8, True, True),
                  attrs, consts=("w", "ws", "wz", "b")) for xs, ws, attrs in convs]
    monolib.set_num_threads(2)
    try:
        np.testing.assert_array_equal(run_model(model, feeds)[0], want)
        got, ort = run_cases(cases)
    finally:  # back to the default: the CPUs this process may use
        monolib.set_num_threads(len(os.sched_getaffinity(0)))
    for g, w in zip(got, ort):
        np.testing.assert_array_equal(g[0], w[0])


# -- ConvInteger / QLinearConv -------------------------------------------------------------

CONVS = [  # x shape, w shape, attrs
    ((1, 3, 11, 13), (5, 3, 3, 3), {}),
    ((2, 8, 10, 9), (17, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 7, 9, 9), (13, 7, 1, 1), {}),
    ((1, 6, 12, 12), (8, 3, 3, 3), {"group": 2, "pads": [1, 0, 1, 2], "dilations": [2, 1]}),
    ((2, 12, 9, 14), (12, 1, 3, 3), {"group": 12, "pads": [1, 1, 1, 1]}),
    ((1, 9, 15, 15), (9, 1, 5, 5), {"group": 9, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 4, 31), (6, 4, 5), {"pads": [2, 2]}),
    # a large depthwise window (289 taps)
    ((1, 3, 19, 18), (3, 1, 17, 17), {"group": 3, "pads": [8, 8, 8, 8]}),
]


def _conv_integer_cases():
    cases = []
    for xs, ws, attrs in CONVS:
        x, w = q(np.uint8, *xs), q(np.uint8, *ws)
        ins = {"x": x, "w": w, "xz": np.array(255, np.uint8), "wz": np.array(3, np.uint8)}
        for consts in ((), ("w", "wz")):
            cases.append(Case("ConvInteger", ins, attrs, consts=consts))
    return cases


def _qconv_inputs(xs, ws, xt, wt, yt, per_channel, bias):
    m = ws[0]
    return {
        "x": q(xt, *xs),
        "xs": np.array(0.02, np.float32),
        "xz": np.array(np.iinfo(xt).max if xt == np.uint8 else -128, xt),
        "w": q(wt, *ws),
        "ws": (R.uniform(0.002, 0.02, m) if per_channel else np.array(0.01)).astype(np.float32),
        "wz": (q(wt, m) if per_channel and wt == np.uint8 else np.zeros(m, wt) if per_channel
               else np.array(7 if wt == np.uint8 else 0, wt)),
        "ys": np.array(0.37, np.float32),
        "yz": np.array(100 if yt == np.uint8 else -3, yt),
        "b": R.integers(-3000, 3000, m).astype(np.int32) if bias else None,
    }


def _qconv_cases():
    """uint8 x uint8 and int8 x int8 (exact in ORT) with constant weights, per tensor and
    per channel; uint8 x int8 / int8 x int8 with run-time weights (checked against ONNX's
    reference evaluator; ORT only for int8 x int8)."""
    cases = []
    for xs, ws, attrs in CONVS:
        for per_channel in (False, True):
            t = np.int8 if per_channel else np.uint8
            ins = _qconv_inputs(xs, ws, t, t, t, per_channel, bias=True)
            cases.append(Case("QLinearConv", ins, attrs, consts=("w", "ws", "wz", "b")))
        for xt in (np.uint8, np.int8):
            # (the reference evaluator expands per-channel scales for 2-D convolutions only)
            ins = _qconv_inputs(xs, ws, xt, np.int8, np.uint8, per_channel=len(xs) == 4, bias=False)
            cases.append(Case("QLinearConv", ins, attrs, ort=False))
    return cases


def test_conv_integer_and_qlinear_conv():
    cases = _conv_integer_cases() + _qconv_cases()
    got, want = run_cases(cases)
    ref_cases = [c for c in cases if not c.ort]
    ref = iter(_per_case_ref(ref_cases))
    for c, g, w in zip(cases, got, want):
        what = f"{c.op} x {c.ins['x'].dtype}{list(c.ins['x'].shape)} w {c.ins['w'].dtype}{list(c.ins['w'].shape)} {c.attrs}"
        if w is not None:
            assert g[0].dtype == w[0].dtype
            np.testing.assert_array_equal(g[0], w[0], err_msg=what)
        else:
            # ONNX's reference requantizes in float64: a tie may round the other way
            r = next(ref)[0]
            diff = np.abs(g[0].astype(np.int32) - r.astype(np.int32))
            assert diff.max() <= 1 and (diff == 0).mean() > 0.99, what


def _per_case_ref(cases):
    model, feeds, outs = build(cases)
    flat = ReferenceEvaluator(model).run(None, feeds)
    res, k = [], 0
    for o in outs:
        res.append(flat[k : k + len(o)])
        k += len(o)
    return res


def test_portable_kernels_equal():
    """The portable multiply-add (built without AVX2): the same exact results."""
    cases = _conv_integer_cases()[:6] + [c for c in _qconv_cases() if c.ort][:6]
    model, feeds, want = _threaded_portable_model()
    got, ort = run_cases(cases, target="c -mattr=-avx2,-avx512f")
    for g, w in zip(got, ort):
        np.testing.assert_array_equal(g[0], w[0])
    np.testing.assert_array_equal(run_model(model, feeds, target="c -mattr=-avx2,-avx512f")[0], want)


# -- DynamicQuantizeLinear ---------------------------------------------------------------

def test_dynamic_quantize_linear_matches_ort():
    specs = [((1,), -1, 1), ((3, 17), -2.5, 7.1), ((5, 33), 0.2, 9.0), ((4, 7, 3), -6.0, -0.5),
             ((2, 1000), -100, 3)]
    cases = [Case("DynamicQuantizeLinear", {"x": R.uniform(lo, hi, s).astype(np.float32)}, outputs=3)
             for s, lo, hi in specs]
    got, want = run_cases(cases, opset=11)
    for g, w in zip(got, want):
        assert [x.dtype for x in g] == [np.uint8, np.float32, np.uint8]
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)


def test_dynamic_quantize_linear_zeros():
    """max == min: y and the zero point are 0; the scale is the reference's 1/255 (ORT: 1)."""
    x = np.zeros((3, 5), np.float32)
    y, s, z = run_model(make_node_model("DynamicQuantizeLinear", {"x": x}, opset=11, outputs=3), {"x": x})
    assert not y.any() and z == 0 and s == np.float32(1) / np.float32(255)


# -- refusals ---------------------------------------------------------------------------

def test_refusals():
    a, b = q(np.uint8, 4, 6), q(np.uint8, 6, 5)
    f = np.float32
    with pytest.raises(UnsupportedOpError, match="a_scale has 4 values"):
        run_model(make_node_model("QLinearMatMul", {
            "a": a, "as": np.ones(4, f), "az": np.array(0, np.uint8), "b": b, "bs": np.array(1, f),
            "bz": np.array(0, np.uint8), "ys": np.array(1, f), "yz": np.array(0, np.uint8)},
            opset=13), {"a": a, "b": b})
    with pytest.raises(ShapeError, match="one per column of B"):
        run_model(make_node_model("MatMulInteger", {"a": a, "b": b, "za": np.array(0, np.uint8),
                                                    "zb": np.zeros(3, np.uint8)}, opset=13),
                  {"a": a, "b": b})
