"""The C generator end to end on hand-built graphs of test ops (codegen_helpers.py):
generate, build with gcc, run with ctypes, compare with the NumPy references."""

from __future__ import annotations

import numpy as np
import pytest
from codegen_helpers import GraphBuilder, evaluate

from monolib.compiler.build import lower
from monolib.compiler.passes.fuse_elementwise import fuse_elementwise
from monolib.compiler.testing import run_c

rng = np.random.default_rng(0)


def run(graph, feeds):
    source, graph_json, params = lower(graph)
    return run_c(source, graph_json, params, feeds), source, graph_json


def check(graph, feeds, rtol=1e-6):
    want = evaluate(graph, feeds)
    got, source, gj = run(graph, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)
    return source, gj


def test_elementwise_chain_with_broadcasts_is_one_loop():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4, 5))
    y = b.input("y", (3, 1, 5))
    t = b.op("TAdd", x, y)
    t = b.op("TMul", t, b.const("scale", np.float32(0.5)))
    t = b.op("TSub", b.const("bias", rng.standard_normal((4, 1)).astype(np.float32)), t)
    t = b.op("TRelu", t)
    g = b.graph(t)
    feeds = {
        "x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
        "y": rng.standard_normal((3, 1, 5)).astype(np.float32),
    }
    source, gj = check(g, feeds)
    assert len(gj["nodes"]) == 1
    assert gj["nodes"][0]["op"] == "TAdd" and gj["nodes"][0]["fused"] == ["TMul", "TSub", "TRelu"]
    assert "0.5f" in source  # the scalar constant is a literal
    assert [p["name"] for p in gj["params"]] == ["bias"]


def test_chain_is_a_dag_and_stops_at_outside_readers():
    b = GraphBuilder()
    x = b.input("x", (8,))
    r = b.op("TRelu", x)
    u = b.op("TAdd", r, r)  # same value at two positions
    v = b.op("TMul", u, x)
    w = b.op("TSub", v, u)  # u read by two group nodes: still one op
    o = b.op("TMul", w, w)
    p = b.op(
        "TRelu",
        b.op(
            "TMatMul", b.op("TReshape", w, shape=(1, 8)), b.const("m", np.eye(8, dtype=np.float32))
        ),
    )
    g = b.graph(o, p)  # w is read by TMul and, outside, by the reshape -> the group ends at w
    _, gj = check(g, {"x": rng.standard_normal(8).astype(np.float32)})
    assert [n["op"] for n in gj["nodes"]] == ["TRelu", "TMul", "TMatMul"]
    assert gj["nodes"][0]["fused"] == ["TAdd", "TMul", "TSub"]


def test_dag_epilogue_on_anchor_output_read_twice():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t = b.op("TMatMul", x, b.const("w", rng.standard_normal((4, 5)).astype(np.float32)))
    h = b.op("TRelu", b.op("TAdd", t, b.const("three", np.float32(3))))
    y = b.op("TMul", t, h)  # t * relu(t + 3): t feeds two group nodes
    g = b.graph(y)
    _, gj = check(g, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)}, rtol=1e-5)
    assert [n["op"] for n in gj["nodes"]] == ["TMatMul"]
    assert gj["nodes"][0]["fused"] == ["TAdd", "TRelu", "TMul"]


def test_dtype_changing_chain_and_scalar_output():
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    gt = b.op("TGreater", b.op("TRelu", x), b.const("thr", np.float32(0.25)))
    s = b.op("TAdd", b.input("p", ()), b.const("one", np.float32(1)))
    g = b.graph(gt, s)
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32), "p": np.array(2.5, np.float32)}
    _, gj = check(g, feeds)
    assert gj["outputs"][0]["dtype"] == "bool"


