"""Conv algorithm choice by cost (ops/nn/conv_cost.py) and Winograd's packed lanes.

Winograd on a narrow image packs several rows of tiles into one vector
(``WinogradPlan.pack``): forced through the tuning Selection, the packed kernel matches
the NumPy reference for partial edge tiles, pads, channel counts off the GEMM blocking,
F(2x2), F(4x4) and 1-D taps along W of a 2-D image, at every vector width, and a compiled
model gives the same bits on 1 and 2 threads. The rule's cost model ranks the
algorithms by the work they really do (lanes padded to vectors, tiles never crossing a
row), so it keeps Winograd off images too narrow to fill its vectors.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from frontend.onnx_util import F32, make_model
from harness import (
    EPI,
    VECTOR_WIDTHS,
    NodeContext,
    check_threads_match_ort,
    make_node,
    run_c,
    run_threads,
)
from onnx import helper

from monolib.compiler.build import lower
from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn import conv, conv_cost, winograd
from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
from monolib.compiler.testing import ort_run
from monolib.compiler.tuning.select import Selection, selecting

RNG = np.random.default_rng(14)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


PACKED = {
    # x, w, attrs, forced candidate: grids of 2-7 tiles a row, partial edge tiles
    "7x7_f2": ((1, 24, 7, 7), (20, 24, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd(m=2)"),
    "15x15_f4": ((1, 24, 15, 15), (20, 24, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd(m=4)"),
    "13x13_f2": ((1, 17, 13, 13), (13, 17, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd(m=2)"),
    "22x11_f4_asym": ((1, 16, 22, 11), (9, 16, 3, 3), {"pads": [0, 1, 2, 0]}, "winograd(m=4)"),
    "30x8_1x3": ((1, 24, 30, 8), (30, 24, 1, 3), {"pads": [0, 1, 0, 1]}, "winograd(m=4)"),
    "batch2_12x12_f2": ((2, 12, 12, 12), (8, 12, 3, 3), {"pads": [1, 1, 1, 1]}, "winograd(m=2)"),
}


def _node(xs, ws, attrs, bias=True):
    ins = [r(*xs), r(*ws, scale=0.3)] + ([r(ws[0])] if bias else [])
    node = make_node("Conv", ins, attrs, const=list(range(1, len(ins))), opset=11)
    return ins, node


def _plan(node, label):
    d = as_2d(list(node.inputs[0].shape[2:]), conv_geometry(node))
    m = int(label.split("m=")[1].rstrip(")"))
    return winograd.plan_winograd(node, d, 1, m)


@pytest.fixture
def packed(monkeypatch):
    """Pack rows of tiles whatever the host's vector width (the choice is a speed one)."""
    monkeypatch.setattr(winograd, "_pack_wins", lambda grid, tw: grid[0] >= 2)


@pytest.mark.parametrize("width", ["native", *sorted(VECTOR_WIDTHS)])
@pytest.mark.parametrize("name", sorted(PACKED))
def test_packed_winograd_matches_reference(name, width, packed) -> None:
    xs, ws, attrs, label = PACKED[name]
    ins, node = _node(xs, ws, attrs, bias=name != "15x15_f4")
    plan = _plan(node, label)
    assert plan is not None and plan.pack and plan.block[1] >= plan.tiles(
        as_2d(list(xs[2:]), conv_geometry(node)))[1]
    ref = op_of(node).reference(node, list(ins))[0]
    tol = 3e-5 * float(np.abs(ref).max())
    options = VECTOR_WIDTHS.get(width, ())
    with selecting(Selection(forced={node.name: label})):
        ctx = NodeContext(node)
        assert ".pack = 1" in op_of(node).emit(node, ctx)
        for epi, want in ((None, ref), ("affine", ref * EPI[0] + EPI[1])):
            got = run_c(node, ins, epi, options)[0]
            err = float(np.abs(got - want).max())
            assert err <= tol, f"max abs error {err:.3g} > {tol:.3g} (epilogue {epi})"


def test_packing_computes_fewer_lanes_on_narrow_images(monkeypatch) -> None:
    """7 tiles a row (14x14, F(2x2)) fill 7 of 16 AVX-512 lanes per row unpacked: packed,
    7 rows of 8 lanes make 56 columns (64 with the NR rounding) instead of 112."""
    monkeypatch.setattr(conv_cost, "host_vector_width", lambda: 16)
    monkeypatch.setattr(winograd, "host_vector_width", lambda: 16)
    _, node = _node((1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]})
    d = as_2d([14, 14], conv_geometry(node))
    plan = winograd.plan_winograd(node, d, 1, 2)
    assert plan.pack and plan.lane_stride(d) == 8
    assert conv_cost.winograd_lanes(plan, d, 16) == 64
    _, wnode = _node((1, 64, 56, 64), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]})
    wide = winograd.plan_winograd(wnode, as_2d([56, 64], conv_geometry(wnode)), 1, 4)
    assert not wide.pack  # 16 tiles a row fill a vector: packing would add lanes


