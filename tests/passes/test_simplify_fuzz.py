"""Random chains of shape-only and identity-like ops: ``simplify`` (reshape-chain
collapsing, no-op removal) must keep the graph's meaning, checked against ONNX
Runtime; property-based with Hypothesis."""

from __future__ import annotations

import numpy as np
from frontend.onnx_util import F32, make_model, requires_ops
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from monolib.compiler.frontend import import_model
from monolib.compiler.passes import simplify
from monolib.compiler.passes.collapse_reshapes import is_reshape_like
from monolib.compiler.reference_eval import evaluate
from monolib.compiler.testing import ort_run

OPS = ("Unsqueeze", "Squeeze", "Reshape", "Transpose", "Flatten", "Relu", "Add", "Mul")


@st.composite
def chains(draw):
    """(input shape, steps, output shape): each step is (op, parameter), valid for the
    shape at that point."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=1, max_size=4)))
    cur, steps = list(shape), []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(OPS))
        if kind == "Unsqueeze" and len(cur) < 5:
            ax = draw(st.integers(0, len(cur)))
            cur.insert(ax, 1)
            steps.append((kind, ax))
        elif kind == "Squeeze" and 1 in cur and len(cur) > 1:
            ax = draw(st.sampled_from([i for i, d in enumerate(cur) if d == 1]))
            cur.pop(ax)
            steps.append((kind, ax))
        elif kind == "Reshape":
            cur = [int(np.prod(cur))] if draw(st.booleans()) else [*cur[::-1]]
            cur = cur if int(np.prod(cur)) == int(np.prod(shape)) else [int(np.prod(shape))]
            steps.append((kind, tuple(cur)))
        elif kind == "Transpose":
            perm = draw(st.permutations(range(len(cur))))
            cur = [cur[p] for p in perm]
            steps.append((kind, tuple(perm)))
        elif kind == "Flatten":
            ax = draw(st.integers(0, len(cur)))
            cur = [int(np.prod(cur[:ax])), int(np.prod(cur[ax:]))]
            steps.append((kind, ax))
        elif kind in ("Relu", "Add", "Mul"):
            steps.append((kind, None))
    return shape, steps, tuple(cur)


def _model(shape, steps, out_shape):
    nodes, inits, prev = [], {}, "x"
    for i, (kind, p) in enumerate(steps):
        out = f"t{i}"
        if kind in ("Unsqueeze", "Squeeze"):
            inits[f"ax{i}"] = np.array([p], np.int64)
            nodes.append(helper.make_node(kind, [prev, f"ax{i}"], [out]))
        elif kind == "Reshape":
            inits[f"s{i}"] = np.array(p, np.int64)
            nodes.append(helper.make_node(kind, [prev, f"s{i}"], [out]))
        elif kind == "Transpose":
            nodes.append(helper.make_node(kind, [prev], [out], perm=list(p)))
        elif kind == "Flatten":
            nodes.append(helper.make_node(kind, [prev], [out], axis=p))
        elif kind == "Relu":
            nodes.append(helper.make_node(kind, [prev], [out]))
        else:  # Add 0 / Mul 1: no-ops
            inits[f"c{i}"] = np.float32(0.0 if kind == "Add" else 1.0)
            nodes.append(helper.make_node(kind, [prev, f"c{i}"], [out]))
        prev = out
    nodes.append(helper.make_node("Neg", [prev], ["y"]))
    return make_model(nodes, [("x", F32, list(shape))], [("y", F32, list(out_shape))], inits)


@requires_ops(*OPS, "Neg")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_simplify_keeps_meaning_of_shape_chains(chain):
    shape, steps, out_shape = chain
    model = _model(shape, steps, out_shape)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 3
    want = ort_run(model, {"x": x})[0]
    g = import_model(model)
    simplify(g)
    got = evaluate(g, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    counts = g.op_counts()
    assert not {"Add", "Mul"} & set(counts), counts  # x + 0, x * 1: removed
    # at most one reshape-like node left between two nodes that compute something
    shaping = sum(is_reshape_like(n) for n in g.nodes)
    assert shaping <= 1 + len(g.nodes) - shaping - counts["Neg"], counts