def test_matmul_anchor_with_tile_epilogue():
    b = GraphBuilder()
    x = b.input("x", (2, 5, 6))
    w = b.const("w", rng.standard_normal((6, 7)).astype(np.float32))
    res = b.input("res", (2, 5, 7))
    t = b.op("TMatMul", x, w)
    t = b.op("TAdd", t, b.const("bias", rng.standard_normal(7).astype(np.float32)))
    t = b.op("TAdd", res, t)  # chain value at position 1
    t = b.op("TMul", t, b.const("rowscale", rng.standard_normal((5, 1)).astype(np.float32)))
    t = b.op("TRelu", t)
    g = b.graph(t)
    feeds = {
        "x": rng.standard_normal((2, 5, 6)).astype(np.float32),
        "res": rng.standard_normal((2, 5, 7)).astype(np.float32),
    }
    source, gj = check(g, feeds, rtol=1e-5)
    assert len(gj["nodes"]) == 1 and gj["nodes"][0]["fused"] == ["TAdd", "TAdd", "TMul", "TRelu"]
    assert "static void epi_" in source
    assert gj["params"][0]["name"].endswith(".wt")  # packed weights via ctx.param


def test_tile_epilogue_on_single_column_output():
    b = GraphBuilder()
    x = b.input("x", (2, 5, 6))
    t = b.op("TMatMul", x, b.const("w", rng.standard_normal((6, 1)).astype(np.float32)))
    t = b.op("TAdd", t, b.const("bias", rng.standard_normal((5, 1)).astype(np.float32)))
    t = b.op("TMul", t, b.input("s", (2, 5, 1)))
    t = b.op("TRelu", b.op("TSub", t, b.input("u", (2, 1, 1))))
    g = b.graph(t)
    feeds = {
        "x": rng.standard_normal((2, 5, 6)).astype(np.float32),
        "s": rng.standard_normal((2, 5, 1)).astype(np.float32),
        "u": rng.standard_normal((2, 1, 1)).astype(np.float32),
    }
    source, gj = check(g, feeds, rtol=1e-5)
    assert gj["nodes"][0]["fused"] == ["TAdd", "TMul", "TSub", "TRelu"]
    assert "const float x = out[m];" in source


def test_side_input_not_fitting_groups_is_not_fused():
    b = GraphBuilder()
    x = b.input("x", (2, 5, 6))
    t = b.op("TMatMul", x, b.const("w", rng.standard_normal((6, 4)).astype(np.float32)))
    # Broadcast over M but full over B and N: fits. Then [5,4] over B: fits.
    t = b.op("TAdd", t, b.input("full_bn", (2, 1, 4)))
    # A [2,5,1]-vs-[5,4] mix that is partial inside no group still fits; a transposed
    # layout cannot: [4,5] -> reshaped view is not broadcastable, so use a 4-D case.
    g = b.graph(t)
    feeds = {
        "x": rng.standard_normal((2, 5, 6)).astype(np.float32),
        "full_bn": rng.standard_normal((2, 1, 4)).astype(np.float32),
    }
    _, gj = check(g, feeds, rtol=1e-5)
    assert gj["nodes"][0]["fused"] == ["TAdd"]

    b = GraphBuilder()
    x = b.input("x", (2, 3, 4, 6))
    # groups of TMatMul on a rank-4 output: B=[0,1], M=[2], N=[3]; a side input full on
    # dim 0 and broadcast on dim 1 splits group B -> cannot join the epilogue.
    t = b.op("TMatMul", x, b.const("w", rng.standard_normal((6, 4)).astype(np.float32)))
    t = b.op("TAdd", t, b.input("half_b", (2, 1, 1, 4)))
    g = b.graph(t)
    feeds = {
        "x": rng.standard_normal((2, 3, 4, 6)).astype(np.float32),
        "half_b": rng.standard_normal((2, 1, 1, 4)).astype(np.float32),
    }
    _, gj = check(g, feeds, rtol=1e-5)
    assert [n["op"] for n in gj["nodes"]] == ["TMatMul", "TAdd"]


