"""The static memory plan: reuse, persistence of inputs/outputs, no overlap of live values."""

from __future__ import annotations

import numpy as np
from codegen_helpers import GraphBuilder

from monolib.compiler.passes.fuse_elementwise import fuse_elementwise
from monolib.compiler.passes.plan_memory import ALIGN, align, plan_memory

rng = np.random.default_rng(1)


def matmul_chain(n: int, width: int = 64):
    b = GraphBuilder()
    t = b.input("x", (1, width))
    for i in range(n):
        t = b.op(
            "TMatMul", t, b.const(f"w{i}", rng.standard_normal((width, width)).astype(np.float32))
        )
    return b.graph(t)


def intervals(fusion, plan):
    """Per storage root: (offset, end, first op, last op) from the fused ops."""
    live = {}
    for t, f in enumerate(fusion.ops):
        if f.kind == "alias":
            continue
        for v in f.reads() + f.writes():
            r = plan.root(v)
            if r.is_const:
                continue
            off = plan.offset(v)
            lo, hi = live.get(r.uid, (t, t))[2:] if r.uid in live else (t, t)
            live[r.uid] = (off, off + align(max(r.nbytes, 1)), min(lo, t), max(hi, t))
    pinned = {plan.root(v).uid for v in [*fusion.inputs, *fusion.outputs]}
    n = len(fusion.ops)
    return {
        u: (o, e, 0 if u in pinned else a, n if u in pinned else z)
        for u, (o, e, a, z) in live.items()
    }


def assert_no_overlap(fusion, plan):
    iv = list(intervals(fusion, plan).values())
    iv += [(o, o + align(plan.scratch_sizes[t]), t, t) for t, o in plan.scratch.items()]
    for i, (o1, e1, a1, z1) in enumerate(iv):
        assert o1 % ALIGN == 0 and e1 <= plan.arena_bytes
        for o2, e2, a2, z2 in iv[i + 1 :]:
            if a1 <= z2 and a2 <= z1:  # live at the same time (inclusive)
                handover = (z1 == a2 or z2 == a1) and (o1, e1) == (o2, e2)
                in_place = handover and fusion.ops[max(a1, a2)].kind == "elementwise"
                assert in_place or e1 <= o2 or e2 <= o1, "live regions overlap"


def test_chain_of_ten_ops_reuses_buffers():
    g = matmul_chain(10)
    fusion = fuse_elementwise(g)
    plan = plan_memory(fusion)
    assert len(fusion.ops) == 10
    # input + output + two ping-pong intermediates, not 11 buffers
    assert plan.buffers <= 4
    assert plan.arena_bytes <= 4 * 256
    assert_no_overlap(fusion, plan)


def test_inputs_and_outputs_never_reused():
    b = GraphBuilder()
    x = b.input("x", (1, 32))
    a = b.op("TMatMul", x, b.const("w0", np.eye(32, dtype=np.float32)))
    mid = b.op(
        "TMatMul", a, b.const("w1", np.eye(32, dtype=np.float32))
    )  # graph output, also read later
    c = b.op("TMatMul", mid, b.const("w2", np.eye(32, dtype=np.float32)))
    d = b.op("TMatMul", c, b.const("w3", np.eye(32, dtype=np.float32)))
    g = b.graph(d, mid)
    fusion = fuse_elementwise(g)
    plan = plan_memory(fusion)
    assert_no_overlap(fusion, plan)
    pinned = {plan.offset(x), plan.offset(d), plan.offset(mid)}
    assert len(pinned) == 3
    for v in (a, c):
        assert plan.offset(v) not in pinned


def test_side_input_alive_across_fused_op_and_alias_extends_life():
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    s = b.op("TMatMul", x, b.const("w0", rng.standard_normal((8, 8)).astype(np.float32)))
    r = b.op("TReshape", s, shape=(16,))
    r2 = b.op("TReshape", r, shape=(2, 8))
    t = b.op("TMatMul", x, b.const("w1", rng.standard_normal((8, 8)).astype(np.float32)))
    t = b.op("TAdd", t, r2)  # side input: last use in this fused op
    u = b.op("TMatMul", t, b.const("w2", rng.standard_normal((8, 8)).astype(np.float32)))
    g = b.graph(u)
    fusion = fuse_elementwise(g)
    plan = plan_memory(fusion)
    assert [f.kind for f in fusion.ops] == ["op", "alias", "alias", "op", "op"]
    assert plan.offset(r) == plan.offset(r2) == plan.offset(s)
    assert plan.offset(t) != plan.offset(s)
    assert_no_overlap(fusion, plan)


def test_freed_blocks_are_merged_and_best_fit():
    from monolib.compiler.passes.plan_memory import _Allocator

    a = _Allocator()
    x, y, z = a.alloc(100), a.alloc(64), a.alloc(1000)
    assert (x, y, z) == (0, 128, 192)
    a.release(x, 100)
    a.release(y, 64)  # merged with x: one 192-byte block
    assert a.alloc(150) == 0
    a.release(0, 150)
    assert a.alloc(64) == 0  # best fit: the smallest block that holds it
    assert a.alloc(5000) == 192 + 1024  # grows past z


def test_elementwise_loop_writes_in_place_over_dying_input():
    from codegen_helpers import evaluate

    from monolib.compiler.build import lower
    from monolib.compiler.testing import run_c

    b = GraphBuilder()
    x = b.input("x", (1, 16))
    a = b.op(
        "TOpaque",
        b.op("TMatMul", x, b.const("w0", rng.standard_normal((16, 16)).astype(np.float32))),
    )
    c = b.op("TOpaque", x)
    s = b.op("TRelu", b.op("TAdd", a, c))  # a and c die here
    y = b.op("TMatMul", s, b.const("w2", rng.standard_normal((16, 16)).astype(np.float32)))
    g = b.graph(y)
    fusion = fuse_elementwise(g)
    plan = plan_memory(fusion)
    assert plan.offset(s) in (plan.offset(a), plan.offset(c))
    assert_no_overlap(fusion, plan)
    feeds = {"x": rng.standard_normal((1, 16)).astype(np.float32)}
    source, gj, params = lower(g)
    assert "restrict in" in source and "out[i0] = " in source
    np.testing.assert_allclose(
        run_c(source, gj, params, feeds)[0], evaluate(g, feeds)[0], rtol=1e-5
    )


def test_scratch_is_planned_into_dead_space():
    from monolib.compiler.codegen.c import generate, scratch_sizes

    g = matmul_chain(6, width=48)
    fusion = fuse_elementwise(g)
    sizes = scratch_sizes(fusion, plan_memory(fusion))
    assert sizes == {t: 192 for t in range(6)}  # TMatMul asks for N floats
    plan = plan_memory(fusion, sizes)
    assert set(plan.scratch) == set(range(6))
    assert_no_overlap(fusion, plan)
    _, gj, _ = generate(g, fusion, plan)
    assert gj["arena_bytes"] == plan.arena_bytes  # nothing appended after the plan
