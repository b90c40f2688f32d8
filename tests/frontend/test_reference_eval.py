"""The reference interpreter on a small CNN, against ONNX Runtime, before and after
the pre-fusion passes."""

from __future__ import annotations

import numpy as np
from onnx import helper

from frontend.onnx_util import F32, make_model, requires_ops
from monolib.compiler.frontend import import_model
from monolib.compiler.passes import simplify
from monolib.compiler.reference_eval import evaluate, evaluate_all
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(7)


def _small_cnn():
    f = lambda *s: RNG.standard_normal(s).astype(np.float32) * 0.3
    inits = {
        "w1": f(8, 3, 3, 3),
        "b1": f(8),
        "s": RNG.uniform(0.5, 1.5, 8).astype(np.float32),
        "t": f(8),
        "m": f(8),
        "v": RNG.uniform(0.5, 1.5, 8).astype(np.float32),
        "w2": f(4, 2, 3, 3),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "s", "t", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c2"], group=4, pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
        helper.make_node("Sigmoid", ["g"], ["y"]),
    ]
    return make_model(nodes, [("x", F32, ["N", 3, 16, 20])], [("y", F32, ["N", 4, 1, 1])], inits)


@requires_ops("Conv", "BatchNormalization", "Relu", "MaxPool", "GlobalAveragePool", "Sigmoid")
def test_small_cnn_matches_ort_before_and_after_passes():
    model = _small_cnn()
    g = import_model(model, shapes={"x": (2, 3, 16, 20)})
    x = RNG.standard_normal((2, 3, 16, 20)).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    np.testing.assert_allclose(evaluate(g, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    env = evaluate_all(g, {"x": x})
    assert all(v.uid in env for n in g.nodes for v in n.outputs)
    simplify(g)
    assert "BatchNormalization" not in g.op_counts()
    np.testing.assert_allclose(evaluate(g, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


@requires_ops("Conv", "BatchNormalization", "Relu", "MaxPool", "GlobalAveragePool", "Sigmoid")
def test_first_divergence_finds_the_tampered_node():
    from monolib.compiler.reference_eval import first_divergence

    model = _small_cnn()
    g = import_model(model, shapes={"x": (1, 3, 16, 20)})
    x = RNG.standard_normal((1, 3, 16, 20)).astype(np.float32)
    assert first_divergence(model, g, {"x": x}) is None
    relu = next(n for n in g.nodes if n.op_type == "Relu")
    relu.op_type = "Sigmoid"  # a wrong op in the middle of the graph
    name, err = first_divergence(model, g, {"x": x})
    assert name == "r" and err > 0.1
