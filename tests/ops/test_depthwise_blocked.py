"""Channel-blocked depthwise convolution (``ml_dwcb_conv2d`` of ops/nn/conv_depthwise.h,
``conv_dw_blocked.py``).

The kernel matches the NumPy reference on odd shapes: channels not a multiple of a
vector (1, 7, 17, 40), 3x3 / 5x5 / 7x7 / 1x5 windows, strides 1-3 each way, symmetric,
asymmetric and large pads, dilation, maps narrower than a vector (one flat transpose over
several rows) and of fewer pixels than a vector (the scalar transposes), rows wider than
a band (several bands, halo rows), with and without bias, with the harness's
non-idempotent epilogue; also at 4, 8 and 16 floats per vector. A compiled model gives
the same bits on 1 and 2 threads and matches ONNX Runtime; the scratch conv.py reserves is
the C formula; the weight packing is [ceil(C/16)][KH*KW][16]; and the rule picks, on
synthetic signatures, the kernel that measures faster.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import check_forced, kernel_formula, make_node, run_c, run_threads
from onnx import helper

from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.build import lower
from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn import conv, conv_dw_along_w, conv_dw_blocked
from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
from monolib.compiler.ops.nn.conv_cost import host_vector_width
from monolib.compiler.testing import build_shared, ort_run
from monolib.compiler.tuning.select import Selection, selecting

RNG = np.random.default_rng(5)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


# name: (x shape, kernel (KH, KW), attrs (group added))
CASES = {
    "3x3_s1_p1_c17": ((1, 17, 13, 29), (3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_s2_p1_c40_batch2": ((2, 40, 15, 22), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "5x5_s1_p2_7x7_map": ((1, 33, 7, 7), (5, 5), {"pads": [2, 2, 2, 2]}),
    "5x5_s2_p2_c7": ((1, 7, 14, 14), (5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    "7x7_p3_c16": ((1, 16, 11, 19), (7, 7), {"pads": [3, 3, 3, 3]}),
    "3x3_dilated_c20": ((1, 20, 12, 17), (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "3x3_s3_asym_c1": ((1, 1, 16, 23), (3, 3), {"pads": [0, 1, 2, 0], "strides": [3, 3]}),
    "3x3_s21_c24": ((1, 24, 10, 31), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    "1x5_c18": ((1, 18, 3, 40), (1, 5), {"pads": [0, 2, 0, 2]}),
    "5x5_big_pads_3x3_map": ((1, 9, 3, 3), (5, 5), {"pads": [4, 4, 4, 4]}),
    "3x3_tiny_2x2_map": ((1, 16, 2, 2), (3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_wide_rows_many_bands": ((1, 19, 9, 700), (3, 3), {"pads": [1, 1, 1, 1]}),
}


def _node(name: str, bias: bool = True):
    xs, (kh, kw), attrs = CASES[name]
    c = xs[1]
    attrs = {**attrs, "group": c}
    ins = [r(*xs), r(c, 1, kh, kw, scale=0.3), r(c) if bias else None]
    node = make_node("Conv", ins, attrs, const=[1, 2] if bias else [1], opset=11)
    return (ins if bias else ins[:2]), node


def _run_blocked(node, ins, epilogue="affine", options=()):
    with selecting(Selection(forced={node.name: "depthwise_cb"})):
        return run_c(node, ins, epilogue, options)[0]


def _check(ins, node, options=(), epilogue=True) -> None:
    check_forced(node, ins, "depthwise_cb", "ml_dwcb_conv2d(", options, epilogue)


@pytest.mark.parametrize("name", sorted(CASES))
def test_blocked_matches_reference(name: str) -> None:
    ins, node = _node(name)
    _check(ins, node)


def test_blocked_without_bias_or_epilogue() -> None:
    for name in ("3x3_s1_p1_c17", "5x5_s1_p2_7x7_map"):
        ins, node = _node(name, bias=False)
        _check(ins, node, epilogue=False)


@pytest.mark.parametrize("vw", [4, 8, 16])
@pytest.mark.parametrize("name", ["3x3_s2_p1_c40_batch2", "5x5_s1_p2_7x7_map", "3x3_s3_asym_c1"])
def test_blocked_vector_widths(name: str, vw: int) -> None:
    ins, node = _node(name)
    _check(ins, node, (f"-DML_VW={vw}", f"-DML_NP={2 if vw == 16 else 1}"))


def test_packed_weights_layout() -> None:
    w = r(20, 1, 3, 3)
    p = conv_dw_blocked.pack_dw_weights(w)
    assert p.shape == (2, 9, 16)
    assert p[1, 4, 3] == w[19, 0, 1, 1] and p[0, 8, 0] == w[0, 0, 2, 2]
    assert not p[1, :, 4:].any()  # channels past C are zero


def test_scratch_is_the_kernels_formula() -> None:
    dims = [as_2d(list(CASES[n][0][2:]), conv_geometry(_node(n)[1])) for n in sorted(CASES)]
    keys = ("W", "OH", "OW", "KH", "KW", "SH", "SW", "PL", "DH", "DW")
    out = kernel_formula(
        ("gemm.h", "conv.h", "conv_depthwise.h"), [[d[k] for k in keys] for d in dims],
        "ml_dwcb_scratch_floats(t[0], t[1], t[2], (int)t[3], (int)t[4], (int)t[5], (int)t[6], "
        "t[7], (int)t[8], (int)t[9])")
    assert out == [conv_dw_blocked.dwcb_scratch_floats(d) for d in dims]


def _model():
    """dw 5x5 on a 7x7 map (40 channels: 3 blocks, the last short) + HardSwish; dw 3x3
    stride 2 on 24 channels (few blocks: split in bands of rows) + Relu."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=40, pads=[2, 2, 2, 2]),
        helper.make_node("HardSwish", ["c1"], ["y1"]),
        helper.make_node("Conv", ["s", "w2"], ["c2"], group=24, pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["y2"]),
    ]
    weights = {"w1": r(40, 1, 5, 5, scale=0.3), "b1": r(40), "w2": r(24, 1, 3, 3, scale=0.3)}
    return make_model(
        nodes,
        [("x", F32, [1, 40, 7, 7]), ("s", F32, [1, 24, 150, 131])],
        [("y1", F32, [1, 40, 7, 7]), ("y2", F32, [1, 24, 75, 66])],
        weights, opset=14,
    )


