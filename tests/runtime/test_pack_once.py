"""GEMM operands made by run-once ops are packed once per arena (``plan.keep``).

A weight built by a ``ConstantOfShape`` too large to fold (lowered here so the shapes
stay tiny) is an init op's output; the Gemm/MatMul reading it packs it into full-K
panels in a kept region on the first run (init flag 0) and reads the panels on later
runs, as it reads a constant weight packed at compile time.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.passes import node_eval
from monolib.compiler.testing import ort_run
from monolib.runtime import GraphModule, cpu, set_num_threads

RNG = np.random.default_rng(7)
K, N = 29, 37  # no whole 16-column panel at the end, K not a multiple of anything


def _model(op: str, m: int) -> onnx.ModelProto:
    """y = op(x, W) with W = ConstantOfShape * c1 * c2 (run-once ops), bias b.

    ``gemm_t``: Gemm(x [m, K], W [N, K], transB); ``matmul``: MatMul(x [m, K], W [K, N]);
    ``gemm_a``: Gemm(W [K, N]^T as A (transA), x [K, m] as B): A packed once.
    """
    wshape = {"gemm_t": [N, K], "matmul": [K, N], "gemm_a": [K, N]}[op]
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["k"],
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Mul", ["k", "c1"], ["k1"]),
        helper.make_node("Mul", ["k1", "c2"], ["w"]),
    ]
    if op == "gemm_t":
        nodes.append(helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1))
        xs, ys = [m, K], [m, N]
    elif op == "matmul":
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y0"]))
        nodes.append(helper.make_node("Add", ["y0", "b"], ["y"]))
        xs, ys = [m, K], [m, N]
    else:
        nodes.append(helper.make_node("Gemm", ["w", "x"], ["y"], transA=1))
        xs, ys = [K, m], [N, m]
    inits = [
        numpy_helper.from_array(np.array(wshape, np.int64), "s"),
        numpy_helper.from_array(RNG.standard_normal((wshape[0], 1)).astype(np.float32), "c1"),
        numpy_helper.from_array(RNG.standard_normal(wshape[1]).astype(np.float32), "c2"),
    ]
    if op != "gemm_a":
        inits.append(numpy_helper.from_array(RNG.standard_normal(N).astype(np.float32), "b"))
    graph = helper.make_graph(
        nodes, "pack_once", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ys)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture
def no_folding(monkeypatch):
    """Nothing above 64 bytes folds: the fill stays a node."""
    monkeypatch.setattr(node_eval, "MAX_FOLD_BYTES", 64)


@pytest.mark.parametrize("op, m", [("gemm_t", 1), ("gemm_t", 7), ("matmul", 1),
                                   ("matmul", 13), ("gemm_a", 3)])
def test_weight_from_init_ops_packed_once(no_folding, op: str, m: int) -> None:
    model = _model(op, m)
    fac = monolib.compile(model, shapes={"x": tuple(
        d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)})
    nodes = fac.graph_json["nodes"]
    init = [n for n in nodes if n.get("init")]
    kept = [n for n in nodes if "keep" in n]
    assert init and len(kept) == 1 and not kept[0].get("init")
    xshape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    outs, x1 = {}, RNG.standard_normal(xshape).astype(np.float32)
    for threads in (1, 2):
        set_num_threads(threads)
        gm = GraphModule(fac["default"](cpu()))
        arena = gm.executor.arena
        for _ in range(2):
            x = RNG.standard_normal(xshape).astype(np.float32)
            gm.run(x=x)
            np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"x": x})[0],
                                       rtol=1e-5, atol=1e-5)
        # the weight itself clobbered: later runs read the panels packed on run 1
        for n in init:
            arena[n["offset"]: n["offset"] + 4 * K * N] = 0
        gm.run(x=x1)
        want = ort_run(model, {"x": x1})[0]
        np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)
        outs[threads] = gm.get_output(0).numpy().copy()
        # new params: the init ops and the packing run again on the next run
        arena[kept[0]["keep"][0]: sum(kept[0]["keep"])] = 0
        gm.executor.load_params({})
        gm.run(x=x1)
        np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outs[1], outs[2])  # column splits: same sums
    set_num_threads(1)


def test_plan_keeps_packed_region_apart(no_folding) -> None:
    """The kept region overlaps no other value, scratch or the init outputs."""
    from monolib.compiler.backends.c.generate import scratch_sizes
    from monolib.compiler.passes.plan_memory import plan_memory
    from monolib.compiler.pipeline import prepare

    _, fusion, plan = prepare(_model("matmul", 5), shapes={"x": (5, K)})
    plan = plan_memory(fusion, scratch_sizes(fusion, plan))
    assert len(plan.keep) == 1
    (t, lo), = plan.keep.items()
    hi = lo + fusion.ops[t].keep_bytes
    assert fusion.ops[t].keep_bytes >= 4 * K * 48  # K rows of 3 panels of 16
    for f in fusion.ops:
        for v in f.reads() + f.writes():
            if v.uid in plan.offsets:
                off = plan.offsets[v.uid]
                assert off + v.nbytes <= lo or off >= hi, v.name
    for s, off in plan.scratch.items():
        assert off + plan.scratch_sizes[s] <= lo or off >= hi
    assert plan.init_offset + 4 <= lo or plan.init_offset >= hi
