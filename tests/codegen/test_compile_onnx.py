"""``compile``/``run_model`` on small ONNX graphs of real ops, against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.build import compile as compile_model
from monolib.compiler.build import lower
from monolib.compiler.testing import make_node_model, ort_run, run_model
from monolib.errors import InputError

rng = np.random.default_rng(2)


def model_of(nodes, inputs, outputs, inits=(), metadata=None):
    """A model from (name, array) inputs, typed (name, dtype, shape) outputs."""
    ins = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in inputs
    ]
    outs = [helper.make_tensor_value_info(k, dt, shape) for k, dt, shape in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), k) for k, a in inits]
    g = helper.make_graph(nodes, "g", ins, outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    for k, v in (metadata or {}).items():
        m.metadata_props.add(key=k, value=v)
    return m


def requires(*ops):
    """Skip until the op engineers have registered ``ops``."""
    import monolib.compiler.ops  # noqa: F401
    from monolib.compiler.ops.base import registered_ops

    have = {name for _, name in registered_ops()}
    missing = [o for o in ops if o not in have]
    return pytest.mark.skipif(bool(missing), reason=f"ops not registered yet: {missing}")


def assert_matches_ort(model, feeds, rtol=1e-5, atol=1e-5):
    got = run_model(model, feeds)
    want = ort_run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def test_make_node_model_and_run_model_match_ort():
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 1)).astype(np.float32)
    model = make_node_model("Add", {"a": a, "b": b}, {})
    assert model.ir_version == 10
    onnx.checker.check_model(model)
    got = assert_matches_ort(model, {"a": a, "b": b})
    np.testing.assert_allclose(got[0], a + b)


def test_make_node_model_constant_and_omitted_inputs():
    x = rng.standard_normal((4, 5)).astype(np.float32)
    model = make_node_model(
        "Clip", {"x": x, "lo": None, "hi": np.float32(0.3)}, {}, constant_inputs=["hi"]
    )
    assert [i.name for i in model.graph.input] == ["x"]
    assert list(model.graph.node[0].input) == ["x", "", "hi"]
    got = assert_matches_ort(model, {"x": x})
    np.testing.assert_allclose(got[0], np.minimum(x, 0.3))


def test_elementwise_chain_with_broadcasts_fuses_into_one_loop():
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    y = rng.standard_normal((4, 1, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Add", ["x", "y"], ["t0"]),
        helper.make_node("Mul", ["t0", "half"], ["t1"]),
        helper.make_node("Sub", ["bias", "t1"], ["t2"]),
        helper.make_node("Relu", ["t2"], ["out"]),
    ]
    m = model_of(
        nodes,
        [("x", x), ("y", y)],
        [("out", TensorProto.FLOAT, x.shape)],
        inits=[("half", np.float32(0.5)), ("bias", rng.standard_normal((5, 1)).astype(np.float32))],
    )
    _, gj, _ = lower(m)
    assert len(gj["nodes"]) == 1 and gj["nodes"][0]["fused"] == ["Mul", "Sub", "Relu"]
    assert_matches_ort(m, {"x": x, "y": y})


@requires("Conv")
def test_conv_add_relu_fuses_residual_epilogue():
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    w = (rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["x", "c"], ["s"]),
        helper.make_node("HardSigmoid", ["s"], ["h"]),
        helper.make_node("Mul", ["h", "k"], ["out"]),
    ]
    m = model_of(
        nodes,
        [("x", x)],
        [("out", TensorProto.FLOAT, x.shape)],
        inits=[("w", w), ("k", rng.standard_normal((1, 8, 1, 1)).astype(np.float32))],
    )
    _, gj, _ = lower(m)
    assert [n["op"] for n in gj["nodes"]] == ["Conv"]
    assert gj["nodes"][0]["fused"] == ["Add", "HardSigmoid", "Mul"]
    assert_matches_ort(m, {"x": x}, rtol=1e-4, atol=1e-5)


@requires("Reshape")
def test_constant_alias_and_repeated_outputs_get_copies():
    x = rng.standard_normal((2, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Reshape", ["x", "shape"], ["xr"]),
        helper.make_node("Identity", ["r"], ["r2"]),
    ]
    m = model_of(
        nodes,
        [("x", x)],
        [
            ("xr", TensorProto.FLOAT, (3, 4)),
            ("r", TensorProto.FLOAT, (2, 6)),
            ("r2", TensorProto.FLOAT, (2, 6)),
            ("c", TensorProto.INT64, (3,)),
            ("x", TensorProto.FLOAT, (2, 6)),
        ],
        inits=[("shape", np.array([3, 4], np.int64)), ("c", np.array([7, 8, 9], np.int64))],
    )
    got = assert_matches_ort(m, {"x": x})
    np.testing.assert_array_equal(got[3], [7, 8, 9])
    _, gj, _ = lower(m)
    offs = [o["offset"] for o in gj["outputs"]] + [gj["inputs"][0]["offset"]]
    assert len(set(offs)) == len(offs)


def test_compile_records_constants_metadata_and_progress_and_runs_twice():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"]), helper.make_node("Sigmoid", ["y"], ["z"])]
    m = model_of(
        nodes,
        [("x", x), ("s", np.zeros((), np.float32))],
        [("z", TensorProto.FLOAT, (3, 4))],
        metadata={"character": "abc"},
    )
    steps = []
    lib = compile_model(m, constants={"s": np.float32(2.0)}, progress=steps.append)
    assert steps[0] == "import" and "generate C" in steps
    gj = lib.get_graph_json()
    assert gj["constants"] == {"s": 2.0} and gj["metadata"] == {"character": "abc"}
    gm = monolib.GraphModule(lib["default"](monolib.cpu()))
    gm.run(x=x)
    first = gm.get_output(0).numpy().copy()
    gm.run(x=x)
    np.testing.assert_array_equal(gm.get_output(0).numpy(), first)
    np.testing.assert_allclose(first, 1 / (1 + np.exp(-2 * x)), rtol=1e-5)


def test_multiple_outputs_of_different_dtypes():
    x = rng.standard_normal((5, 7)).astype(np.float32)
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("Greater", ["a", "thr"], ["g"]),
        helper.make_node("Neg", ["x"], ["n"]),
    ]
    m = model_of(
        nodes,
        [("x", x)],
        [("g", TensorProto.BOOL, x.shape), ("n", TensorProto.FLOAT, x.shape)],
        inits=[("thr", np.float32(0.5))],
    )
    got = assert_matches_ort(m, {"x": x})
    assert got[0].dtype == np.bool_


def test_run_model_rejects_unknown_input():
    a = rng.standard_normal((2, 2)).astype(np.float32)
    model = make_node_model("Relu", {"x": a}, {})
    with pytest.raises(InputError, match="nope"):
        run_model(model, {"x": a, "nope": a})


def test_elementwise_op_with_non_broadcasting_input_is_emitted_alone():
    x = rng.standard_normal((3, 2, 2)).astype(np.float64)
    like = np.zeros((1,), np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("CastLike", ["r", "like"], ["y"]),
    ]
    m = model_of(nodes, [("x", x), ("like", like)], [("y", TensorProto.FLOAT, x.shape)])
    got = assert_matches_ort(m, {"x": x, "like": like})
    assert got[0].dtype == np.float32


def test_compile_from_path_and_bytes_then_export_and_load(tmp_path):
    x = rng.standard_normal((2, 5)).astype(np.float32)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Add", ["sq", "one"], ["y"]),
    ]
    m = model_of(
        nodes,
        [("x", x)],
        [("y", TensorProto.FLOAT, x.shape)],
        inits=[("one", np.ones(5, np.float32))],
    )
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    want = x * x + 1
    for source in (path, str(path), m.SerializeToString()):
        np.testing.assert_allclose(run_model(source, {"x": x})[0], want, rtol=1e-6)
    lib = compile_model(path)
    out = tmp_path / "m.so"
    lib.export_library(str(out))
    gm = monolib.GraphModule(monolib.load_module(str(out))["default"](monolib.cpu()))
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-6)
