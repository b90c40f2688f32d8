"""Run-once ("init") ops: constant subgraphs too big to fold run once per executor.

A ``ConstantOfShape`` above ``node_eval.MAX_FOLD_BYTES`` (lowered here so the shapes
stay tiny) and the ops that read only it and constants become init ops
(``plan_memory.init_ops``): outputs in regions of their own, an arena flag that
``monolib_run`` sets after the first run and ``load_params`` clears.
"""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.passes import node_eval
from monolib.compiler.passes.plan_memory import init_ops, plan_memory
from monolib.compiler.pipeline import prepare
from monolib.compiler.testing import ort_run
from monolib.runtime import GraphModule, cpu, set_num_threads
from monolib.runtime.debug_executor import GraphModuleDebug

RNG = np.random.default_rng(14)


def _model(dim: int | str = 3) -> onnx.ModelProto:
    """y = x @ Transpose(ConstantOfShape([32, 24], 0.5) * c) + x0: a chain of three
    init ops (the fill, the Mul, the Transpose) feeding a MatMul."""
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["k"],
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Mul", ["k", "c"], ["k2"]),
        helper.make_node("Transpose", ["k2"], ["kt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "kt"], ["m"]),
        helper.make_node("Add", ["m", "x0"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([32, 24], np.int64), "s"),
        numpy_helper.from_array(RNG.standard_normal(24).astype(np.float32), "c"),
        numpy_helper.from_array(RNG.standard_normal(32).astype(np.float32), "x0"),
    ]
    graph = helper.make_graph(
        nodes, "init_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture
def no_folding(monkeypatch):
    """Nothing above 64 bytes folds: the fill stays a node."""
    monkeypatch.setattr(node_eval, "MAX_FOLD_BYTES", 64)


def test_plan_keeps_init_outputs_apart(no_folding) -> None:
    graph, fusion, plan = prepare(_model(), shapes={"x": (3, 24)})
    once = init_ops(fusion)
    assert sorted(fusion.ops[t].op_type for t in once) == ["ConstantOfShape", "Mul", "Transpose"]
    assert once == plan.init_ops and plan.init_offset is not None
    mine = [v for t in once for v in fusion.ops[t].writes()]
    spans = {v.uid: (plan.offsets[v.uid], plan.offsets[v.uid] + v.nbytes) for v in mine}
    spans["flag"] = (plan.init_offset, plan.init_offset + 4)
    others = [(v.uid, plan.offsets[v.uid], v.nbytes) for f in fusion.ops
              for v in f.reads() + f.writes() if v.uid in plan.offsets]
    for uid, (lo, hi) in spans.items():
        for other, off, n in others:
            assert other == uid or off + n <= lo or off >= hi, "an init region is shared"
        for t, off in plan.scratch.items():
            assert off + plan.scratch_sizes[t] <= lo or off >= hi
    # planned like any op without init: the regions may be reused
    assert not plan_memory(fusion, init=False).init_ops


def test_init_ops_run_once_and_match_ort(no_folding) -> None:
    model = _model()
    fac = monolib.compile(model, shapes={"x": (3, 24)})
    nodes = fac.graph_json["nodes"]
    init = [n for n in nodes if n.get("init")]
    assert [n["op"] for n in init] == ["ConstantOfShape", "Mul", "Transpose"]
    assert "init_offset" in fac.graph_json and "init_offset" in fac.head
    for threads in (1, 2):
        set_num_threads(threads)
        gm = GraphModule(fac["default"](cpu()))
        assert not gm.executor.initialized
        for _ in range(3):  # runs 1, 2, 3 on other inputs
            x = RNG.standard_normal((3, 24)).astype(np.float32)
            gm.run(x=x)
            np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"x": x})[0],
                                       rtol=1e-5, atol=1e-5)
            assert gm.executor.initialized
        # later runs skip the init ops: garbage in the Transpose's output shows up
        kt = init[-1]
        arena = gm.executor.arena
        arena[kt["offset"]: kt["offset"] + 32 * 24 * 4].view(np.float32)[:] = 0.0
        for n in nodes:  # and the MatMul's B packed from it on the first run (plan.keep)
            if "keep" in n:
                arena[n["keep"][0]: sum(n["keep"])] = 0
        gm.run(x=x)
        x0 = numpy_helper.to_array(model.graph.initializer[2])
        np.testing.assert_array_equal(gm.get_output(0).numpy(), np.broadcast_to(x0, (3, 32)))
        # new params: the next run computes them again
        gm.executor.load_params({})
        assert not gm.executor.initialized
        gm.run(x=x)
        np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)
    set_num_threads(1)


