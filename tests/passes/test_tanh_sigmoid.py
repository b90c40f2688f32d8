"""TanhPlusOneToSigmoid: ``1 + tanh(u)`` becomes ``2 sigmoid(2u)`` (and ``0.5 (1 +
tanh(u))`` becomes ``sigmoid(2u)``) in the tanh-GELU forms of JAX/TF and PyTorch, with
the same values (closer to exact where 1 + tanh cancels); look-alikes stay."""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model, requires_ops
from onnx import helper

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import TanhPlusOneToSigmoid, simplify
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run

OPS = ("Tanh", "Add", "Mul", "Sigmoid")
N = 257


def _gelu(form: str, one: float = 1.0, half: float = 0.5):
    """tanh-GELU of x: ``jax`` x * (half * (one + tanh(k x))); ``torch`` (half * x) *
    (tanh(k x) + one); ``plain`` just one + tanh(k x)."""
    inits = {
        "k": np.array(0.7978846, np.float32),
        "one": np.array(one, np.float32),
        "half": np.array(half, np.float32),
    }
    nodes = [
        helper.make_node("Mul", ["k", "x"], ["u"]),
        helper.make_node("Tanh", ["u"], ["t"]),
    ]
    if form == "jax":
        nodes += [
            helper.make_node("Add", ["one", "t"], ["g"]),
            helper.make_node("Mul", ["half", "g"], ["h"]),
            helper.make_node("Mul", ["x", "h"], ["y"]),
        ]
    elif form == "torch":
        nodes += [
            helper.make_node("Mul", ["half", "x"], ["hx"]),
            helper.make_node("Add", ["t", "one"], ["g"]),
            helper.make_node("Mul", ["hx", "g"], ["y"]),
        ]
    else:
        nodes.append(helper.make_node("Add", ["t", "one"], ["y"]))
    return make_model(nodes, [("x", F32, [N])], [("y", F32, [N])], inits)


def _x() -> np.ndarray:
    return np.concatenate(
        [np.linspace(-12, 12, N - 5), [0.0, -0.0, np.inf, -np.inf, np.nan]]
    ).astype(np.float32)


@requires_ops(*OPS)
@pytest.mark.parametrize("form, left", [("jax", {"Sigmoid": 1, "Mul": 3}),
                                        ("torch", {"Sigmoid": 1, "Mul": 5}),
                                        ("plain", {"Sigmoid": 1, "Mul": 3})])  # fmt: skip
def test_tanh_plus_one_becomes_sigmoid(form, left):
    model = _gelu(form)
    g = import_model(model)
    assert TanhPlusOneToSigmoid()(g).modified
    counts = g.op_counts()
    assert "Tanh" not in counts and "Add" not in counts
    assert {k: counts.get(k, 0) for k in left} == left, counts
    x = _x()
    got = evaluate(g, {"x": x})[0]
    # float64 of the same function, without 1 + tanh's cancellation:
    # 1 + tanh(u) = 2 / (1 + exp(-2u)), u rounded to float32 as in the graph
    u = (np.float32(0.7978846) * x).astype(np.float64)
    with np.errstate(all="ignore"):
        core = 2.0 / (1.0 + np.exp(-2.0 * u))
        exact = core if form == "plain" else 0.5 * x.astype(np.float64) * core
    fin = np.isfinite(exact) & (exact != 0)
    np.testing.assert_allclose(got[fin], exact[fin], rtol=1e-6)
    assert (np.isnan(got) == np.isnan(exact)).all()
    # ORT evaluates 1 + tanh(u) in float32 (its tanh within ~4 ulps of 1 near 1,
    # measured), so it agrees in absolute terms only, relative to 0.5 |x|
    want = ort_run(model, {"x": x})[0]
    scale = np.ones(N) if form == "plain" else 0.5 * np.abs(x.astype(np.float64))
    err = np.abs(got[fin] - want[fin])
    assert (err <= 8 * 2.0**-24 * scale[fin]).all()
    assert g.outputs[0].name == "y"


@requires_ops(*OPS)
@pytest.mark.parametrize("one, half", [(2.0, 0.5), (1.0, 0.25)])
def test_other_constants(one, half):
    g = import_model(_gelu("jax", one, half))
    changed = TanhPlusOneToSigmoid()(g).modified
    counts = g.op_counts()
    if one != 1.0:  # not 1 + tanh: left alone
        assert not changed and counts["Tanh"] == 1
    else:  # 1 + tanh is rewritten to 2 sigmoid(2u), the 0.25 scaling stays a Mul
        assert changed and "Tanh" not in counts and counts["Mul"] == 5


@requires_ops(*OPS)
def test_tanh_read_twice_is_left_alone():
    model = make_model(
        [
            helper.make_node("Tanh", ["x"], ["t"]),
            helper.make_node("Add", ["t", "one"], ["g"]),
            helper.make_node("Mul", ["g", "t"], ["y"]),
        ],
        [("x", F32, [N])],
        [("y", F32, [N])],
        {"one": np.array(1, np.float32)},
    )
    g = import_model(model)
    assert not TanhPlusOneToSigmoid()(g).modified


@requires_ops(*OPS)
def test_in_simplify():
    g = import_model(_gelu("jax"))
    simplify(g)
    assert "Tanh" not in g.op_counts() and g.op_counts()["Sigmoid"] == 1
