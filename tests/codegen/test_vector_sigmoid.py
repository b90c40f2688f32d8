"""kernels/vmath.h's ml_logisticf (float32 Sigmoid, and the SiLU epilogues of conv
models): ml_expf's polynomial with one power-of-two scaling, so the same bits as
``1 / (1 + exp(-x))`` written out with ml_expf wherever the result is a normal float."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.build import lower
from monolib.compiler.testing import run_model

F32 = TensorProto.FLOAT
RNG = np.random.default_rng(3)


def test_sigmoid_is_the_exp_form_bit_for_bit():
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 87.0, 87.01, -87.0, -88.3, -88.38,
                      -88.39, -88.7, -88.75, -89.0, -104.0, 1e-45, -1e-45], np.float32)
    x = np.concatenate([edges, np.linspace(-95, 95, 40_001, dtype=np.float32),
                        RNG.standard_normal(30_001).astype(np.float32) * 6])
    n = x.size
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        # the same formula through Exp: ml_expf, two scalings
        helper.make_node("Neg", ["x"], ["nx"]), helper.make_node("Exp", ["nx"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["d"]), helper.make_node("Div", ["one", "d"], ["r"]),
    ]
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", F32, [n])],
        [helper.make_tensor_value_info(v, F32, [n]) for v in ("s", "r")], [one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    ops = lower(model)[0].split("/* ---- threadpool.h ---- */")[1]
    assert "ml_logisticf(" in ops and "ml_expf(" in ops
    s, r = run_model(model, {"x": x})
    normal = r >= np.finfo(np.float32).tiny
    assert normal.sum() > 60_000
    assert (s[normal].view(np.uint32) == r[normal].view(np.uint32)).all()
    # below FLT_MIN (x < -87.3): 0 or a subnormal, within FLT_MIN of each other
    tiny = ~normal & ~np.isnan(x)
    assert np.abs(s[tiny] - r[tiny]).max() < np.finfo(np.float32).tiny
    assert (s[x < -88.4] == 0).all() and (s[x > 87] == 1).all()
    assert np.isnan(s[np.isnan(x)]).all()
    assert s[x == np.inf][0] == 1 and s[x == -np.inf][0] == 0
