"""The static memory plan: reuse, persistence of inputs/outputs, no overlap of live values."""

from __future__ import annotations

import numpy as np
from codegen_helpers import GraphBuilder

from monolib.compiler.passes.fuse_elementwise import fuse_elementwise
from monolib.compiler.passes.plan_memory import ALIGN, plan_memory

rng = np.random.default_rng(1)


def matmul_chain(n: int, width: int = 64):
    b = GraphBuilder()
    t = b.input("x", (1, width))
    for i in range(n):
        t = b.op(
            "TMatMul", t, b.const(f"w{i}", rng.standard_normal((width, width)).astype(np.float32))
        )
    return b.graph(t)


class Storage:
    """Independent model of where values live: alias roots and concat containers."""

    def __init__(self, fusion):
        self.alias = {f.out.uid: f.src for f in fusion.ops if f.kind == "alias"}
        self.container = {}
        self.members = {}
        for f in fusion.ops:
            if f.kind == "concat":
                for v in f.anchor.inputs:
                    self.container[v.uid] = f.out
                self.members[self.root(f.out).uid] = [self.root(v) for v in f.anchor.inputs]

    def root(self, v):
        while v.uid in self.alias:
            v = self.alias[v.uid]
        return v

    def chain(self, v):
        """v's root, then the roots of the concats holding it (innermost first)."""
        out = [self.root(v)]
        while out[-1].uid in self.container:
            out.append(self.root(self.container[out[-1].uid]))
        return out

    def inside(self, r):
        """Root r and every root stored inside it (concat members, recursively)."""
        out = [r]
        for m in self.members.get(r.uid, []):
            out += self.inside(m)
        return out


def assert_no_overlap(fusion, plan):
    """Simulate the run: no op (nor its scratch) writes over bytes some other value
    still needs, except an elementwise loop over an input that dies in it."""
    st = Storage(fusion)
    forever = len(fusion.ops) + 1
    need, written = {}, {}
    for v in [*fusion.inputs, *fusion.outputs]:
        for r in st.inside(st.root(v)):
            need[r.uid] = forever
    for v in fusion.inputs:
        written[st.root(v).uid] = -1
    for t, f in enumerate(fusion.ops):
        if f.has_code:
            for u in f.reads():
                for r in st.inside(st.root(u)):
                    if not r.is_const:
                        need[r.uid] = max(need.get(r.uid, t), t)

    def span(v):
        o = plan.offset(v)
        assert o % ALIGN == 0 and o + v.nbytes <= plan.arena_bytes
        return o, o + v.nbytes

    roots = {}
    for t, f in enumerate(fusion.ops):
        if not f.has_code:
            continue
        writes = [(span(w), w) for w in f.writes()]
        if t in plan.scratch:
            o = plan.scratch[t]
            writes.append(((o, o + plan.scratch_sizes[t]), None))
        read_roots = {st.root(u).uid for u in f.reads()}
        for (wo, we), w in writes:
            for uid, r in roots.items():
                if written.get(uid, forever) >= t or need.get(uid, -1) < t:
                    continue
                ro, re = span(r)
                if we <= ro or re <= wo:
                    continue
                if w is not None and any(c.uid == uid for c in st.chain(w)):
                    continue  # writing a member of a concat being assembled
                handover = (
                    f.kind == "elementwise"
                    and need[uid] == t
                    and uid in read_roots
                    and (wo, we) == (ro, re)
                )
                assert handover, f"op {t} ({f.name}) overwrites live {r.name}"
        for (_, _), w in writes:
            if w is not None:
                r = st.root(w)
                roots[r.uid] = r
                written.setdefault(r.uid, t)
        for v in fusion.inputs:
            roots[st.root(v).uid] = st.root(v)


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
    from monolib.compiler.backends.c.generate import generate, scratch_sizes

    g = matmul_chain(6, width=48)
    fusion = fuse_elementwise(g)
    sizes = scratch_sizes(fusion, plan_memory(fusion))
    assert sizes == {t: 192 for t in range(6)}  # TMatMul asks for N floats
    plan = plan_memory(fusion, sizes)
    assert set(plan.scratch) == set(range(6))
    assert_no_overlap(fusion, plan)
    _, gj, _ = generate(g, fusion, plan)
    assert gj["arena_bytes"] == plan.arena_bytes  # nothing appended after the plan


def test_concat_inputs_are_computed_in_place():
    from codegen_helpers import evaluate

    from monolib.compiler.build import lower
    from monolib.compiler.testing import run_c

    b = GraphBuilder()
    x = b.input("x", (1, 2, 8))
    w = b.const("w", rng.standard_normal((8, 8)).astype(np.float32))
    a = b.op("TMatMul", x, w)
    c = b.op("TOpaque", x)
    d = b.op("TRelu", b.op("TAdd", x, b.const("one", np.float32(1))))
    inner = b.op("Concat", a, c, axis=1, onnx=True)  # [1, 4, 8]
    outer = b.op("Concat", inner, d, axis=-2, onnx=True)  # nested: [1, 6, 8]
    y = b.op("TMatMul", outer, w)
    side = b.op("Concat", x, a, axis=2, onnx=True)  # x is a graph input: a real copy
    g = b.graph(y, side)
    fusion = fuse_elementwise(g)
    assert [f.kind for f in fusion.ops].count("concat") == 2
    plan = plan_memory(fusion)
    assert_no_overlap(fusion, plan)
    base = plan.offset(outer)
    assert [plan.offset(v) - base for v in (inner, a, c, d)] == [0, 0, 64, 128]
    feeds = {"x": rng.standard_normal((1, 2, 8)).astype(np.float32)}
    _, gj, _ = lower(g)
    assert [n["op"] for n in gj["nodes"]].count("Concat") == 1  # only the one with x
    source, gj, params = lower(g)
    for got, want in zip(run_c(source, gj, params, feeds), evaluate(g, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_concat_not_in_place_when_blocks_are_strided_or_misaligned():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    a, c = b.op("TOpaque", x), b.op("TRelu", x)
    strided = b.op("Concat", a, c, axis=1, onnx=True)  # dim 0 is 2: interleaved blocks
    g = b.graph(strided)
    assert "concat" not in [f.kind for f in fuse_elementwise(g).ops]
    b = GraphBuilder()
    x = b.input("x", (3,))
    odd = b.op("Concat", b.op("TOpaque", x), b.op("TRelu", x), axis=0, onnx=True)
    g = b.graph(odd)  # 12-byte blocks would start off a 64-byte boundary
    assert "concat" not in [f.kind for f in fuse_elementwise(g).ops]
