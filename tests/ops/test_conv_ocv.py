"""Direct conv vectorised over output channels (``ml_ocv_conv2d`` of ops/nn/conv_ocv.h,
``conv_ocv.py``, the ``direct_ocv`` candidate of ``conv.py``).

The kernel matches the NumPy reference on odd shapes: output channels not a multiple of
16 (the last group's vectors partly past C_out), 1, 3 and odd input channels, strides 1-3
(stride 3: the run-time-stride row function), symmetric and asymmetric pads (edge pixels
on either side), outputs whose window lies wholly in the padding (the bias alone),
dilations 2-9 (edge columns in runs of equal window columns, each run by whole
tiles), 1x1 (stride 2: a 1x1 stride-1 conv is the GEMM's, read in place) to 7x7
windows and 1-D ones, output rows shorter than a tile (one-pixel interior tiles) and
interiors that need a half or a moved-back last tile, maps of fewer pixels than a vector
(scalar stores), batch 2, groups of whole 16-channel blocks, with and without bias and
epilogue; also at 4, 8 and 16 floats
per vector and with each of the 1-4 block groups. A compiled model gives the same bits
on 1 and 2 threads and matches ONNX Runtime; the scratch is the C formula; the rule
picks ``direct_ocv`` where its modelled cost is least (and measures faster on a
synthetic strided conv), leaves Winograd shapes to the tuner, and the tuner lists it.
"""

from __future__ import annotations


import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import check_forced, kernel_formula, make_node, run_threads
from onnx import helper

import monolib
from monolib.compiler.build import lower
from monolib.compiler.ops.nn import conv, conv_ocv
from monolib.compiler.ops.nn.conv import as_2d, conv_candidates, conv_geometry
from monolib.compiler.ops.nn.conv_cost import host_vector_width
from monolib.compiler.testing import ort_run
from monolib.compiler.tuning.select import Candidate

RNG = np.random.default_rng(7)
OCV_HEADERS = ("gemm.h", "conv.h", "conv_ocv.h")


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


