"""FoldBatchNorm on random convolutions (Conv/ConvTranspose, groups, strides, pads,
with and without bias) followed by a BatchNormalization or per-channel Mul/Add/Sub
constants of random broadcast shapes: the folded graph equals ONNX Runtime on the
original model; property-based with Hypothesis."""

from __future__ import annotations

import numpy as np
from frontend.onnx_util import F32, make_model, requires_ops
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import FoldBatchNorm
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run


@st.composite
def cases(draw):
    transpose = draw(st.booleans())
    group = draw(st.sampled_from([1, 2]))
    cin = group * draw(st.integers(1, 3))
    cout = group * draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    stride = draw(st.integers(1, 2))
    pad = draw(st.integers(0, k - 1))
    bias = draw(st.booleans())
    tail = draw(st.lists(st.sampled_from(["BN", "Mul", "Add", "Sub"]), min_size=1, max_size=3))
    const_rank = draw(st.sampled_from([1, 3, 4]))  # (C,) only for BN; (C,1,1); (1,C,1,1)
    seed = draw(st.integers(0, 2**16))
    return transpose, group, cin, cout, k, stride, pad, bias, tail, const_rank, seed


def _model(transpose, group, cin, cout, k, stride, pad, bias, tail, const_rank, seed):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    w_shape = (cin, cout // group, k, k) if transpose else (cout, cin // group, k, k)
    inits = {"w": f(*w_shape)}
    conv_in = ["x", "w"]
    if bias:
        inits["b"] = f(cout)
        conv_in.append("b")
    op = "ConvTranspose" if transpose else "Conv"
    nodes = [
        helper.make_node(op, conv_in, ["t0"], group=group, strides=[stride, stride], pads=[pad] * 4)
    ]
    for i, kind in enumerate(tail):
        prev, out = f"t{i}", f"t{i + 1}"
        if kind == "BN":
            for p, v in zip(
                "sbmv", (rng.uniform(0.5, 2, cout), f(cout), f(cout), rng.uniform(0.2, 2, cout))
            ):
                inits[f"{p}{i}"] = np.asarray(v, np.float32)
            nodes.append(
                helper.make_node(
                    "BatchNormalization", [prev, f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [out]
                )
            )
        else:
            shape = {1: (cout, 1, 1), 3: (cout, 1, 1), 4: (1, cout, 1, 1)}[const_rank]
            inits[f"c{i}"] = f(*shape)
            nodes.append(helper.make_node(kind, [prev, f"c{i}"], [out]))
    nodes.append(helper.make_node("Identity", [f"t{len(tail)}"], ["y"]))
    x_shape = [1, cin, 5, 6]
    if transpose:
        spatial = [(d - 1) * stride - 2 * pad + k for d in x_shape[2:]]
    else:
        spatial = [(d + 2 * pad - k) // stride + 1 for d in x_shape[2:]]
    y_shape = [1, cout, *spatial]
    return make_model(nodes, [("x", F32, x_shape)], [("y", F32, y_shape)], inits), x_shape


@requires_ops("Conv", "ConvTranspose", "BatchNormalization", "Mul", "Add", "Sub")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_folding_keeps_meaning(case):
    model, x_shape = _model(*case)
    x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
    want = ort_run(model, {"x": x})[0]
    g = import_model(model)
    assert FoldBatchNorm()(g).modified
    assert set(g.op_counts()) == {"ConvTranspose" if case[0] else "Conv"}
    got = evaluate(g, {"x": x})[0]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)
