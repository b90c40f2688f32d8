"""The debug executor: per-op profile table and per-op outputs (``monolib_run_op``),
checked against NumPy and ONNX Runtime (intermediate tensors added as graph outputs)."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest
from tinylib import reference, tiny_factory

import monolib
from monolib.compiler.testing import ort_session
from monolib.models import fetch_model
from monolib.runtime import InputError, cpu, debug_executor, load_module
from monolib.runtime.debug_executor import GraphModuleDebug, ProfileRow



def ort_values(model, feeds: dict, names: list[str]) -> dict[str, np.ndarray]:
    """ONNX Runtime's values of the tensors ``names`` (added as graph outputs)."""
    import onnx

    model = (
        onnx.load(model)
        if isinstance(model, str)
        else onnx.ModelProto.FromString(model.SerializeToString())
    )
    have = {o.name for o in model.graph.output}
    for name in names:
        if name not in have:
            model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    sess = ort_session(model)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def small_model():
    """Conv -> Relu -> MaxPool -> Conv -> Sigmoid -> GlobalAveragePool (opset 17)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 6, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("GlobalAveragePool", ["s2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
        inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_operatorsetid("", 17)], ir_version=10
    )


def test_profile_table_of_the_tiny_model():
    gm = debug_executor.create(tiny_factory())
    gm.set_input(x=np.ones((2, 3), np.float32))
    table = gm.profile(repeat=3)
    (row,) = table
    assert isinstance(row, ProfileRow)
    assert (row.index, row.name, row.ops, row.shape) == (0, "Mul_0", ("Mul", "Add"), (2, 3))
    assert row.time_ms >= 0 and row.share == pytest.approx(100.0)
    text = str(table)
    assert "Mul_0" in text and "Mul+Add" in text and "100.0%" in text and "1 ops" in text


def test_profile_in_run_times_every_op_inside_whole_runs():
    """monolib_run_timed: each op's time inside whole runs; the runs compute what a
    plain run does (ONNX Runtime's output, the same bits)."""
    model = small_model()
    gm = debug_executor.create(monolib.compile(model), device=cpu())
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
    gm.set_input(x=x)
    table = gm.profile(repeat=7, in_run=True)
    assert len(table) == len(gm.nodes) >= 2
    assert all(0 < row.time_ms < 1e3 for row in table)
    assert sum(row.share for row in table) == pytest.approx(100.0)
    timed = gm.get_output(0).numpy().copy()
    np.testing.assert_allclose(timed, ort_values(model, {"x": x}, [])["y"], rtol=1e-5, atol=1e-6)
    gm.run()
    np.testing.assert_array_equal(gm.get_output(0).numpy(), timed)


def test_profile_in_run_refused_where_the_run_dispatches_to_variants():
    """A library specialized for opt_shapes runs a variant chosen per run: its
    monolib_run_timed says it cannot time the ops, and profile names the other way."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "r"], ["y"])],
        "v", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17)],
                              ir_version=10)
    lib = monolib.compile(model, shapes={"x": (2, (1, 6))}, opt_shapes={"x": [(2, 3)]})
    gm = debug_executor.create(lib, device=cpu())
    gm.set_input(x=np.ones((2, 3), np.float32))
    with pytest.raises(monolib.errors.ExecutionError,
                       match=r"cannot time its ops inside runs.*profile\(in_run=False\)"):
        gm.profile(repeat=2, in_run=True)
    assert len(gm.profile(repeat=2)) == len(gm.nodes)


def test_debug_get_output_of_the_tiny_model_by_index_and_names():
    gm = GraphModuleDebug(tiny_factory())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gm.set_input(x=x)
    for key in (0, "Mul_0", "y"):  # index, node name, output tensor name
        np.testing.assert_allclose(gm.debug_get_output(key).numpy(), reference(x), rtol=1e-6)
    with pytest.raises(InputError, match="unknown node 'nope'.*'Mul_0'"):
        gm.debug_get_output("nope")
    with pytest.raises(InputError, match="node index 1 out of range: the graph has 1 ops"):
        gm.debug_get_output(1)


def test_debug_get_output_of_every_op_matches_onnxruntime():
    model = small_model()
    gm = debug_executor.create(monolib.compile(model), device=cpu())
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    gm.set_input(x=x)
    names = [n["outputs"][0] for n in gm.nodes]
    want = ort_values(model, {"x": x}, names)
    assert len(gm.nodes) >= 2  # something intermediate to look at
    for i, name in enumerate(names):
        got = gm.debug_get_output(i).numpy()
        np.testing.assert_allclose(got, want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    gm.run()  # a whole run afterwards is still right
    np.testing.assert_allclose(gm.get_output(0).numpy(), want["y"], rtol=1e-4, atol=1e-5)


def test_a_node_without_offset_is_a_container_error():
    from monolib.runtime import ContainerError, GraphExecutorFactoryModule

    factory = tiny_factory()
    graph = factory.get_graph_json()
    del graph["nodes"][0]["offset"]  # a graph JSON from before per-node offsets
    gm = GraphModuleDebug(GraphExecutorFactoryModule(graph, factory.params, factory.lib))
    gm.set_input(x=np.ones((2, 3), np.float32))
    with pytest.raises(ContainerError, match='node 0 .*no "offset".*compile and export'):
        gm.debug_get_output(0)


def test_no_arena_probing_is_left():
    # every node has its offset: the debug executor reads it, never probes the arena
    assert not hasattr(debug_executor, "locate_output")
    assert "fill(" not in inspect.getsource(debug_executor)


def test_node_offset_in_the_graph_json_is_used_as_is():
    from monolib.runtime import GraphExecutorFactoryModule

    factory = tiny_factory()
    graph = factory.get_graph_json()
    graph["nodes"][0]["offset"] = 0  # claims the output is where x is: taken as given
    gm = GraphModuleDebug(GraphExecutorFactoryModule(graph, factory.params, factory.lib))
    x = np.full((2, 3), 7.0, np.float32)
    gm.set_input(x=x)
    assert gm.output_offset("Mul_0") == 0
    np.testing.assert_array_equal(gm.debug_get_output(0).numpy(), x)


def test_create_from_a_graph_json_needs_the_library():
    with pytest.raises(InputError, match="needs the library module"):
        debug_executor.create(tiny_factory().get_graph_json())


@pytest.mark.slow
def test_cls_model_profile_and_intermediates_vs_onnxruntime(tmp_path):
    CLS = str(fetch_model("ppocr_cls"))
    factory = monolib.compile(CLS, shapes={"x": (1, 3, 48, 192)})
    bare = factory.remove_params()
    lib = load_module(bare.lib.export_library(str(tmp_path / "cls_code.so")))
    params = monolib.save_params(factory.get_params())
    gm = debug_executor.create(factory.get_graph_json(), lib, cpu(), params=params)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 48, 192)).astype(np.float32)
    gm.set_input(x=x)

    table = gm.profile(repeat=3)
    assert len(table) == len(gm.nodes) > 50
    assert sum(r.share for r in table) == pytest.approx(100.0, abs=1e-6)
    assert all(r.time_ms >= 0 for r in table) and table.total_ms > 0
    assert "Conv" in str(table)

    picks = [1, len(gm.nodes) // 3, len(gm.nodes) // 2, len(gm.nodes) - 2]
    names = [gm.nodes[i]["outputs"][0] for i in picks]
    want = ort_values(CLS, {"x": x}, names)
    for i, name in zip(picks, names):
        got = gm.debug_get_output(name).numpy()  # by ONNX tensor name
        assert got.shape == tuple(gm.nodes[i]["shape"])
        np.testing.assert_allclose(got, want[name], rtol=1e-3, atol=1e-4, err_msg=name)




@pytest.mark.slow
def test_det_model_in_place_squeeze_excite_outputs_vs_onnxruntime():
    """The squeeze-excite ``x * hardsigmoid(...)`` ops run in place over ``x`` and leave
    bytes unchanged where the gate is 1: their outputs are still found."""
    DET = str(fetch_model("ppocr_det"))
    gm = debug_executor.create(monolib.compile(DET, shapes={"x": (1, 3, 96, 128)}))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 96, 128)).astype(np.float32)
    gm.set_input(x=x)
    picks = [i for i, n in enumerate(gm.nodes) if n["op"] == "Mul"]
    assert picks
    names = [gm.nodes[i]["outputs"][0] for i in picks]
    want = ort_values(DET, {"x": x}, names)
    for i, name in zip(picks, names):
        got = gm.debug_get_output(i).numpy()
        scale = float(np.abs(want[name]).max())  # float32 sums of values up to ~1e2
        np.testing.assert_allclose(got, want[name], rtol=1e-3, atol=1e-5 * scale, err_msg=name)