def test_profile_runs_init_ops_once(no_folding) -> None:
    model = _model()
    fac = monolib.compile(model, shapes={"x": (3, 24)})
    gm = GraphModuleDebug(fac["default"](cpu()))
    gm.set_input("x", RNG.standard_normal((3, 24)).astype(np.float32))
    rows = gm.executor.profile(repeat=3)
    init = [r for r in rows if r.get("init")]
    assert len(init) == 3 and all(r["time_ms"] == 0.0 and r["init_ms"] > 0 for r in init)
    assert gm.executor.initialized
    # profiled again: already done, not run again
    assert all(r["init_ms"] is None for r in gm.executor.profile(repeat=1) if r.get("init"))
    table = gm.profile(repeat=1)
    assert len(table) == len(rows)
    # inside whole runs: the run-once ops are skipped (time 0, no first time), the
    # output still right
    rows = gm.executor.profile(repeat=3, in_run=True)
    assert [r["index"] for r in rows if r.get("init")] == [r["index"] for r in init]
    assert all(r["time_ms"] == 0.0 and r["init_ms"] is None for r in rows if r.get("init"))
    assert all(r["time_ms"] > 0 for r in rows if not r.get("init"))
    x = gm.executor.input_view(0).copy()
    np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


def test_runtime_dims_keep_static_init_ops(no_folding) -> None:
    """A graph with a run-time batch: the static fill is still an init op, a fill of a
    run-time shape (``Shape(x)``) is not."""
    model = _model("n")
    extra = helper.make_node("Shape", ["x"], ["xs"])
    fill = helper.make_node("ConstantOfShape", ["xs"], ["ones"],
                            value=numpy_helper.from_array(np.array([2.0], np.float32)))
    mul = helper.make_node("Mul", ["ones", "x"], ["x2"])
    g = model.graph
    g.node[3].input[0] = "x2"
    g.node.insert(0, mul)
    g.node.insert(0, fill)
    g.node.insert(0, extra)
    onnx.checker.check_model(model)
    fac = monolib.compile(model, shapes={"x": ((1, 8), 24)})
    assert [n["op"] for n in fac.graph_json["nodes"] if n.get("init")] == [
        "ConstantOfShape", "Mul", "Transpose"]
    gm = GraphModule(fac["default"](cpu()))
    for n in (5, 2, 7):
        x = RNG.standard_normal((n, 24)).astype(np.float32)
        gm.run(x=x)
        np.testing.assert_allclose(gm.get_output(0).numpy(), ort_run(model, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)


def test_c_api_runs_init_ops_once(no_folding, tmp_path) -> None:
    """The C API's monolib_run_model (the generated monolib_run) honours the flag: on
    runs 1-3 the outputs match ORT; the Transpose's output clobbered in the handle's
    arena shows the later runs skip it."""
    model = _model()
    fac = monolib.compile(model, shapes={"x": (3, 24)})
    path = str(tmp_path / "init.so")
    fac.export_library(path)
    lib = ctypes.CDLL(path)
    vp, i32 = ctypes.c_void_p, ctypes.c_int32
    for name, res, args in [("monolib_open", vp, []), ("monolib_close", None, [vp]),
                            ("monolib_set_input", i32, [vp, i32, vp, ctypes.c_size_t]),
                            ("monolib_run_model", i32, [vp]),
                            ("monolib_get_output", i32, [vp, i32, vp, ctypes.c_size_t]),
                            ("monolib_output_data", vp, [vp, i32])]:
        getattr(lib, name).restype, getattr(lib, name).argtypes = res, args
    handle = lib.monolib_open()
    assert handle
    try:
        y = np.empty((3, 32), np.float32)
        for _ in range(3):
            x = RNG.standard_normal((3, 24)).astype(np.float32)
            assert lib.monolib_set_input(handle, 0, x.ctypes.data, x.nbytes) == 0
            assert lib.monolib_run_model(handle) == 0
            assert lib.monolib_get_output(handle, 0, y.ctypes.data, y.nbytes) == 0
            np.testing.assert_allclose(y, ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
        arena = lib.monolib_output_data(handle, 0) - fac.graph_json["outputs"][0]["offset"]
        kt = [n for n in fac.graph_json["nodes"] if n.get("init")][-1]
        ctypes.memset(arena + kt["offset"], 0, 32 * 24 * 4)
        for n in fac.graph_json["nodes"]:  # and B packed from it once (plan.keep)
            if "keep" in n:
                ctypes.memset(arena + n["keep"][0], 0, n["keep"][1])
        assert lib.monolib_run_model(handle) == 0
        assert lib.monolib_get_output(handle, 0, y.ctypes.data, y.nbytes) == 0
        x0 = numpy_helper.to_array(model.graph.initializer[2])
        np.testing.assert_array_equal(y, np.broadcast_to(x0, (3, 32)))
    finally:
        lib.monolib_close(handle)


def test_only_constant_work_runs_once(no_folding) -> None:
    """Not init: a fill written in place into a Concat with a run-time value (its region
    is the Concat's), a random op (not foldable), anything reading an input."""
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["k"],
                         value=numpy_helper.from_array(np.array([0.25], np.float32))),
        helper.make_node("Relu", ["x"], ["xr"]),
        helper.make_node("Concat", ["k", "xr"], ["c"], axis=0),
        helper.make_node("RandomNormal", [], ["r"], shape=[3, 24], seed=1.0),
        helper.make_node("Mul", ["r", "x"], ["rx"]),
        helper.make_node("ConstantOfShape", ["s"], ["k2"],
                         value=numpy_helper.from_array(np.array([2.0], np.float32))),
        helper.make_node("Neg", ["k2"], ["k3"]),
        helper.make_node("Concat", ["k3", "k2"], ["kk"], axis=0),  # in place, all run once
    ]
    # [4, 24] floats: a whole number of 64-byte lines, as an in-place member needs
    inits = [numpy_helper.from_array(np.array([4, 24], np.int64), "s")]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 24])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [7, 24]),
         helper.make_tensor_value_info("rx", TensorProto.FLOAT, [3, 24]),
         helper.make_tensor_value_info("kk", TensorProto.FLOAT, [8, 24])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    _, fusion, plan = prepare(model, shapes={"x": (3, 24)})
    once = {fusion.ops[t].name for t in plan.init_ops}
    by_out = {f.out.name: f.name for f in fusion.ops}
    kinds = {f.out.name: f.kind for f in fusion.ops}
    assert by_out["rx"] not in once and by_out.get("r") not in once
    assert kinds["c"] == "concat" and by_out["k"] not in once  # inside the Concat with x
    # a chain of constant work into an in-place Concat (a graph output): its region kept
    assert kinds["kk"] == "concat" and {by_out["k2"], by_out["k3"]} <= once
    values = {v.name: v for f in fusion.ops for v in f.reads() + f.writes()}
    lo, hi = plan.offsets[values["kk"].uid], plan.offsets[values["kk"].uid] + 8 * 24 * 4
    for name, v in values.items():
        if v.uid in plan.offsets and name not in ("kk", "k2", "k3"):
            assert plan.offsets[v.uid] + v.nbytes <= lo or plan.offsets[v.uid] >= hi, name
    fac = monolib.compile(model, shapes={"x": (3, 24)})
    gm = GraphModule(fac["default"](cpu()))
    for _ in range(2):
        x = RNG.standard_normal((3, 24)).astype(np.float32)
        gm.run(x=x)
        want = ort_run(model, {"x": x})
        np.testing.assert_array_equal(gm.get_output(0).numpy(), want[0])
        np.testing.assert_array_equal(gm.get_output(2).numpy(), want[2])
