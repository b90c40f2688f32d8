"""Bad input to the graph executor (issue 6 part 5): wrong names, shapes and dtypes are
clear InputErrors; non-contiguous arrays, NaN/Inf and zero-size tensors give the
correct result (checked against NumPy and ``onnx.reference``); a failed set_input or
run leaves the executor usable with its inputs as they were."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.errors import InputError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from monolib.compiler.testing import make_node_model

W = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)


def model_xz():
    """``y = MatMul(x, W) + Cast<float>(z)``; x: float32[2, 3, 4], z: int32[2, 3, 5]."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Cast", ["z"], ["zf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["m", "zf"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "xz",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
            helper.make_tensor_value_info("z", TensorProto.INT32, [2, 3, 5]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])],
        [numpy_helper.from_array(W, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def reference(x, z):
    return np.matmul(x.astype(np.float32), W) + z.astype(np.float32)


@pytest.fixture(scope="module")
def factory():
    return monolib.compile(model_xz())


@pytest.fixture
def gm(factory):
    return monolib.GraphModule(factory["default"](monolib.cpu()))


@pytest.fixture
def xz():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    z = rng.integers(-5, 5, (2, 3, 5)).astype(np.int32)
    return x, z


def run(gm, **inputs) -> np.ndarray:
    gm.run(**inputs)
    return gm.get_output(0).numpy()


def test_wrong_names_and_indices(gm, xz):
    x, z = xz
    with pytest.raises(InputError, match=r"unknown input 'q'.*x: float32\[2, 3, 4\], z: int32"):
        gm.run(q=x)
    with pytest.raises(InputError, match="input index 2 out of range: the model has 2 inputs"):
        gm.set_input(2, x)
    with pytest.raises(InputError, match="unknown input 1.5"):
        gm.set_input(1.5, x)
    with pytest.raises(InputError, match="output index 1 out of range"):
        gm.get_output(1)
    np.testing.assert_allclose(run(gm, x=x, z=z), reference(x, z), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4, 1), (2, 4, 3), (), (0, 3, 4)])
def test_wrong_shapes(gm, shape):
    with pytest.raises(
        InputError, match=r"input 'x' has shape \[.*\], the model expects \[2, 3, 4\]"
    ):
        gm.set_input("x", np.zeros(shape, np.float32))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.bool_, np.complex64, ">f4"])
def test_wrong_dtypes(gm, dtype):
    with pytest.raises(InputError, match="input 'x' has dtype .*, the model expects float32"):
        gm.set_input("x", np.zeros((2, 3, 4), dtype))


def test_lists_are_converted_and_junk_is_an_input_error(gm, xz):
    x, z = xz
    np.testing.assert_array_equal(run(gm, x=x.tolist(), z=z.tolist()), run(gm, x=x, z=z))
    with pytest.raises(InputError, match="input 'x': cannot convert list to a float32 array"):
        gm.set_input("x", [[1.0, 2.0], [3.0]])  # ragged
    with pytest.raises(InputError, match="input 'x': cannot convert str"):
        gm.set_input("x", "not a tensor")
    with pytest.raises(InputError, match="input 'z': cannot convert list to a int32 array"):
        gm.set_input("z", [[[1 << 40] * 5] * 3] * 2)  # does not fit int32
    with pytest.raises(InputError, match="input 'x' has dtype object"):
        gm.set_input("x", np.empty((2, 3, 4), dtype=object))


def _views(x: np.ndarray) -> dict[str, np.ndarray]:
    """Arrays equal to ``x`` whose memory is laid out otherwise."""
    big = np.zeros((2, 6, 8), np.float32)
    big[:, ::2, ::2] = x
    return {
        "strided": big[:, ::2, ::2],
        "fortran": np.asfortranarray(x),
        "transposed": np.ascontiguousarray(x.transpose(2, 1, 0)).transpose(2, 1, 0),
        "reversed": np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1],
        "broadcast": np.broadcast_to(x[:1], (2, 3, 4)),
        "unaligned": np.frombuffer(b"\0" + x.tobytes(), np.float32, offset=1).reshape(2, 3, 4),
    }


