"""Winograd from raw weights transformed per pass (winograd.py ``raw``, winograd.h ``wt``).

The library stores the raw 3x3 (or 1-D) taps; each task transforms the taps of one pass
of output channels, a row of U at a time, before its GEMMs (issue 15 "Size": no stored
U, 4x the raw weights). Forced on odd shapes (channels off the vector width and MR,
output-channel tails, several passes, channel-split tasks, packed narrow images, F(2),
1-D 3/5 taps, other vector widths) it matches the NumPy reference and the stored-U path;
the params hold only the raw taps; a compiled model gives the same bits on 1 and 2
threads; the size budget leaves it to the rule where the transformed weights do not fit,
and there it is measured faster than the best layout without Winograd.
"""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from frontend.onnx_util import F32, make_model
from harness import (
    EPI,
    VECTOR_WIDTHS,
    NodeContext,
    make_node,
    run_c,
    run_threads,
    run_variants,
)
from onnx import helper

from monolib.compiler.build import lower
from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn import conv_budget, winograd
from monolib.compiler.ops.nn._gemm import MR
from monolib.compiler.ops.nn.conv import _rule, as_2d, conv_candidates, conv_geometry
from monolib.compiler.pipeline import prepare
from monolib.compiler.testing import ort_run
from monolib.compiler.tuning.measure import measure
from monolib.compiler.tuning.select import Candidate, Selection, restricting, selecting

RNG = np.random.default_rng(1515)

CASES = {
    # x, w, attrs, m: C off the vector width, M off MR
    "3x3_c13_m10_partial_tiles": ((1, 13, 33, 35), (10, 13, 3, 3), {"pads": [1, 1, 1, 1]}, 4),
    # 100 output channels: passes of 48, 48 and 4 (a tail panel)
    "3x3_three_passes": ((1, 21, 20, 22), (100, 21, 3, 3), {"pads": [1, 1, 1, 1]}, 4),
    # 7 x 7 tiles: lanes across rows of tiles (pack mode)
    "3x3_packed_narrow": ((1, 17, 28, 28), (20, 17, 3, 3), {"pads": [1, 1, 1, 1]}, 4),
    "3x3_f2_asym_pads": ((1, 40, 10, 18), (27, 40, 3, 3), {"pads": [0, 1, 2, 0]}, 2),
    "1d_k5": ((1, 20, 87), (14, 20, 5), {"pads": [2, 1]}, 4),
    # one block: tasks split the 100 output channels
    "1d_k3_channel_split": ((1, 24, 70), (100, 24, 3), {}, 4),
}


def _node(xs, ws, attrs):
    ins = [RNG.standard_normal(xs).astype(np.float32),
           (0.3 * RNG.standard_normal(ws)).astype(np.float32),
           RNG.standard_normal(ws[0]).astype(np.float32)]
    return ins, make_node("Conv", ins, attrs, const=[1, 2], opset=11)


def _label(m: int, raw: bool) -> str:
    return f"winograd{'_raw' if raw else ''}(m={m})"


def _emit(node, label: str) -> tuple[str, NodeContext]:
    ctx = NodeContext(node)
    with selecting(Selection(forced={"Conv_0": label})):
        src = op_of(node).emit(node, ctx) + "\n".join(ctx.helpers)
    return src, ctx


