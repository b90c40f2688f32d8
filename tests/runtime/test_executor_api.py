"""The graph executor interface beyond run/get_output (TVM's graph executor API):
``remove_params`` + ``load_params`` / ``set_input`` of params, ``save_graph_json`` +
``create`` (separate artifacts), ``share_params``, executors in parallel threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tinylib import B, W, reference, tiny_factory

import monolib
from monolib.compiler.testing import ort_session
from monolib.errors import ParamsError, ParamsInputError
from monolib.runtime import GraphModule, InputError, cpu, load_module
from monolib.runtime import params as runtime_params
from monolib.runtime.graph_executor import create
from monolib.runtime.library import read_container


def x_input(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)


def weights() -> dict[str, np.ndarray]:
    return {"w": W, "b": np.array([B], np.float32)}


def section_names(path: str) -> list[list[str]]:
    container, _ = read_container(path)
    return [[s.name for s in m.sections] for m in container.modules]


def test_top_level_save_and_load_params_are_the_runtime_ones(tmp_path):
    assert monolib.save_params is runtime_params.save_params
    assert monolib.load_params is runtime_params.load_params
    path = str(tmp_path / "p.safetensors")
    monolib.save_params(weights(), path)
    got = monolib.load_params(path)
    np.testing.assert_array_equal(got["w"], W)


def test_remove_params_exports_no_params_section(tmp_path):
    full = tiny_factory()
    bare = full.remove_params()
    assert full.has_params and not bare.has_params and bare.get_params() == {}
    assert bare.lib is full.lib and "removed" in repr(bare)
    path = bare.export_library(str(tmp_path / "bare.so"))
    assert section_names(path)[0] == ["graph", "head"]
    assert section_names(tiny_factory().export_library(str(tmp_path / "full.so")))[0] == [
        "graph",
        "head",
        "params",
    ]
    mod = load_module(path)
    assert not mod.has_params
    gm = GraphModule(mod["default"](cpu()))
    with pytest.raises(InputError, match=r"no weights for 2 params \('b', 'w'\).*load_params"):
        gm.run(x=x_input())
    with pytest.raises(InputError, match="no weights"):
        gm.executor.run_op(0)


def test_load_params_from_safetensors_bytes_and_path(tmp_path):
    mod = load_module(tiny_factory().remove_params().export_library(str(tmp_path / "b.so")))
    x = x_input()
    gm = GraphModule(mod["default"](cpu()))
    gm.load_params(monolib.save_params(weights()))  # bytes
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), reference(x), rtol=1e-6)
    path = str(tmp_path / "w.safetensors")
    monolib.save_params({"w": 2 * W, "b": np.array([0.0], np.float32)}, path)
    gm2 = GraphModule(mod["default"](cpu()))
    gm2.load_params(path)
    gm2.run(x=x)
    np.testing.assert_allclose(gm2.get_output(0).numpy(), 2 * W * x, rtol=1e-6)


def test_set_input_takes_params_one_by_one():
    gm = GraphModule(tiny_factory().remove_params().default(cpu()))
    x = x_input(1)
    gm.set_input(x=x, w=W)  # an input and a param in one call
    assert gm.executor.missing_params == ["b"]
    with pytest.raises(InputError, match="'b'"):
        gm.run()
    gm.set_input("b", np.array([B], np.float32))
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), reference(x), rtol=1e-6)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"nope": W}, r"unknown param 'nope'.*its params: w, b"),
        (
            {"w": W.reshape(3, 2)},
            r"param 'w': got float32\[3, 2\], the graph expects float32\[2, 3\]",
        ),
        ({"w": W.astype(np.float64)}, r"param 'w': got float64\[2, 3\].*float32\[2, 3\]"),
    ],
)
def test_wrong_params_are_input_errors_naming_them(params, match):
    gm = GraphModule(tiny_factory().default(cpu()))
    with pytest.raises(InputError, match=match) as info:
        gm.load_params(params)
    assert isinstance(info.value, ParamsInputError) and not isinstance(info.value, ParamsError)
    name = next(iter(params))
    with pytest.raises(InputError, match=f"'{name}'.*params: w, b|param '{name}': got"):
        gm.set_input(**params)
    with pytest.raises(InputError, match=match):  # from a safetensors buffer too
        gm.load_params(monolib.save_params(params))


def test_malformed_safetensors_is_a_params_error():
    gm = GraphModule(tiny_factory().default(cpu()))
    with pytest.raises(ParamsError, match="truncated"):
        gm.load_params(b"\x01\x02")


def test_save_graph_json_and_create_from_separate_artifacts(tmp_path):
    factory = tiny_factory()
    graph_path = factory.save_graph_json(tmp_path / "graph.json")
    lib_path = factory.lib.export_library(str(tmp_path / "lib.so"))  # the code alone
    params_path = str(tmp_path / "params.safetensors")
    monolib.save_params(factory.get_params(), params_path)

    lib = load_module(lib_path)
    assert lib.type_key == "library"
    with open(graph_path, encoding="utf-8") as f:
        graph_text = f.read()
    gm = create(graph_text, lib, cpu())
    with pytest.raises(InputError, match="no weights"):
        gm.run(x=x_input())
    gm.load_params(params_path)
    x = x_input(2)
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), reference(x), rtol=1e-6)
    gm2 = create(factory.get_graph_json(), lib, params=params_path)  # dict + params at once
    gm2.run(x=x)
    np.testing.assert_allclose(gm2.get_output(0).numpy(), reference(x), rtol=1e-6)


def test_share_params_uses_the_same_blob():
    factory = tiny_factory().remove_params()
    a = GraphModule(factory.default(cpu()))
    a.load_params({"w": 3 * W, "b": np.array([1.0], np.float32)})
    b = GraphModule(factory.default(cpu()))
    b.share_params(a)
    assert b.executor.params is a.executor.params and b.executor.missing_params == []
    x = x_input(3)
    b.run(x=x)
    np.testing.assert_allclose(b.get_output(0).numpy(), 3 * W * x + 1.0, rtol=1e-6)
    with pytest.raises(InputError, match="expects a GraphExecutor"):
        b.share_params(object())


def _small_model():
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm (compiled, ~1 s)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "cw"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "cb"),
        numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "gw"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "gb"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_operatorsetid("", 17)], ir_version=10
    )


def test_executors_of_one_factory_run_in_parallel_threads():
    model = _small_model()
    factory = monolib.compile(model)
    sess = ort_session(model)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    wants = [sess.run(None, {"x": x})[0] for x in inputs]
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    # Weights loaded once (into executor 0, from safetensors bytes), shared by the
    # others; each executor has its own arena.
    bare = factory.remove_params()
    executors = [bare.default(cpu()) for _ in range(4)]
    executors[0].load_params(monolib.save_params(factory.get_params()))
    for ex in executors[1:]:
        ex.share_params(executors[0])

    def work(k: int) -> None:
        try:
            gm = GraphModule(executors[k])
            start.wait()
            outs = []
            for _ in range(20):
                gm.run(x=inputs[k])
                outs.append(gm.get_output(0).numpy())
            results[k] = outs
        except Exception as exc:  # noqa: BLE001  (reported in the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    for k in range(4):
        assert len(results[k]) == 20
        for got in results[k]:
            np.testing.assert_allclose(got, wants[k], rtol=1e-4, atol=1e-5)
