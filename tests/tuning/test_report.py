"""compiler/tuning/report.py: every Conv/Gemm node's choice and why, logged while a
compile emits exactly what a plain compile emits."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.build import lower
from monolib.compiler.tuning.cache import TuningCache
from monolib.compiler.tuning.report import explain_rule, recording
from monolib.compiler.tuning.select import Selection, selecting


def three_convs():
    """conv a and conv b share a signature (3x3, 16 -> 16 on 12x12, Relu fused); conv c
    is a 1x1 (a single way); then a Gemm with a run-time A."""
    rng = np.random.default_rng(0)
    w = lambda name, shape: numpy_helper.from_array(
        (rng.standard_normal(shape) * 0.1).astype(np.float32), name)
    inits = [w("Wa", (16, 16, 3, 3)), w("Wb", (16, 16, 3, 3)), w("Wc", (8, 16, 1, 1)),
             w("G", (8 * 12 * 12, 10))]
    nodes = [
        helper.make_node("Conv", ["x", "Wa"], ["a"], name="a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "Wb"], ["b"], name="b", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node("Conv", ["br", "Wc"], ["c"], name="c"),
        helper.make_node("Flatten", ["c"], ["f"]),
        helper.make_node("Gemm", ["f", "G"], ["y"], name="fc"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     (1, 16, 12, 12))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return onnx.shape_inference.infer_shapes(model)


def test_every_node_listed_with_rule_reason(tuning_dir):
    model = three_convs()
    with recording() as choices:
        lower(model)
    by_node = {c.node: c for c in choices}
    assert set(by_node) == {"a", "b", "c", "fc"}  # b shares a's signature: listed too
    a, b, c = by_node["a"], by_node["b"], by_node["c"]
    assert a.key == b.key and a.choice == b.choice == a.rule and a.source == "rule"
    assert len(a.candidates) > 1
    assert a.why == f"rule, not tuned on this CPU: {explain_rule(json.loads(a.key), a.rule)}"
    assert c.choice == c.rule and c.source == "rule" and c.key != a.key
    assert c.why.endswith(explain_rule(json.loads(c.key), c.rule))
    assert by_node["fc"].op == "Gemm" and by_node["fc"].choice == "gemm(pack_a=0)"


def test_measured_choice_and_same_code(tuning_dir):
    """A cached measurement for a's signature is what a and b get, with its times; the
    C emitted while recording is the C a plain compile with that cache emits."""
    model = three_convs()
    with recording() as first:
        lower(model)
    a = next(c for c in first if c.node == "a")
    other = next(lbl for lbl in a.candidates if lbl != a.rule)
    cache = TuningCache()
    cache.put(a.key, other, a.rule, {other: 1.0, a.rule: 2.5})
    cache.save()
    with selecting(Selection(table=TuningCache().choices())):
        plain = lower(model)[0]
    with recording() as choices:
        recorded = lower(model)[0]
    assert recorded == plain
    got = {c.node: c for c in choices}
    for name in ("a", "b"):
        assert got[name].choice == other and got[name].source == "measured"
        assert got[name].why == f"measured: {other} 1.000 ms vs rule {a.rule} 2.500 ms"
    assert got["c"].source == "rule"
    # and through monolib.compile (its own selection step keeps the active one)
    with recording() as via_compile:
        monolib.compile(model)
    assert {c.node: c.choice for c in via_compile}["a"] == other


def test_forced_and_rule_kept_texts(tuning_dir):
    model = three_convs()
    with recording() as first:
        lower(model)
    a = next(c for c in first if c.node == "a")
    cache = TuningCache()
    cache.put(a.key, a.rule, a.rule, {a.rule: 1.0, "gemm": 1.05})
    forced = next(lbl for lbl in a.candidates if lbl != a.rule)
    with recording(cache, forced={"b": forced}) as choices:
        lower(model)
    got = {c.node: c for c in choices}
    assert got["a"].why == f"measured: rule kept ({a.rule} 1.000 ms; best other gemm 1.050 ms)"
    assert got["b"].choice == forced and got["b"].source == "forced"


def test_explain_rule_texts():
    sig = {"op": "Conv", "attrs": {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0] * 4}}
    assert explain_rule(sig, "gemm").startswith("GEMM on the input itself")
    sig["attrs"]["strides"] = [2, 2]
    assert explain_rule(sig, "gemm").startswith("implicit-im2col GEMM")
    assert explain_rule(sig, "depthwise(rows=4)") == "group == C_in == C_out"
    assert explain_rule({"op": "Gemm"}, "gemm(pack_a=1)").startswith("run-time A packed")