def test_compiled_blocked_on_one_and_two_threads(monkeypatch) -> None:
    model = _model()
    forced = {n.name or f"Conv_{i}": "depthwise_cb" for i, n in enumerate(model.graph.node)}
    monkeypatch.setattr(conv, "dw_costs", lambda d, c, fast, vw=16: {
        "depthwise": 2.0, "depthwise_cb": 1.0})
    source, _, _ = lower(model, None, None)
    assert source.count("ml_dwcb_conv2d(") == 3, forced  # the definition and two calls
    feeds = {"x": r(1, 40, 7, 7), "s": r(1, 24, 150, 131)}
    want = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    for a, b in zip(one, two):  # units own whole rows of a block: the same sums
        np.testing.assert_array_equal(a, b)


def _dw_node(xs, k, pads, strides):
    ins = [r(*xs), r(xs[1], 1, k, k), r(xs[1])]
    return make_node("Conv", ins, {"group": xs[1], "pads": pads, "strides": strides},
                     const=[1, 2], opset=11)


@pytest.mark.parametrize(
    "xs, k, s, want",
    [  # measured on Zen 4 (1 thread, us): W-vectorised vs channel-blocked
        ((1, 512, 7, 7), 5, 1, "depthwise_cb"),  # 75 vs 27: 7 of 16 lanes along W
        ((1, 256, 14, 14), 5, 2, "depthwise_cb"),  # 59 vs 18: stride-2 shuffles
        ((1, 96, 20, 20), 7, 1, "depthwise_cb"),  # 353 vs 60: run-time-loop path
        ((1, 16, 112, 112), 3, 1, "depthwise"),  # 58 vs 80: full vectors, no transposes
        ((1, 64, 24, 160), 3, 1, "depthwise"),  # 69 vs 123
        ((1, 8, 24, 96), 3, 1, "depthwise"),  # 4.7 vs 9.5: half a channel block
        # 4.9 MB, past L2: 166-210 vs 307 with the rows read in place (593 vs 397 when
        # the W-vectorised kernel padded every row into scratch first)
        ((1, 48, 160, 160), 3, 2, "depthwise"),
    ],
)
def test_rule_picks_the_measured_faster_kernel(xs, k, s, want) -> None:
    node = _dw_node(xs, k, [k // 2] * 4, [s, s])
    d = as_2d(list(xs[2:]), conv_geometry(node))
    costs = conv_dw_blocked.dw_costs(d, xs[1], conv_dw_along_w.dw_fast(d), vw=16)
    assert min(costs, key=costs.get) == want, costs
    if host_vector_width() == 16:
        assert conv._rule(node, d, xs[1]).algo == want
    _, cands, _ = conv.conv_candidates(node, d, xs[1], True)
    assert {"depthwise_cb", "depthwise"} <= {c.algo for c in cands}  # the tuner times both


def test_no_blocked_candidate_for_runtime_weights() -> None:
    ins = [r(1, 16, 9, 9), r(16, 1, 3, 3)]
    node = make_node("Conv", ins, {"group": 16, "pads": [1] * 4}, opset=11)
    d = as_2d([9, 9], conv_geometry(node))
    assert not conv_dw_blocked.dw_blocked_valid(node, d)
    assert conv._rule(node, d, 16).algo == "depthwise"


@pytest.mark.parametrize("name", ["5x5_s1_p2_7x7_map", "3x3_s21_c24", "3x3_wide_rows_many_bands"])
def test_split_over_the_pool_gives_the_same_bits(name: str) -> None:
    """ml_dwcb_conv2d on the thread pool, the split forced (no work threshold, workers
    never judged late): channel blocks and the bands of rows added when the blocks are
    few give the same bits at 1, 2 and 3 threads, and the NumPy reference's values."""
    ins, node = _node(name)
    x, w, b = ins
    d = as_2d(list(x.shape[2:]), conv_geometry(node))
    c = x.shape[1]
    args = ", ".join(str(d[k]) for k in ("KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW"))
    src = (
        "#include <stdint.h>\n#include <string.h>\n" + kernel_header("threadpool.h")
        + kernel_header("gemm.h") + kernel_header("conv.h") + kernel_header("conv_depthwise.h")
        + "void conv(int nt, const float* x, const float* w, const float* b, float* y, "
        "float* s) { ml_set_num_threads(nt);\n"
        f"  ml_dwcb_conv2d(1, {c}, {d['H']}, {d['W']}, {d['OH']}, {d['OW']}, {args}, x, w, b, y, "
        "s, 0, 0, 0, 0); }\n"
    )
    lib = build_shared(src, ["-DML_PAR_MIN_MEM=0", "-DML_PAR_WAKE_WORK=0",
                             "-DML_LATE_NS=1000000000000"])
    wp = conv_dw_blocked.pack_dw_weights(w)
    scratch = np.zeros(conv_dw_blocked.dwcb_scratch_floats(d) + 16, np.float32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)
    outs = []
    for nt in (1, 2, 3):
        y = np.full((c, d["OH"], d["OW"]), np.nan, np.float32)
        lib.conv(nt, ptr(np.ascontiguousarray(x[0])), ptr(wp), ptr(b), ptr(y), ptr(scratch))
        outs.append(y)
    ref = op_of(node).reference(node, list(ins))[0][0]
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


@pytest.mark.parametrize("vw", [8, 16])
@pytest.mark.parametrize("layout", [1, 2, 3])
@pytest.mark.parametrize("shape", [((1, 32, 14, 14), 5, 1), ((1, 48, 15, 22), 3, 2)])
def test_channel_blocked_input_and_output(shape, layout: int, vw: int) -> None:
    """ml_dwcb_conv2d reading its input (layout bit 0) and writing its output (bit 1)
    channel-blocked, [C/16][H][W][16] (backends/c/layout.py), with the harness's epilogue
    on the output's flat runs: the NumPy reference's values, the same bits at 1, 2 and 3
    threads (the split forced), at 8 and 16 floats per vector (two vectors per block)."""
    (n, c, h, w_), k, s = shape
    x, w, b = r(n, c, h, w_), r(c, 1, k, k, scale=0.3), r(c)
    node = make_node("Conv", [x, w, b], {"group": c, "pads": [k // 2] * 4, "strides": [s, s]},
                     const=[1, 2], opset=11)
    d = as_2d([h, w_], conv_geometry(node))
    oh, ow = d["OH"], d["OW"]
    args = ", ".join(str(d[key]) for key in ("KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW"))
    # epilogue: y = 2y + 1 on a flat run of floats, as the generated chains take it
    src = (
        "#include <stdint.h>\n#include <string.h>\n" + kernel_header("threadpool.h")
        + kernel_header("gemm.h") + kernel_header("conv.h") + kernel_header("conv_depthwise.h")
        + "static void epi(void* out, int64_t bi, int64_t m0, int64_t m1, int64_t n0, "
        f"int64_t n1) {{ float* y = (float*)out + bi * {c * oh * ow};\n"
        f"  for (int64_t m = m0; m < m1; ++m) for (int64_t i = n0; i < n1; ++i) "
        f"y[m * {oh * ow} + i] = 2.0f * y[m * {oh * ow} + i] + 1.0f; }}\n"
        "void conv(int nt, const float* x, const float* w, const float* b, float* y, "
        "float* s) { ml_set_num_threads(nt);\n"
        f"  ml_dwcb_conv2d(1, {c}, {h}, {w_}, {oh}, {ow}, {args}, x, w, b, y, s, epi, y, 0, "
        f"{layout}); }}\n"
    )
    lib = build_shared(src, [f"-DML_VW={vw}", f"-DML_NP={2 if vw == 16 else 1}",
                             "-DML_PAR_MIN_MEM=0", "-DML_PAR_WAKE_WORK=0",
                             "-DML_LATE_NS=1000000000000"])
    blocked = lambda a: np.ascontiguousarray(  # noqa: E731 - [C,H,W] -> [C/16,H,W,16]
        a.reshape(a.shape[0] // 16, 16, *a.shape[1:]).transpose(0, 2, 3, 1))
    xin = blocked(x[0]) if layout & 1 else np.ascontiguousarray(x[0])
    wp = conv_dw_blocked.pack_dw_weights(w)
    scratch = np.zeros(conv_dw_blocked.dwcb_scratch_floats(d) + 16, np.float32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    ref = 2 * op_of(node).reference(node, [x, w, b])[0][0] + 1
    outs = []
    for nt in (1, 2, 3):
        y = np.full(c * oh * ow, np.nan, np.float32)
        lib.conv(nt, ptr(xin), ptr(wp), ptr(b), ptr(y), ptr(scratch))
        outs.append(y)
    got = outs[0].reshape(c // 16, oh, ow, 16).transpose(0, 3, 1, 2) if layout & 2 else outs[0]
    np.testing.assert_allclose(got.reshape(c, oh, ow), ref, rtol=1e-5,
                               atol=1e-5 * float(np.abs(ref).max()))
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])
