"""Random graphs of test ops (elementwise DAGs with broadcasts, epilogue anchors,
aliases, fusion barriers, repeated and input outputs) against the NumPy references,
with the memory-plan invariants checked on each."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import GraphBuilder, evaluate
from test_plan_memory import assert_no_overlap

from monolib.compiler.build import lower
from monolib.compiler.passes.fuse_elementwise import fuse_elementwise
from monolib.compiler.passes.plan_memory import plan_memory
from monolib.compiler.testing import run_c

SHAPE = (2, 4, 8)  # 256 bytes: concats along axis 0 keep members 64-byte aligned
SIDE_SHAPES = [(8,), (4, 1), (2, 1, 1), (1,), SHAPE, (2, 1, 8), ()]


def random_graph(seed: int):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"random{seed}")
    pool = [b.input("x", SHAPE)]
    feeds = {"x": rng.standard_normal(SHAPE).astype(np.float32)}
    n_side = 0

    def side():
        nonlocal n_side
        shape = SIDE_SHAPES[rng.integers(len(SIDE_SHAPES))]
        data = rng.standard_normal(shape).astype(np.float32)
        n_side += 1
        if rng.random() < 0.5:
            return b.const(f"c{n_side}", data)
        feeds[f"s{n_side}"] = data
        return b.input(f"s{n_side}", shape)

    extra = []  # concat results: graph outputs, possibly through one more op
    for _ in range(int(rng.integers(4, 12))):
        v = pool[-1] if rng.random() < 0.6 else pool[rng.integers(len(pool))]
        kind = rng.integers(8)
        if kind == 7:
            w = pool[rng.integers(len(pool))]
            if rng.random() < 0.6:  # fresh members: computed in place inside the concat
                v, w = (
                    b.op("TOpaque", v),
                    b.op("TMatMul", w, b.const(f"k{len(pool)}", np.eye(8, dtype=np.float32))),
                )
            c = b.op("Concat", v, w, axis=int(rng.integers(-3, 3)), onnx=True) if w is not v else v
            extra.append(b.op("TRelu", c) if rng.random() < 0.5 else c)
            continue
        if kind == 0:
            out = b.op("TRelu", v)
        elif kind in (1, 2, 3):
            other = side() if rng.random() < 0.5 else pool[rng.integers(len(pool))]
            op = ["TAdd", "TMul", "TSub"][kind - 1]
            out = b.op(op, v, other) if rng.random() < 0.5 else b.op(op, other, v)
        elif kind == 4:
            w = b.const(f"w{len(pool)}", (rng.standard_normal((8, 8)) / 3).astype(np.float32))
            out = b.op("TMatMul", v, w)
        elif kind == 5:
            out = b.op("TReshape", b.op("TReshape", v, shape=(8, 8)), shape=SHAPE)
        else:
            out = b.op("TOpaque", v)
        pool.append(out)
    outs = [pool[-1], *extra]
    for _ in range(int(rng.integers(0, 3))):
        outs.append(pool[rng.integers(len(pool))])
    return b.graph(*outs), feeds


@pytest.mark.parametrize("seed", range(30))
def test_random_graph_matches_reference(seed):
    graph, feeds = random_graph(seed)
    want = evaluate(graph, feeds)
    fusion = fuse_elementwise(graph)
    assert_no_overlap(fusion, plan_memory(fusion))
    source, gj, params = lower(graph)
    got = run_c(source, gj, params, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    again = run_c(source, gj, params, feeds)
    for g, a in zip(got, again):
        np.testing.assert_array_equal(g, a)