def test_output_expr_epilogue_and_ignored_epilogue():
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    t = b.op("TScale", x, alpha=3.0)
    t = b.op("TAdd", t, b.input("c", (3, 1)))
    t = b.op("TRelu", t)
    n = b.op("TNegNoEpi", x)
    n = b.op("TMul", n, b.const("k", rng.standard_normal((3, 4)).astype(np.float32)))
    g = b.graph(t, n)
    feeds = {
        "x": rng.standard_normal((3, 4)).astype(np.float32),
        "c": rng.standard_normal((3, 1)).astype(np.float32),
    }
    source, gj = check(g, feeds)
    assert [len(n["fused"]) for n in gj["nodes"]] == [2, 1]
    assert "epv_" in source


def test_alias_shares_storage_and_outputs_get_copies():
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    r = b.op("TReshape", x, shape=(3, 4))  # alias of an input, graph output -> copy
    t = b.op("TRelu", x)
    v = b.op("TReshape", t, shape=(12,))  # alias of an intermediate
    u = b.op("TAdd", v, b.const("c", np.arange(12, dtype=np.float32)))
    k = b.const("kout", np.arange(3, dtype=np.int64))  # constant output -> copy
    g = b.graph(r, u, k, x, u)  # an input as output, and the same output twice
    feeds = {"x": rng.standard_normal((2, 6)).astype(np.float32)}
    _, gj = check(g, feeds)
    offs = [o["offset"] for o in gj["outputs"]] + [i["offset"] for i in gj["inputs"]]
    assert len(set(offs)) == len(offs)  # every output owns its region
    assert sum(n["op"] == "Copy" for n in gj["nodes"]) == 4
    assert "TReshape" not in [n["op"] for n in gj["nodes"]]


def test_run_twice_same_result_and_run_op():
    from monolib.compiler.testing import aligned_empty, build_c

    b = GraphBuilder()
    t = b.input("x", (1, 64))
    for i in range(4):
        w = b.const(f"w{i}", rng.standard_normal((64, 64)).astype(np.float32) / 8)
        t = b.op("TRelu", b.op("TMatMul", t, w))
    g = b.graph(t)
    feeds = {"x": rng.standard_normal((1, 64)).astype(np.float32)}
    source, gj, params = lower(g)
    first = run_c(source, gj, params, feeds)
    second = run_c(source, gj, params, feeds)
    np.testing.assert_array_equal(first[0], second[0])
    dll = build_c(source)
    assert dll.monolib_num_ops() == len(gj["nodes"]) == 4
    assert dll.monolib_run_op(99, None, None) == -1
    arena = aligned_empty(gj["arena_bytes"])
    blob = aligned_empty(max(params.nbytes, 64))
    blob[: params.nbytes] = params
    off = gj["inputs"][0]["offset"]
    arena[off : off + 256] = np.frombuffer(feeds["x"].tobytes(), np.uint8)
    for i in range(dll.monolib_num_ops()):
        assert dll.monolib_run_op(i, blob.ctypes.data, arena.ctypes.data) == 0
    o = gj["outputs"][0]["offset"]
    np.testing.assert_array_equal(
        np.frombuffer(arena[o : o + 256].tobytes(), np.float32), first[0][0]
    )


def test_fusion_of_graph_without_nodes():
    b = GraphBuilder()
    x = b.input("x", (3,))
    g = b.graph(x)
    fusion = fuse_elementwise(g)
    assert [f.kind for f in fusion.ops] == ["copy"]
    _, gj = check(g, {"x": np.arange(3, dtype=np.float32)})
    assert gj["outputs"][0]["offset"] != gj["inputs"][0]["offset"]


def test_emitter_errors_name_the_node():
    from codegen_helpers import D

    from monolib.compiler.ir import Graph, Node, Value
    from monolib.errors import CompileError, UnsupportedOpError

    for kind, err, msg in (
        ("unsupported", UnsupportedOpError, "float16"),
        ("bug", CompileError, "oops"),
    ):
        x = Value("x", (2,), np.float32)
        y = Value("y", (2,), np.float32)
        node = Node("TBroken", "broken_7", [x], [y], {"kind": kind}, domain=D, opset=1)
        with pytest.raises(err, match=f"broken_7.*{msg}"):
            lower(Graph("g", [x], [y], [node]))