@pytest.mark.parametrize("name", sorted(CASES))
def test_raw_winograd_matches_reference_and_stored_path(name: str) -> None:
    xs, ws, attrs, m = CASES[name]
    ins, node = _node(xs, ws, attrs)
    src, ctx = _emit(node, _label(m, True))
    assert "ml_winograd(" in src and ".wt = ml_wino_" in src, src[:600]
    # the params: the raw taps in packed-A panels, VW_MAX floats, the bias; no U
    taps = int(np.prod(ws[2:]))
    raw_floats = taps * -(-ws[0] // MR) * MR * ws[1] + winograd.VW_MAX
    assert len(ctx.params) <= 4 * (raw_floats + ws[0]) + 2 * 64
    ref = op_of(node).reference(node, list(ins))[0]
    tol = 3e-5 * float(np.abs(ref).max())
    with selecting(Selection(forced={"Conv_0": _label(m, False)})):
        stored = run_c(node, ins)[0]
    with selecting(Selection(forced={"Conv_0": _label(m, True)})):
        runs = run_variants(node, ins, (None, "affine"))  # one library
        for epi, want, (got,) in zip((None, "affine"), (ref, ref * EPI[0] + EPI[1]), runs):
            err = float(np.abs(got - want).max())
            assert err <= tol, f"max abs error {err:.3g} > {tol:.3g} (epilogue {epi})"
            if epi is None:  # U in float32 vs float64: an ulp or so apart
                assert float(np.abs(got - stored).max()) <= tol / 3


@pytest.mark.parametrize("width", sorted(VECTOR_WIDTHS))
@pytest.mark.parametrize("name", ["3x3_three_passes", "1d_k5"])
def test_raw_winograd_other_vector_widths(name: str, width: str) -> None:
    xs, ws, attrs, m = CASES[name]
    ins, node = _node(xs, ws, attrs)
    ref = op_of(node).reference(node, list(ins))[0]
    with selecting(Selection(forced={"Conv_0": _label(m, True)})):
        got = run_c(node, ins, None, VECTOR_WIDTHS[width])[0]
    assert float(np.abs(got - ref).max()) <= 3e-5 * float(np.abs(ref).max())


def test_weight_function_is_g_g_gt() -> None:
    """Row k of the generated transform applies G_h row k, then G_w: its C text names
    every nonzero tap of that row once per column, and F(4x4) has alpha_h = 6 cases."""
    th = tw = winograd.cook_toom(4, 3)
    _, node = _node((1, 16, 20, 20), (16, 16, 3, 3), {})
    ctx = NodeContext(node)
    name = winograd.weight_function(ctx, th, tw)
    text = ctx.helpers[-1]
    assert name == "ml_wino_4x4_3x3_w" and text.count("case ") == 6
    case5 = text.split("case 5:")[1].split("break;")[0]  # G row 5 = (0, 0, 1): tap row 2
    assert "g2_0" in case5 and "g0_0" not in case5 and "g1_0" not in case5
    packed, stride = winograd.pack_raw(np.ones((10, 13, 3, 3), np.float32))
    assert stride == 12 * 13 and packed.size == 9 * stride + winograd.VW_MAX


# -- in a compiled model: threads and the size budget -------------------------------------


def _model() -> onnx.ModelProto:
    """x [1,32,46,44] -> 3x3 conv (40) + bias -> Relu -> 3x3 conv (24): 12 x 11 tiles,
    over the parallel threshold; weights 20 kB, their 4x transforms would be 80 kB."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="b", pads=[1, 1, 1, 1]),
    ]
    shapes = {"w1": (40, 32, 3, 3), "b1": (40,), "w2": (24, 40, 3, 3)}
    weights = {k: (0.2 * RNG.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    return make_model(nodes, [("x", F32, [1, 32, 46, 44])], [("y", F32, [1, 24, 46, 44])],
                      weights, opset=13)


@pytest.fixture
def no_slack(monkeypatch):
    """The 0.5 MB allowance off: 15% of the model's weights decide alone."""
    monkeypatch.setattr(conv_budget, "SLACK_BYTES", 0)


def test_budget_leaves_raw_winograd_where_transforms_do_not_fit(no_slack) -> None:
    model = _model()
    graph = prepare(model)[0]
    report = conv_budget.plan_budget(graph, conv_budget.DEFAULT_FRACTION)
    assert report.winograd == {}  # 15% of 20 kB holds no 4x transform
    assert report.restriction == {"a": (Candidate("winograd"),), "b": (Candidate("winograd"),)}
    source, _, params = lower(model)  # the default budget
    assert source.count("ml_winograd(&wa_") == 2 and source.count(".wt = ml_wino_") == 2
    assert params.nbytes <= 1.15 * report.weight_bytes
    free, _, free_params = lower(model, size_budget=None)  # stored U, wt left out
    assert free.count("ml_winograd(&wa_") == 2 and ".wt = ml_wino_" not in free
    assert free_params.nbytes > 3 * report.weight_bytes


def test_raw_winograd_same_bits_on_one_and_two_threads(no_slack) -> None:
    model = _model()
    feeds = {"x": RNG.standard_normal((1, 32, 46, 44)).astype(np.float32)}
    want = ort_run(model, feeds)[0]
    one, two = run_threads(model, feeds)
    assert np.abs(one[0] - want).max() <= 3e-5 * np.abs(want).max()
    np.testing.assert_array_equal(one[0], two[0])  # tasks own whole blocks and passes


def test_rule_picks_raw_winograd_measured_faster_than_the_rest() -> None:
    """Stored transforms excluded (the budget's restriction), the cost model's choice on
    a 48 x 48 x 48 -> 48 3x3 conv is raw F(4x4); timed (CPU time, one thread), it beats
    the best layout without Winograd by a wide margin (~1.7x here)."""
    _, node = _node((1, 48, 48, 48), (48, 48, 3, 3), {"pads": [1, 1, 1, 1]})
    d = as_2d([48, 48], conv_geometry(node))
    with restricting({"Conv_0": (Candidate("winograd"),)}):
        pick = _rule(node, d, 1)
        sig, cands, _ = conv_candidates(node, d, 1, False)
    assert pick == Candidate("winograd_raw", (("m", 4),))
    rest = [c for c in cands if c.algo in ("direct", "gemm")]
    times = measure(sig, [pick, *rest], repeats=5, budget_s=1.0, clock=time.thread_time)
    assert times[pick.label] < min(times[c.label] for c in rest)