@pytest.mark.parametrize(
    "layout", ["strided", "fortran", "transposed", "reversed", "broadcast", "unaligned"]
)
def test_non_contiguous_inputs_give_the_same_bits(gm, xz, layout):
    x, z = xz
    view = _views(x)[layout]
    expected_x = np.array(view)  # what the view holds, C-contiguous
    assert not view.flags.c_contiguous or layout == "unaligned"
    got = run(gm, x=view, z=np.asfortranarray(z))
    np.testing.assert_array_equal(got, run(gm, x=expected_x, z=z))
    np.testing.assert_allclose(got, reference(expected_x, z), rtol=1e-5, atol=1e-6)


def test_nan_and_inf_propagate(gm, xz):
    x, z = xz
    x = x.copy()
    x[0, 0, 1] = np.nan  # row (0, 0) of the MatMul: all NaN
    x[1, 2, 3] = np.inf  # row (1, 2): +-inf where W is nonzero, NaN where inf * 0
    x[0, 1, :] = [np.inf, -np.inf, 0, 0]  # inf - inf: NaN wherever both weights are nonzero
    got = run(gm, x=x, z=z)
    with np.errstate(invalid="ignore"):
        want = reference(x, z)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)
    assert np.isnan(got[0, 0]).all() and np.isnan(got[0, 1]).any()
    # the next run with clean inputs is clean again (nothing sticky in the arena)
    np.testing.assert_allclose(run(gm, x=xz[0], z=z), reference(xz[0], z), rtol=1e-5, atol=1e-6)


NAN_X = np.array(
    [[np.nan, 1, 2, 3], [np.inf, 1, -1, 1], [1, 2, 3, -np.inf], [0, -2, np.nan, 5]], np.float32
)


def _windows(x: np.ndarray) -> np.ndarray:
    """2x2 windows, stride 1, of a [1, 1, H, W] tensor: [1, 1, H-1, W-1, 2, 2]."""
    return np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# The oracle is IEEE arithmetic as NumPy does it: a NaN in, a NaN out (max, min and
# compare-based ops included; ONNX Runtime and onnx.reference differ between ops).
NAN_ORACLES = {
    "Relu": ({}, {}, lambda x: np.maximum(x, 0)),
    "Sigmoid": ({}, {}, lambda x: 1 / (1 + np.exp(-x))),
    "Softmax": ({"axis": -1}, {}, _softmax),
    "Max": ({}, {"c": np.zeros((4, 4), np.float32)}, lambda x: np.maximum(x, 0)),
    "Min": ({}, {"c": np.zeros((4, 4), np.float32)}, lambda x: np.minimum(x, 0)),
    "ReduceMax": ({"keepdims": 0, "axes": [1]}, {}, lambda x: np.max(x, axis=1)),  # opset 17
    "MaxPool": ({"kernel_shape": [2, 2]}, {}, lambda x: _windows(x).max(axis=(4, 5))),
    "AveragePool": ({"kernel_shape": [2, 2]}, {}, lambda x: _windows(x).mean(axis=(4, 5))),
    "Conv": (
        {},
        {"w": np.ones((2, 1, 2, 2), np.float32)},
        lambda x: np.repeat(_windows(x).sum(axis=(4, 5)), 2, axis=1),
    ),
}
# Ops that drop a NaN today (compare-based max/min in C; MaxPool keeps a NaN only when
# it comes first in its window): an x-fail that turns into a
# failure once fixed (then take the op out of this set).
NAN_DROPPED: set[str] = set()  # every op checked propagates NaN now


POOLED = ("MaxPool", "AveragePool", "Conv")  # on x as [1, 1, 4, 4]


