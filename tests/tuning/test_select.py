"""The choice among candidates (compiler/tuning/select.py, tuner.py) on synthetic cases:
a fake timer whose costs are known makes every decision deterministic."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.build import lower
from monolib.compiler.tuning.cache import TuningCache
from monolib.compiler.tuning.select import Candidate, Selection, choose, selecting
from monolib.compiler.tuning.tuner import pick, tune


def conv_model(x, w, group=1, strides=(1, 1), pads=(1, 1, 1, 1), seed=0):
    """One Conv (+ bias) then Relu, shapes inferred."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal(w).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(w[0]).astype(np.float32), "B"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", group=group,
                         strides=list(strides), pads=list(pads)),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return onnx.shape_inference.infer_shapes(m)


def seen_of(model):
    sel = Selection()
    with selecting(sel):
        lower(model)
    return sel.seen


def test_pick_fastest_and_threshold():
    assert pick({"a": 3.0, "b": 1.0, "c": 2.0}, "a") == "b"
    # the best is only 5% faster than the rule's: the rule is kept (noise margin)
    assert pick({"a": 1.0, "b": 0.95}, "a", threshold=0.08) == "a"
    assert pick({"a": 1.0, "b": 0.90}, "a", threshold=0.08) == "b"


def test_candidates_and_default_listed():
    """A 3x3 conv with enough channels: Winograd F(2)/F(4), direct and GEMM, the rule's
    Winograd among them; a depthwise one: both row tilings."""
    (s,) = seen_of(conv_model((1, 32, 24, 24), (32, 32, 3, 3))).values()
    labels = [c.label for c in s.candidates]
    assert {"winograd(m=2)", "winograd(m=4)", "direct", "gemm"} <= set(labels)
    assert s.default.label in labels and s.default.algo == "winograd"
    assert s.sig["epilogue"] == "fused" and s.sig["group"] == 1
    (s,) = seen_of(conv_model((1, 16, 12, 12), (16, 1, 3, 3), group=16)).values()
    assert {"depthwise(rows=3)", "depthwise(rows=4)"} <= {c.label for c in s.candidates}


def test_tuner_picks_measured_faster(tuning_dir):
    """Known costs: the tuner picks the cheapest per signature and the next compile
    emits it (its C differs from the rule's)."""
    model = conv_model((1, 32, 24, 24), (32, 32, 3, 3))
    seen = seen_of(model)
    cost = {"winograd(m=2)": 5.0, "winograd(m=4)": 4.0, "direct": 9.0, "gemm": 1.0}
    calls = []

    def timer(sig, cands):
        calls.append(sig)
        return {c.label: cost.get(c.label, 7.0) for c in cands}  # other tilings: 7

    cache = TuningCache()
    report = tune(seen, cache, timer=timer)
    assert report.measured == 1 and len(calls) == 1
    (entry,) = cache.entries.values()
    assert entry["choice"] == "gemm" and entry["default"] == "winograd(m=4)"
    assert report.lines()[0].startswith("  conv: gemm (rule winograd(m=4); ms: gemm 1000.000")
    assert cache.path.exists()
    # a second tune finds it cached: nothing measured
    again = tune(seen, TuningCache(), timer=timer)
    assert again.cached == 1 and again.measured == 0 and len(calls) == 1
    src_rule, _, _ = lower(model)
    with selecting(Selection(table=TuningCache().choices())):
        src_tuned, _, _ = lower(model)
    assert "ml_winograd(" in src_rule and "ml_winograd(" not in src_tuned


def test_rule_kept_when_not_faster():
    seen = seen_of(conv_model((1, 32, 24, 24), (32, 32, 3, 3)))
    cache = TuningCache()
    tune(seen, cache, timer=lambda sig, cands: {c.label: 1.0 for c in cands})
    (entry,) = cache.entries.values()
    assert entry["choice"] == entry["default"] == "winograd(m=4)"


def test_budget_stops_measuring():
    seen = {**seen_of(conv_model((1, 32, 24, 24), (32, 32, 3, 3))),
            **seen_of(conv_model((1, 16, 12, 12), (16, 1, 3, 3), group=16))}
    ticks = iter(range(0, 1000, 3))  # each clock read advances 3 s
    report = tune(seen, TuningCache(), timer=lambda s, c: {x.label: 1.0 for x in c},
                  budget_s=5.0, clock=lambda: next(ticks))
    assert report.measured == 1 and report.skipped == 1


def test_choose_forced_table_and_stale():
    a, b = Candidate("gemm"), Candidate("winograd", (("m", 4),))
    sig = {"op": "Conv", "x": [1]}
    assert choose("n", sig, [a, b], a) is a  # no Selection: the rule
    from monolib.compiler.tuning.select import signature_key

    key = signature_key(sig)
    with selecting(Selection(table={key: "winograd(m=4)"})):
        assert choose("n", sig, [a, b], a) is b
    with selecting(Selection(table={key: "winograd(m=4)"}, forced={"n": "gemm"})):
        assert choose("n", sig, [a, b], a) is a
    with selecting(Selection(table={key: "winograd(m=9)"})):  # stale label: rule kept
        assert choose("n", sig, [a, b], a) is a


def test_default_emission_unchanged():
    """An empty Selection (no cache) emits the very C of no Selection at all."""
    model = conv_model((2, 32, 6, 6), (64, 32, 3, 3))
    plain = lower(model)[0]
    with selecting(Selection()):
        assert lower(model)[0] == plain
