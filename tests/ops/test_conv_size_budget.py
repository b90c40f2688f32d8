"""The size budget of re-laid-out Conv weights (ops/nn/conv_budget.py, issue 15 "Size").

Winograd stores pre-transformed weights (16 or 36 floats per 3x3 kernel of 9), or
transforms the raw ones per pass (``winograd_raw``: no extra bytes, a little slower). A
model of three 3x3 convs on images of 48, 24 and 12 pixels a side: the budget limits the
extra bytes, gives stored transforms to the layer saving the most time per extra byte
over its best layout without them, excludes them elsewhere for the rule and a tuned
table alike (raw Winograd stays allowed), and lifting it (``size_budget=None``) stores
every layer's transforms; the outputs match ONNX Runtime either way.
"""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from onnx import helper

from monolib.compiler.build import lower
from monolib.compiler.ops.nn import conv_budget
from monolib.compiler.pipeline import prepare
from monolib.compiler.testing import ort_run, run_model
from monolib.compiler.tuning.select import (
    Candidate,
    Selection,
    choose,
    excluded,
    restricting,
    selecting,
)
from monolib.errors import CompileError

RNG = np.random.default_rng(15)
CONVS = ("c48", "c24", "c12")  # by image side: time saved per extra byte falls with it


def _model():
    """x [1,32,48,48] -> 3x3 32->32 -> pool -> 3x3 32->64 -> pool -> 3x3 64->96: shapes
    where Winograd measures 1.2-1.7x faster than the rest (Zen 4)."""
    chans = [(32, 32), (32, 64), (64, 96)]
    inits, nodes, cur = {}, [], "x"
    for i, (name, (ci, co)) in enumerate(zip(CONVS, chans)):
        inits[f"w{i}"] = (0.2 * RNG.standard_normal((co, ci, 3, 3))).astype(np.float32)
        inits[f"b{i}"] = (0.1 * RNG.standard_normal(co)).astype(np.float32)
        nodes.append(helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"y{i}"], name=name,
                                      pads=[1, 1, 1, 1]))
        cur = f"y{i}"
        if i < 2:
            nodes.append(helper.make_node("MaxPool", [cur], [f"p{i}"], kernel_shape=[2, 2],
                                          strides=[2, 2]))
            cur = f"p{i}"
    return make_model(nodes, [("x", F32, (1, 32, 48, 48))], [(cur, F32, (1, 96, 12, 12))],
                      inits, opset=13)


@pytest.fixture
def no_slack(monkeypatch):
    """The 1 MB allowance off: the model's few kB of weights decide alone."""
    monkeypatch.setattr(conv_budget, "SLACK_BYTES", 0)


def _options():
    graph = prepare(_model())[0]
    return graph, {n.name: conv_budget._options(n) for n in graph.nodes if n.op_type == "Conv"}


def test_every_conv_has_a_winograd_option():
    _, opts = _options()
    for name in CONVS:
        raw, plain, options = opts[name]
        assert options, f"{name}: the rule should prefer Winograd on this shape"
        for m, nbytes, saved in options:
            assert nbytes > plain >= raw and saved > 0
            assert nbytes >= raw * (m + 2) ** 2 // 9  # alpha^2 floats per 9 raw ones


def test_budget_limits_bytes_and_picks_best_gain_per_byte(no_slack):
    graph, opts = _options()
    ratio = {n: max(s / (b - opts[n][1]) for _, b, s in opts[n][2]) for n in CONVS}
    top = max(ratio, key=ratio.get)
    weights = conv_budget.plan_budget(graph, 1.0).weight_bytes
    base = sum(plain - raw for raw, plain, _ in opts.values())
    # room for the top node's first step (its best gain per byte) and nothing more
    step = max(opts[top][2], key=lambda o: o[2] / (o[1] - opts[top][1]))[1] - opts[top][1]
    frac = (base + step) / weights
    rep = conv_budget.plan_budget(graph, frac)
    assert set(rep.winograd) == {top}
    assert rep.extra_bytes <= rep.budget_bytes
    assert all(rep.restriction[n] == (Candidate("winograd"),) for n in CONVS if n != top)
    # no budget for any transform: every conv excluded
    rep0 = conv_budget.plan_budget(graph, 0.0)
    assert rep0.winograd == {} and set(rep0.restriction) == set(CONVS)
    # a large budget: all of them, nothing excluded
    big = conv_budget.plan_budget(graph, 100.0)
    assert set(big.winograd) == set(CONVS) and not any(
        p == Candidate("winograd") for pats in big.restriction.values() for p in pats)
    assert conv_budget.winograd_budget(graph, None) is None


def _winograd_calls(budget):
    source, _, params = lower(_model(), size_budget=budget)
    return source.count("ml_winograd(&wa_"), source.count(".wt = ml_wino_"), params.nbytes


def test_lifted_budget_transforms_all_and_tight_one_bounds_the_blob(no_slack):
    graph, opts = _options()
    weights = conv_budget.plan_budget(graph, 1.0).weight_bytes
    n_all, raw_all, bytes_all = _winograd_calls(None)
    n_none, raw_none, bytes_none = _winograd_calls(0.0)
    assert n_all == 3 and raw_all == 0  # every layer's stored transforms
    assert n_none == raw_none  # no room: Winograd only from the raw weights
    transformed = sum(max(b for _, b, _ in o[2]) - o[1] for o in opts.values())
    # the direct kernel's tap tables (int32, 9 per input channel) are all that differs
    assert transformed - 4 * 9 * (32 + 32 + 64) <= bytes_all - bytes_none <= transformed
    assert bytes_none <= 1.15 * weights + 64 * 1024  # packing only: a few rows of padding


def test_outputs_match_ort_at_any_budget(no_slack):
    model = _model()
    feeds = {"x": RNG.standard_normal((1, 32, 48, 48)).astype(np.float32)}
    want = ort_run(model, feeds)[0]
    for budget in (None, 0.0, 0.5):
        got = run_model(model, feeds, size_budget=budget)[0]
        # Winograd's rounding error scales with the sums' terms, not with each output
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_choose_drops_excluded_candidates_but_not_forced_ones():
    cands = [Candidate("winograd", (("m", 4),)), Candidate("winograd", (("m", 2),)),
             Candidate("direct")]
    sig = {"op": "Conv", "k": 1}
    key = __import__("json").dumps(sig, sort_keys=True, separators=(",", ":"))
    table = {"n1": (Candidate("winograd", (("m", 4),)),)}
    with restricting(table):
        assert excluded("n1", cands[0]) and not excluded("n1", cands[1])
        assert not excluded("n2", cands[0])
        with selecting(Selection(table={key: "winograd(m=4)"})) as sel:
            assert choose("n1", sig, cands, cands[2]) == cands[2]  # tuned label excluded
            assert cands[0] not in sel.seen[key].candidates
            assert choose("n2", sig, cands, cands[2]) == cands[0]
        with selecting(Selection(forced={"n1": "winograd(m=4)"})):
            assert choose("n1", sig, cands, cands[2]) == cands[0]  # a benchmark's force
    assert not excluded("n1", cands[0])


def test_negative_budget_is_an_error():
    with pytest.raises(CompileError, match="size budget"):
        lower(_model(), size_budget=-0.1)


def test_cli_size_budget_option():
    import argparse

    from monolib.cli import _size_budget

    assert _size_budget("none") == (None,) and _size_budget("0.3") == (0.3,)
    for bad in ("-1", "x", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="size-budget"):
            _size_budget(bad)