# name: (x shape, C_out, kernel, attrs)
CASES = {
    "3x3_s2_p1_c3_m16": ((1, 3, 21, 26), 16, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3_s1_p1_c5_m20": ((1, 5, 9, 37), 20, (3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_s2_p1_c16_m40_batch2": ((2, 16, 15, 22), 40, (3, 3),
                                 {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "1x1_s2_c7_m33": ((1, 7, 6, 13), 33, (1, 1), {"strides": [2, 2]}),
    "5x5_s1_p2_c1_m64": ((1, 1, 12, 30), 64, (5, 5), {"pads": [2, 2, 2, 2]}),
    "7x7_s2_p3_c3_m24": ((1, 3, 23, 29), 24, (7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
    "3x3_s3_asym_c4_m17": ((1, 4, 16, 23), 17, (3, 3), {"pads": [0, 2, 2, 0], "strides": [3, 3]}),
    "3x3_dil2_c6_m48": ((1, 6, 12, 17), 48, (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "3x3_s21_c9_m70": ((1, 9, 10, 31), 70, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 1]}),
    "5x5_big_pads_tiny_map": ((1, 3, 3, 3), 16, (5, 5), {"pads": [4, 4, 4, 4]}),
    "3x3_short_rows_c2_m8": ((1, 2, 5, 4), 8, (3, 3), {"pads": [1, 1, 1, 1]}),
    "1d_k5_s2_c3_m36": ((1, 3, 41), 36, (5,), {"pads": [2, 1], "strides": [2]}),
    # rows and columns wholly in the padding: the bias alone (no window row / column)
    "1x1_pads_only_c3_m17": ((1, 3, 3, 4), 17, (1, 1), {"pads": [2, 1, 2, 1]}),
    # groups of whole 16-channel blocks: each block reads its own group's inputs
    "3x3_g4_c64_m64": ((1, 64, 13, 30), 64, (3, 3), {"pads": [1, 1, 1, 1], "group": 4}),
    "3x3_s2_g2_c24_m64_batch2": ((2, 24, 15, 22), 64, (3, 3),
                                 {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 2}),
    "5x5_dil2_g3_c9_m48": ((1, 9, 17, 19), 48, (5, 5),
                           {"pads": [4, 4, 4, 4], "dilations": [2, 2], "group": 3}),
    # an input over ML_OCV_PF_BYTES (2 MiB): each row prefetches the next row's inputs,
    # up to the last input row and not past it
    "3x3_s2_prefetched_c8_m16": ((1, 8, 257, 263), 16, (3, 3),
                                 {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    # a row of whole tiles and nothing else (no pads, 24 columns): its tiles issue less
    # than the row's prefetches, and the row's end issues the rest (once an endless loop:
    # n * 64 overflowed for the "all of it" count)
    "3x3_s2_prefetch_rest_c64_m64": ((1, 64, 200, 49), 64, (3, 3), {"strides": [2, 2]}),
    # rows wider than the staging (64 channels x 1100 > ML_OCV_STAGE): segments of
    # columns, each with its own edges, interior tiles and moved-back last tile
    "1d_wide_dil3_c8_m64": ((1, 8, 1100), 64, (3,), {"pads": [3, 3], "dilations": [3]}),
    "2d_wide_rows_c3_m40": ((1, 3, 3, 700), 40, (3, 3), {"pads": [1, 2, 1, 0]}),
    # edge columns in runs of equal window columns, each run by whole tiles (DeepLab's
    # ASPP: dilations 6-18): runs longer than a tile, of a half tile, of one pixel; a map
    # narrower than the window (the two edges meet, no interior); stride 2
    "3x3_dil9_edge_runs_c5_m20": ((1, 5, 21, 31), 20, (3, 3),
                                  {"pads": [9, 9, 9, 9], "dilations": [9, 9]}),
    "5x5_dil4_edge_runs_c3_m36": ((1, 3, 14, 23), 36, (5, 5),
                                  {"pads": [8, 7, 8, 6], "dilations": [4, 4]}),
    "3x3_dil6_narrow_map_c4_m16": ((1, 4, 9, 10), 16, (3, 3),
                                   {"pads": [6, 6, 6, 6], "dilations": [6, 6]}),
    "3x3_dil5_s2_c6_m32": ((1, 6, 19, 37), 32, (3, 3),
                           {"pads": [5, 5, 5, 5], "dilations": [5, 5], "strides": [2, 2]}),
}


def _node(name: str, bias: bool = True):
    xs, m, k, attrs = CASES[name]
    c = xs[1] // attrs.get("group", 1)
    ins = [r(*xs), r(m, c, *k, scale=0.3), r(m) if bias else None]
    node = make_node("Conv", ins, attrs, const=[1, 2] if bias else [1], opset=11)
    return (ins if bias else ins[:2]), node


def _check(ins, node, options=(), epilogue=True) -> None:
    check_forced(node, ins, "direct_ocv", "ml_ocv_conv2d(", options, epilogue)


@pytest.mark.parametrize("name", sorted(CASES))
def test_ocv_matches_reference(name: str) -> None:
    ins, node = _node(name)
    _check(ins, node)


def test_ocv_without_bias_or_epilogue() -> None:
    for name in ("3x3_s2_p1_c3_m16", "3x3_s3_asym_c4_m17"):
        ins, node = _node(name, bias=False)
        _check(ins, node, epilogue=False)


@pytest.mark.parametrize("vw", [4, 8, 16])
@pytest.mark.parametrize("name", ["3x3_s2_p1_c16_m40_batch2", "7x7_s2_p3_c3_m24",
                                  "3x3_s21_c9_m70", "3x3_g4_c64_m64"])
def test_ocv_vector_widths(name: str, vw: int) -> None:
    ins, node = _node(name)
    _check(ins, node, (f"-DML_VW={vw}", f"-DML_NP={2 if vw == 16 else 1}"))


@pytest.mark.parametrize("blocks", [1, 2, 3, 4])
def test_ocv_every_block_group(blocks: int, monkeypatch) -> None:
    """Each row function G = 1..4 (tiles of 24/G pixels at 16 floats a vector)."""
    monkeypatch.setattr(conv_ocv, "ocv_blocks", lambda d, c, m, vw=None, group=1: blocks)
    ins, node = _node("3x3_s2_p1_c16_m40_batch2")
    _check(ins, node)
    ins, node = _node("3x3_s1_p1_c5_m20")
    _check(ins, node)


def test_packed_weights_layout() -> None:
    w = r(20, 3, 3, 3)
    p = conv_ocv.pack_ocv_weights(w, 1)
    assert p.shape == (2, 3, 3, 3, 16)
    assert p[1, 2, 1, 0, 3] == w[19, 2, 1, 0] and p[0, 0, 2, 2, 0] == w[0, 0, 2, 2]
    assert not p[1, ..., 4:].any()  # channels past C_out are zero
    q = conv_ocv.pack_ocv_weights(w, 2)
    assert q.shape == (1, 3, 3, 3, 32) and q[0, 1, 0, 2, 17] == w[17, 1, 0, 2]
    b = conv_ocv.pack_ocv_bias(np.arange(20, dtype=np.float32), 20, 1)
    assert b.shape == (32,) and b[19] == 19 and not b[20:].any()


def test_scratch_is_the_kernels_formula() -> None:
    dims = [as_2d(list(CASES[n][0][2:]), conv_geometry(_node(n)[1])) for n in sorted(CASES)]
    dims.append({**dims[0], "OH": 300, "OW": 700})  # one row past the stage: a band of 1
    dims.append({**dims[0], "OH": 1, "OW": 3200})  # rows past the stage: segments
    dims.append({**dims[0], "OH": 2, "OW": 90})  # a segment at least ML_OCV_SEG_MIN wide
    rows = [(d["OH"], d["OW"], g * 16, flat) for d in dims for g in (1, 2, 3, 4)
            for flat in (0, 1)]
    got = kernel_formula(OCV_HEADERS, rows, "ml_ocv_scratch_floats(t[0], t[1], t[2], (int)t[3])")
    assert got == [conv_ocv.ocv_scratch_floats({"OH": oh, "OW": ow}, gsz, bool(flat))
                   for oh, ow, gsz, flat in rows]


def test_blocks_follow_the_channels() -> None:
    """16 channels take one block (a 24-pixel tile), 64 take four (no padding), 48 three."""
    d = as_2d([160, 160], conv_geometry(make_node(
        "Conv", [r(1, 3, 160, 160), r(16, 3, 3, 3)], {"pads": [1, 1, 1, 1]}, const=[1])))
    assert [conv_ocv.ocv_blocks(d, 3, m, 16) for m in (16, 48, 64)] == [1, 3, 4]


def test_blocks_at_8_floats_a_vector_keep_six_pixels_a_tile() -> None:
    """With 12 sums a tile (AVX2) one block (2 vectors x 6 pixels) is the fastest tile on
    ResNet-50's 256 -> 256 3x3/2 at 28x28 (4.25 ms, against 6.24 at two blocks and 8.64
    at four, Zen 3): TILE_RATE prices the wider tiles; at 16 floats four blocks stay."""
    d = as_2d([28, 28], conv_geometry(make_node(
        "Conv", [r(1, 256, 28, 28), r(256, 256, 3, 3)], {"pads": [1, 1, 1, 1], "strides": [2, 2]},
        const=[1])))
    assert conv_ocv.ocv_blocks(d, 256, 256, 8) == 1
    assert conv_ocv.ocv_blocks(d, 256, 256, 16) == 4


def _model():
    """A first-layer conv (3 -> 16, 3x3/2) + Relu, then 16 -> 40 3x3/2 + HardSwish."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["y1"]),
        helper.make_node("Conv", ["y1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("HardSwish", ["c2"], ["y2"]),
    ]
    weights = {"w1": r(16, 3, 3, 3, scale=0.3), "b1": r(16), "w2": r(40, 16, 3, 3, scale=0.2)}
    return make_model(nodes, [("x", F32, [1, 3, 96, 130])], [("y2", F32, [1, 40, 24, 33])],
                      weights, opset=14)


def test_compiled_ocv_on_one_and_two_threads(monkeypatch) -> None:
    model = _model()
    monkeypatch.setattr(conv, "ocv_cost", lambda d, n, c, m, group=1: 1.0)  # the rule's pick
    source, _, _ = lower(model, None, None)
    assert source.count("ml_ocv_conv2d(") == 3  # the definition and two calls
    feeds = {"x": r(1, 3, 96, 130)}
    want = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    for a, b in zip(one, two):  # every output the same sum whatever the split
        np.testing.assert_array_equal(a, b)


def test_rule_takes_the_least_cost(monkeypatch) -> None:
    _, node = _node("3x3_s2_p1_c3_m16")
    d = as_2d(list(node.inputs[0].shape[2:]), conv_geometry(node))
    costs = conv.rule_costs(node, d, 1)
    assert "direct_ocv" in costs and "gemm" in costs
    monkeypatch.setattr(conv, "ocv_cost", lambda d, n, c, m, group=1: 0.0)
    assert conv._rule(node, d, 1) == Candidate("direct_ocv")
    monkeypatch.setattr(conv, "ocv_cost", lambda d, n, c, m, group=1: 1e12)
    assert conv._rule(node, d, 1) != Candidate("direct_ocv")


def test_tuner_lists_it_only_where_valid() -> None:
    _, node = _node("3x3_s2_p1_c3_m16")
    d = as_2d(list(node.inputs[0].shape[2:]), conv_geometry(node))
    _, cands, _ = conv_candidates(node, d, 1, False)
    assert Candidate("direct_ocv") in cands
    grouped = make_node("Conv", [r(1, 4, 8, 8), r(4, 2, 3, 3)], {"group": 2}, const=[1])
    dg = as_2d([8, 8], conv_geometry(grouped))
    assert Candidate("direct_ocv") not in conv_candidates(grouped, dg, 2, False)[1]
    blocks = make_node("Conv", [r(1, 8, 8, 8), r(32, 4, 3, 3)], {"group": 2}, const=[1])
    assert Candidate("direct_ocv") in conv_candidates(blocks, dg, 2, False)[1]
    runtime_w = make_node("Conv", [r(1, 4, 8, 8), r(4, 4, 3, 3)], {})
    assert Candidate("direct_ocv") not in conv_candidates(runtime_w, dg, 1, False)[1]
    pointwise = make_node("Conv", [r(1, 4, 8, 8), r(4, 4, 1, 1)], {}, const=[1])
    dp = as_2d([8, 8], conv_geometry(pointwise))
    assert Candidate("direct_ocv") not in conv_candidates(pointwise, dp, 1, False)[1]


def test_rule_compares_it_with_winograd() -> None:
    """3x3 stride 1 with a Winograd plan: direct_ocv is in the rule's comparison beside
    the plans (one calibrated model for all algorithms, ``conv_cost.COSTS``; 16 -> 64 at
    55 x 55 measured 0.58 ms direct_ocv vs 0.65 Winograd F(4)), and a tuner candidate."""
    node = make_node("Conv", [r(1, 32, 28, 28), r(32, 32, 3, 3)], {"pads": [1, 1, 1, 1]},
                     const=[1])
    d = as_2d([28, 28], conv_geometry(node))
    costs = conv.rule_costs(node, d, 1)
    assert "direct_ocv" in costs and "winograd(m=4)" in costs
    assert Candidate("direct_ocv") in conv_candidates(node, d, 1, False)[1]


def test_rule_picks_it_where_it_measures_faster() -> None:
    """64 -> 64 3x3/2 on a 40 x 40 map (a detector's downsampling conv): the rule picks
    direct_ocv, and it measures faster than the implicit GEMM that the rule took before
    (280 vs 369 us on Zen 4; 10% allowed for a shared machine's noise)."""
    from monolib.compiler.tuning.measure import measure

    node = make_node("Conv", [r(1, 64, 40, 40), r(64, 64, 3, 3), r(64)],
                     {"pads": [1, 1, 1, 1], "strides": [2, 2]}, const=[1, 2])
    d = as_2d([40, 40], conv_geometry(node))
    sig, _, pick = conv_candidates(node, d, 1, False)
    assert pick == Candidate("direct_ocv")
    times = measure(sig, [Candidate("direct_ocv"), Candidate("gemm")], repeats=15,
                    budget_s=2.0)
    assert times["direct_ocv"] <= 1.1 * times["gemm"], times


def test_rule_compares_it_on_small_strided_pointwise_convs() -> None:
    """1x1/2 convs of few channels (a RegNet shortcut): the rule compares direct_ocv and
    picks it for 32 -> 64 at 56 x 56, which measures faster than the implicit GEMM
    (41 vs 48 us alone on Zen 4; 10% allowed for a shared machine's
    noise) at 16 floats a vector, and leaves it out at 8, where the GEMM measures faster;
    not past 32 inputs or 128 outputs, where its model ranks it first though it
    ran slower (32 -> 160 at 28 x 28: 39 vs 30 us), nor at stride 1 (the GEMM reads B in
    place there)."""
    from monolib.compiler.tuning.measure import measure

    def pick(c: int, m: int, hw: int, stride: int):
        node = make_node("Conv", [r(1, c, hw, hw), r(m, c, 1, 1)], {"strides": [stride] * 2},
                         const=[1])
        d = as_2d([hw, hw], conv_geometry(node))
        return node, d, conv_candidates(node, d, 1, False)

    node, d, (sig, _, rule) = pick(32, 64, 56, 2)
    times = measure(sig, [Candidate("direct_ocv"), Candidate("gemm")], repeats=15,
                    budget_s=2.0)
    if host_vector_width() != 8:
        assert "direct_ocv" in conv.rule_costs(node, d, 1) and rule == Candidate("direct_ocv")
        assert times["direct_ocv"] <= 1.1 * times["gemm"], times
    else:  # AVX2: the GEMM's assembly micro-kernel wins (Zen 3: 115 us, ocv 147)
        assert "direct_ocv" not in conv.rule_costs(node, d, 1)
        assert times["gemm"] <= 1.1 * times["direct_ocv"], times
    for c, m, stride in ((64, 64, 2), (32, 160, 2), (32, 64, 1)):
        node, d, _ = pick(c, m, 28, stride)
        assert "direct_ocv" not in conv.rule_costs(node, d, 1), (c, m, stride)


def test_batch_of_short_signals_weighs_it_against_the_fold() -> None:
    """32 frames of a 4-sample signal, 64 -> 64 3-tap (silero's encoder convs): the rule
    compares direct_ocv with the one folded GEMM (measured 12 vs 50 us on Zen 4) and picks
    it; the library matches ONNX Runtime on 1 and 2 threads, the same bits on both."""
    node = make_node("Conv", [r(32, 64, 4), r(64, 64, 3)], {"pads": [1, 1]}, const=[1])
    d = as_2d([4], conv_geometry(node))
    costs = conv.rule_costs(node, d, 1)
    assert set(costs) == {"gemm_folded", "direct_ocv"}
    assert conv._rule(node, d, 1) == Candidate("direct_ocv")
    runtime_w = make_node("Conv", [r(32, 64, 4), r(64, 64, 3)], {"pads": [1, 1]})
    assert conv.rule_costs(runtime_w, d, 1) is None  # nothing to weigh: folded
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        [("x", F32, [32, 64, 4])], [("y", F32, [32, 64, 4])],
        {"w": r(64, 64, 3, scale=0.2), "b": r(64)}, opset=14)
    source, _, _ = lower(model, None, None)
    assert "ml_ocv_conv2d(" in source
    feeds = {"x": r(32, 64, 4)}
    (want,) = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(one[0], two[0])


@pytest.mark.parametrize(
    "w, pl, sw, dw, p, want",
    [
        # 128 -> 256 3x3/2 at 28x28: 14 outputs; interior 1..13 (13): two tiles of 6, the
        # last pixel alone; the left edge (2 window columns) alone
        (28, 1, 2, 1, 6, (12 * 3, 2)),
        # 28 outputs, interior 26: four tiles, a half tile moved back over the last 2
        (28, 1, 1, 1, 6, (27 * 3, 2)),
        (8, 1, 1, 1, 6, (6 * 3, 2)),  # interior 6: one tile
        # interior 4 < 6: a half tile, one pixel; the 2 edges
        (6, 1, 1, 1, 6, (3 * 3, 3)),
        # dilation 18 on 64 columns (DeepLab's ASPP): 18 edge columns a side, each side a
        # span of 2 window columns run by 3 whole tiles; the interior 28: 4 tiles and a
        # half tile, one pixel left
        (64, 18, 1, 18, 6, (18 * 2 + 27 * 3 + 18 * 2, 1)),
    ],
)
def test_row_taps_follow_the_kernel(w, pl, sw, dw, p, want):
    """conv_ocv._row_taps counts a row as ml_ocv_row_k runs it: spans of columns with the
    same window columns inside the image, each by whole tiles, then the remainder as a
    tile moved back, a half tile, or one-pixel tiles (window columns of tiled pixels,
    one-pixel tiles)."""
    ow = (w + 2 * pl - 2 * dw - 1) // sw + 1
    d = {"OW": ow, "SW": sw, "PL": pl, "W": w, "KW": 3, "DW": dw}
    assert conv_ocv._row_taps(d, p) == want


def test_wide_rows_split_by_segments_on_threads(monkeypatch) -> None:
    """A 1-D conv over a long signal (one output row wider than the staging) splits into
    segments of columns; on 2 and 3 threads (narrower segments, more units than the
    serial plan) every output is the same sum as on 1, and matches ONNX Runtime. (A task
    that stopped at the row count, not the segment count, left outputs unwritten.)"""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[3, 3], dilations=[3]),
        helper.make_node("LeakyRelu", ["c1"], ["y1"], alpha=0.1),
        helper.make_node("Conv", ["y1", "w2", "b2"], ["y2"], pads=[1, 1]),
    ]
    weights = {"w1": r(64, 32, 3, scale=0.2), "b1": r(64), "w2": r(32, 64, 3, scale=0.2),
               "b2": r(32)}
    model = make_model(nodes, [("x", F32, [1, 32, 1500])], [("y2", F32, [1, 32, 1500])],
                       weights, opset=14)
    monkeypatch.setattr(conv, "ocv_cost", lambda d, n, c, m, group=1: 1.0)  # the rule's pick
    source, _, _ = lower(model, None, None)
    assert source.count("ml_ocv_conv2d(") == 3
    feeds = {"x": r(1, 32, 1500)}
    want = ort_run(model, feeds)[0]
    # the split runs first: a later run would find the serial run's outputs in the arena
    two, three, one = run_threads(model, feeds, (2, 3, 1))
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[0], three[0])


def test_images_are_one_job(monkeypatch) -> None:
    """A batch is one ml_ocv_conv2d call whose units are every image's: on 2 and 3
    threads each image's output is the same bits as on 1 and as a batch-1 library's,
    and matches ONNX Runtime."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1],
                              strides=[2, 2]),
             helper.make_node("HardSwish", ["c1"], ["y"])]
    weights = {"w1": r(24, 3, 3, 3, scale=0.3), "b1": r(24)}

    def model(n):
        return make_model(nodes, [("x", F32, [n, 3, 30, 44])], [("y", F32, [n, 24, 15, 22])],
                          weights, opset=14)

    monkeypatch.setattr(conv, "ocv_cost", lambda d, n, c, m, group=1: 1.0)  # the rule's pick
    feeds = {"x": r(3, 3, 30, 44)}
    source, _, _ = lower(model(3), None, None)
    assert source.count("ml_ocv_conv2d(") == 2  # the definition and the one call
    call = source[source.rindex("ml_ocv_conv2d("):]
    assert call.startswith("ml_ocv_conv2d(3, 3960, 7920, "), call[:60]
    two, three, one = run_threads(model(3), feeds, (2, 3, 1))
    want = ort_run(model(3), feeds)[0]
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[0], three[0])
    single = monolib.GraphModule(monolib.compile(model(1))["default"](monolib.cpu()))
    for i in range(3):
        single.run(x=feeds["x"][i : i + 1])
        np.testing.assert_array_equal(single.get_output(0).numpy()[0], one[0][i])


# Flat bands (conv_ocv.h's ML_OCV_FLAT_PAD): small maps whose rows are too short for a
# whole tile, run as one span over zero-padded rows. name: as CASES.
FLAT_CASES = {
    # RegNetX's 400-channel 3x3 in groups of 16 at 7x7 (a 7-wide row: no whole tile)
    "flat_g25_7x7": ((1, 400, 7, 7), 400, (3, 3), {"pads": [1, 1, 1, 1], "group": 25}),
    "flat_s2_g2_batch2": ((2, 32, 13, 11), 32, (3, 3),
                          {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 2}),
    # rows whose staged run outgrows the staging: several bands, each its own copy
    "flat_bands_c16_m16": ((1, 16, 41, 40), 16, (3, 3), {"pads": [1, 1, 1, 1]}),
    "flat_asym_dil2_c5_m8": ((1, 5, 9, 6), 8, (3, 3),
                             {"pads": [2, 1, 0, 3], "dilations": [2, 2]}),
    "flat_5x5_wide_row_c3_m16": ((1, 3, 6, 23), 16, (5, 5), {"pads": [2, 2, 2, 2]}),
    # a window wholly in the padding for the first and last rows (the bias alone)
    "flat_big_pads_c3_m16": ((1, 3, 3, 3), 16, (5, 5), {"pads": [4, 4, 4, 4]}),
}


def _flat_node(name: str):
    xs, m, k, attrs = FLAT_CASES[name]
    c = xs[1] // attrs.get("group", 1)
    ins = [r(*xs), r(m, c, *k, scale=0.3), r(m)]
    return ins, make_node("Conv", ins, attrs, const=[1, 2], opset=11)


@pytest.mark.parametrize(("name", "vw"), [(n, 16) for n in sorted(FLAT_CASES)] + [
    (n, vw) for n in ("flat_g25_7x7", "flat_s2_g2_batch2") for vw in (4, 8)])
def test_flat_bands_match_reference(name: str, vw: int, monkeypatch) -> None:
    """Every FLAT_CASES conv run flat (the call names ml_ocv_flat_<G>_<S>) matches the
    NumPy reference at 16 floats a vector (the masked transposed store), two of them at
    4 and 8 too (one row at a time); the C runs it flat only where the band fits, which
    these do (flat_band > 0)."""
    ins, node = _flat_node(name)
    d = as_2d(list(node.inputs[0].shape[2:]), conv_geometry(node))
    group = int(node.attrs.get("group", 1))
    m = node.inputs[1].shape[0]
    g = conv_ocv.ocv_blocks(d, ins[0].shape[1] // group, m, group=group)
    assert conv_ocv.flat_band(d, ins[0].shape[1] // group, g * 16) > 0
    monkeypatch.setattr(conv_ocv, "ocv_flat", lambda *a, **k: True)
    check_forced(node, ins, "direct_ocv", "ml_ocv_flat_", (f"-DML_VW={vw}",
                 f"-DML_NP={2 if vw == 16 else 1}"), True)


def test_flat_bands_on_one_and_two_threads(monkeypatch) -> None:
    """Flat bands split over threads (thinner bands) give the same bits as one thread and
    ONNX Runtime's values."""
    monkeypatch.setattr(conv_ocv, "ocv_flat", lambda *a, **k: True)
    monkeypatch.setattr(conv, "ocv_cost", lambda d, n, c, m, group=1: 1.0)  # the rule's pick
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=4),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [("x", F32, [1, 64, 9, 9])], [("y", F32, [1, 64, 9, 9])],
                       {"w": r(64, 16, 3, 3, scale=0.2), "b": r(64)}, opset=14)
    source, _, _ = lower(model, None, None)
    assert "ml_ocv_flat_1_1, " in source
    feeds = {"x": r(1, 64, 9, 9)}
    want = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    np.testing.assert_allclose(one[0], want[0], rtol=1e-5, atol=1e-5 * np.abs(want[0]).max())
    np.testing.assert_array_equal(one[0], two[0])


def test_flat_only_where_it_is_modelled_faster() -> None:
    """Flat where rows have no room for a tile and one vector of outputs a tile (RegNetX's
    groups of 16 at 7x7 and 14x14 stride 2); not with two vectors a tile (groups of 32:
    a one-pixel tile then runs near a tiled pixel's rate, measured slower flat), not on
    large maps (the rows hold whole tiles), not where one row's padded inputs do not fit
    (512 channels of 3 rows x 9) and not with unequal strides."""
    def dims(h, w, s=(1, 1), k=3):
        node = make_node("Conv", [r(1, 16, h, w), r(16, 16, k, k)],
                         {"pads": [k // 2] * 4, "strides": list(s)}, const=[1])
        return as_2d([h, w], conv_geometry(node))

    assert conv_ocv.ocv_flat(dims(7, 7), 16, 400, 1, 16)
    assert conv_ocv.ocv_flat(dims(14, 14, (2, 2)), 16, 400, 1, 16)
    assert not conv_ocv.ocv_flat(dims(14, 14), 32, 1024, 2, 16)
    assert not conv_ocv.ocv_flat(dims(50, 50), 16, 64, 1, 16)  # 2 tiles and 2 edges a row
    assert conv_ocv.flat_band(dims(7, 7), 512, 16) == 0
    assert not conv_ocv.ocv_flat(dims(7, 7), 512, 16, 1, 16)
    assert conv_ocv.flat_band(dims(7, 7, (2, 1)), 16, 16) == 0


def test_flat_band_is_the_kernels_formula() -> None:
    """conv_ocv.flat_band mirrors ml_ocv_flat_band (the padded plane an odd number of
    lines) over FLAT_CASES, the CASES and channel counts from 1 to 512."""
    names = sorted(FLAT_CASES)
    dims = [as_2d(list(FLAT_CASES[n][0][2:]), conv_geometry(_flat_node(n)[1])) for n in names]
    dims += [as_2d(list(CASES[n][0][2:]), conv_geometry(_node(n)[1])) for n in sorted(CASES)
             if len(CASES[n][0]) == 4]
    rows = [(d, c, g) for d in dims if d["SH"] == d["SW"] for c in (1, 16, 60, 512)
            for g in (16, 64)]
    keys = ("OH", "OW", "KH", "KW", "SH", "SW", "DH", "DW", "PL", "W")
    out = kernel_formula(
        OCV_HEADERS, [(c, g, *(d[k] for k in keys)) for d, c, g in rows],
        "ml_ocv_flat_band(t[0], t[2], t[3], ML_MAX(t[10] + t[11], (t[3] - 1) * t[7] + "
        "(t[5] - 1) * t[9] + 1), (int)t[4], (int)t[6], (int)t[8], t[1])")
    assert out == [conv_ocv.flat_band(d, c, g) for d, c, g in rows]
    assert any(v == 0 for v in out) and any(v > 1 for v in out)