def _model(packed_label: str) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="pk"),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    shapes = {"w1": (40, 48, 3, 3), "b1": (40,)}
    weights = {k: r(*s, scale=0.2) for k, s in shapes.items()}
    return make_model(nodes, [("x", F32, [1, 48, 14, 14])], [("y", F32, [1, 40, 14, 14])],
                      weights)


@pytest.mark.parametrize("label", ["winograd(m=2)", "winograd(m=4)"])
def test_packed_winograd_one_and_two_threads(label, packed) -> None:
    model = _model(label)
    with selecting(Selection(forced={"pk": label})):
        source, _, _ = lower(model, None, None)
        assert ".pack = 1" in source
        feeds = {"x": np.random.default_rng(3).standard_normal((1, 48, 14, 14), np.float32)}
        check_threads_match_ort(model, feeds)


# -- the rule's cost model -----------------------------------------------------------------

SYNTHETIC = {
    # (x, w, attrs): shapes where the candidates differ by 1.5x or more on a Zen 4 core
    # 1x3 taps on a 4-wide map: direct pads each 4-column row to a 16-column panel
    "narrow_rows": ((1, 96, 12, 4), (96, 96, 1, 3), {"pads": [0, 1, 0, 1]}),
    # a wide map of few channels: Winograd F(4x4) does a quarter of the multiplies (at 16
    # channels its transforms left it 1.3x ahead on Zen 3 once the GEMM's im2col packing
    # was fast; at 32, 1.8x)
    "wide_map": ((1, 32, 48, 48), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),
    # 1x3 taps on a 74-wide map of 24 channels: the direct kernel packs nothing
    "few_channels": ((1, 24, 24, 74), (24, 24, 1, 3), {"pads": [0, 1, 0, 1]}),
}


def _signature(node):
    d = as_2d(list(node.inputs[0].shape[2:]), conv_geometry(node))
    return conv.conv_candidates(node, d, 1, False)


#: Cases the cost model misranks at a vector width. With AVX2 (Zen 3) it ranks direct_ocv
#: first on the 1x3 conv of 24 channels, even with the AVX2 table (modelled 167 us, the
#: direct kernel 205, the GEMM 255; measured 175-222 / 129-174 / 167-213): the fit, over
#: 310 signatures, trades this shape for others (its regret is 2.9% over all of them).
#: On the 1x3 conv of a 4-wide map it ranks pixels-as-rows first (modelled 65 us, the
#: GEMM 83), but since the im2col packer finds a vector's pieces of rows once (not at
#: every k) the GEMM measures 5-26% ahead (64 us against 80 in a CI run); the model's
#: per-k run count no longer says what the packer does: a refit's work, not a case's.
UNCALIBRATED = {"few_channels": 8, "narrow_rows": 8}


def _case(name: str):
    if UNCALIBRATED.get(name) == conv_cost.host_vector_width():
        return pytest.param(name, marks=pytest.mark.xfail(
            reason="cost model not calibrated at this vector width", strict=False))
    return name


@pytest.mark.parametrize("name", [_case(n) for n in sorted(SYNTHETIC)])
def test_rule_picks_the_measured_faster_candidate(name) -> None:
    """Every candidate timed on one thread (the tuner's micro-benchmark, median of
    rounds): the rule's choice is the fastest or within 25% of it (a shared machine's
    noise; the slowest candidate is 1.5x or more)."""
    from monolib.compiler.tuning.measure import measure

    xs, ws, attrs = SYNTHETIC[name]
    _, node = _node(xs, ws, attrs)
    sig, cands, pick = _signature(node)
    cands = [c for c in cands if c.param("cob") is None]
    times = measure(sig, cands, repeats=9, budget_s=1.5)
    best = min(times, key=times.get)
    assert max(times.values()) >= 1.3 * times[best], times  # the case discriminates
    if times[pick.label] > 1.25 * times[best]:
        # a burst of load can inflate one candidate's rounds: time the two again, each
        # keeping its better figure (a real misprediction stays slower)
        pair = [c for c in cands if c.label in (pick.label, best)]
        again = measure(sig, pair, repeats=9, budget_s=1.5)
        times = {k: min(times[k], again.get(k, times[k])) for k in times}
    assert times[pick.label] <= 1.25 * times[best], (pick.label, times)