def _want(op: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        x = NAN_X.reshape(1, 1, 4, 4) if op in POOLED else NAN_X
        return NAN_ORACLES[op][2](x).astype(np.float32)


@pytest.fixture(scope="module")
def nan_model():
    """ONE model with every op of NAN_ORACLES applied to x (one output each)."""
    nodes = [helper.make_node("Reshape", ["x", "shape4"], ["x4"])]
    inits = [numpy_helper.from_array(np.array([1, 1, 4, 4], np.int64), "shape4")]
    for op, (attrs, extra, _) in NAN_ORACLES.items():
        for name, value in extra.items():
            inits.append(numpy_helper.from_array(value, f"{op}_{name}"))
        src = "x4" if op in POOLED else "x"
        ins = [src, *(f"{op}_{name}" for name in extra)]
        nodes.append(helper.make_node(op, ins, [f"y_{op}"], **attrs))
    graph = helper.make_graph(
        nodes,
        "nan_ops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [
            helper.make_tensor_value_info(f"y_{op}", TensorProto.FLOAT, list(_want(op).shape))
            for op in NAN_ORACLES
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    gm = monolib.GraphModule(monolib.compile(model))
    gm.run(x=NAN_X)
    return {op: gm.get_output(i).numpy() for i, op in enumerate(NAN_ORACLES)}


@pytest.mark.parametrize("op", sorted(NAN_ORACLES))
def test_nan_inf_through_ops(op, nan_model, request):
    if op in NAN_DROPPED:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"{op} drops NaN"))
    got, want = nan_model[op], _want(op)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.sign(got[np.isinf(got)]), np.sign(want[np.isinf(want)]))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "op, shape, attrs",
    [
        ("Relu", (0, 3), {}),
        ("Add", (2, 0, 4), {}),
        ("ReduceSum", (2, 0, 4), {"keepdims": 1}),
        ("Concat", (0, 3), {"axis": 0}),
    ],
)
def test_zero_size_inputs(op, shape, attrs):
    from onnx.reference import ReferenceEvaluator

    x = np.zeros(shape, np.float32)
    ins = {"x": x}
    if op == "Add":
        ins["x2"] = np.zeros(shape, np.float32)
    const = []
    if op == "Concat":
        ins["c"] = np.arange(3, dtype=np.float32).reshape(1, 3)
        const = ["c"]
    model = make_node_model(op, ins, attrs, constant_inputs=const)
    feeds = {k: v for k, v in ins.items() if k not in const}
    gm = monolib.GraphModule(monolib.compile(model, shapes={k: v.shape for k, v in feeds.items()}))
    got = run(gm, **feeds)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    with pytest.raises(InputError, match=r"has shape \[1, 3\]"):
        gm.set_input("x", np.zeros((1, 3), np.float32))


def test_an_error_mid_set_input_changes_nothing_and_the_executor_stays_usable(gm, xz):
    x, z = xz
    first = run(gm, x=x, z=z)
    other = x + 1
    with pytest.raises(InputError, match="input 'z' has dtype int64"):
        gm.run(x=other, z=z.astype(np.int64))  # good x, then a bad z: nothing is set
    np.testing.assert_array_equal(gm.get_input("x").numpy(), x)
    np.testing.assert_array_equal(gm.get_output(0).numpy(), first)  # outputs untouched
    with pytest.raises(InputError):
        gm.set_input("x", other, z=np.zeros((1,), np.int32))
    np.testing.assert_array_equal(gm.get_input("x").numpy(), x)
    np.testing.assert_allclose(run(gm, x=other, z=z), reference(other, z), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(run(gm, x=x, z=z), first)  # same bits as before


def test_inputs_are_copied_at_set_input(gm, xz):
    x, z = xz
    x = x.copy()
    gm.set_input("x", x)
    gm.set_input("z", z)
    x[:] = 1e6  # changing the caller's array after set_input changes nothing
    np.testing.assert_allclose(run(gm), reference(xz[0], z), rtol=1e-5, atol=1e-6)


def test_an_arena_too_big_for_the_machine_is_a_container_error():
    from tinylib import tiny_graph, tiny_source

    from monolib.export.csource import CSourceModule
    from monolib.runtime import GraphExecutorFactoryModule
    from monolib.errors import ContainerError

    graph, params = tiny_graph()
    graph["arena_bytes"] = 1 << 62  # 4 EiB: what a damaged graph JSON may ask
    factory = GraphExecutorFactoryModule(graph, params, CSourceModule(tiny_source(), "c"))
    with pytest.raises(ContainerError, match="4611686018427387904-byte arena, which cannot be"):
        factory["default"](monolib.cpu())