def test_cost_model_counts_padded_work(monkeypatch) -> None:
    """The direct kernel's tiles never cross an output row: 4-column rows cost four
    times their multiply-adds, while the implicit GEMM rounds the whole 48-pixel image."""
    monkeypatch.setattr(conv_cost, "host_vector_width", lambda: 16)
    d = {"OH": 12, "OW": 4}
    k = conv_cost.COSTS["direct"]
    narrow = conv_cost.direct_cost(96, 288, d, 0) - k["call"]
    assert narrow == pytest.approx(96 * 288 * 12 * 16 * k["mac"] + 16 * 12 * 3 * k["tile"]
                                   + 96 * 12 * 4 * k["out"])
    gemm = conv_cost.gemm_cost(96, 288, 48) - conv_cost.COSTS["gemm"]["call"]
    assert gemm < 0.5 * narrow


def test_host_vector_width_follows_the_isa(monkeypatch, tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    real = conv_cost.Path

    def fake(flags):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n")
        conv_cost.host_vector_width.cache_clear()
        monkeypatch.setattr(conv_cost, "Path", lambda p: real(cpuinfo))
        return conv_cost.host_vector_width()

    try:
        assert fake("avx avx2 avx512f") == 16
        assert fake("avx avx2 fma") == 8
        assert fake("sse4_2") == 4
    finally:
        monkeypatch.undo()
        conv_cost.host_vector_width.cache_clear()


# -- pixels as GEMM rows ---------------------------------------------------------------------

PIXEL_ROWS = {
    "3x3_pad1_7x7": ((1, 24, 7, 7), (20, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
    "1x1_pointwise": ((1, 40, 9, 6), (35, 40, 1, 1), {}),
    "1x1_stride2": ((1, 16, 13, 11), (33, 16, 1, 1), {"strides": [2, 2]}),
    "5x5_s2_asym_pads": ((1, 7, 15, 14), (10, 7, 5, 5), {"strides": [2, 2], "pads": [2, 0, 1, 2]}),
    "batch2_dilated": ((2, 9, 10, 12), (17, 9, 3, 3), {"dilations": [2, 2], "pads": [1, 2, 1, 2]}),
    "1d_k3": ((1, 12, 30), (26, 12, 3), {"pads": [1, 1]}),
}


@pytest.mark.parametrize("width", ["native", "vw4"])
@pytest.mark.parametrize("name", sorted(PIXEL_ROWS))
def test_pixel_rows_matches_reference(name, width) -> None:
    xs, ws, attrs = PIXEL_ROWS[name]
    ins, node = _node(xs, ws, attrs, bias=name != "1x1_stride2")
    ref = op_of(node).reference(node, list(ins))[0]
    tol = 2e-5 * float(np.abs(ref).max())
    with selecting(Selection(forced={node.name: "pixel_rows"})):
        ctx = NodeContext(node)
        assert "ml_transpose_pm(" in op_of(node).emit(node, ctx)
        for epi, want in ((None, ref), ("affine", ref * EPI[0] + EPI[1])):
            got = run_c(node, ins, epi, VECTOR_WIDTHS.get(width, ()))[0]
            err = float(np.abs(got - want).max())
            assert err <= tol, f"max abs error {err:.3g} > {tol:.3g} (epilogue {epi})"


def test_pixel_rows_is_only_for_small_static_single_group_convs() -> None:
    from monolib.compiler.ops.nn.conv_pixel_rows import MAX_PIXELS, pixel_rows_valid

    def valid(xs, ws, attrs, group=1):
        _, node = _node(xs, ws, {**attrs, "group": group})
        return pixel_rows_valid(node, as_2d(list(xs[2:]), conv_geometry(node)), group)

    assert valid((1, 8, 7, 7), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]})
    assert not valid((1, 8, 7, 7), (16, 4, 3, 3), {"pads": [1, 1, 1, 1]}, group=2)
    side = int(MAX_PIXELS**0.5) + 1
    assert not valid((1, 8, side, side), (16, 8, 1, 1), {})


def test_pixel_rows_one_and_two_threads() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="pr"),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    weights = {"w1": r(96, 64, 3, 3, scale=0.1), "b1": r(96)}
    model = make_model(nodes, [("x", F32, [1, 64, 7, 7])], [("y", F32, [1, 96, 7, 7])],
                       weights)
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 64, 7, 7), np.float32)}
    with selecting(Selection(forced={"pr": "pixel_rows"})):
        source, _, _ = lower(model, None, None)
        assert "ml_transpose_pm(" in source
        want = ort_run(model, feeds)[0]
        one, two = run_threads(model, feeds)
    assert np.abs(one[0] - want).max() <= 2e-5 * np.abs(want).max()
    assert (one[0] >= 0).all()  # the fused Relu
    np.testing.assert_array_equal(one[0], two[0])
