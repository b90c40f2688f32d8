"""The nn ops through the whole compiler (frontend, fusion passes, the real code
generator and its tile epilogues, the runtime), against ONNX Runtime.

Small graphs where an elementwise chain (bias Add, Relu, HardSigmoid, residual Add)
follows a Conv/Gemm/MatMul/pool, so the fused-epilogue contract between the kernels
and ``codegen`` is exercised with the generator's own epilogue functions.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from monolib.compiler.testing import make_node_model, ort_run, run_model

RNG = np.random.default_rng(21)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def _model(nodes, inputs: dict, consts: dict, outputs: list[str], opset: int = 13):
    init = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    ins = [helper.make_tensor_value_info(k, 1, v.shape) for k, v in inputs.items()]
    graph = helper.make_graph(nodes, "g", ins, [], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    # typed outputs (the ONNX checker wants a shape): from ONNX shape inference
    known = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    model.graph.output.extend(known[o] for o in outputs)
    return model


def _check(model: onnx.ModelProto, feeds: dict, rtol: float = 1e-4) -> None:
    got = run_model(model, feeds)
    want = ort_run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("conv", ["pointwise", "direct", "packed", "depthwise", "folded"])
def test_conv_relu_residual(conv: str) -> None:
    shapes = {
        "pointwise": ((1, 8, 9, 10), (8, 8, 1, 1), {}),
        "direct": ((1, 8, 9, 10), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
        # >= 64 output channels per group take the packed-GEMM path
        "packed": ((1, 4, 9, 10), (128, 2, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
        "depthwise": ((1, 8, 9, 10), (8, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 8}),
        "folded": ((3, 8, 2, 2), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    }
    xs, ws, attrs = shapes[conv]
    x = r(*xs)
    cout = ws[0]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
        helper.make_node("HardSigmoid", ["c"], ["h"], alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["c", "h"], ["hs"]),
        helper.make_node("Relu", ["hs"], ["y"]),
    ]
    consts = {"w": r(*ws, scale=0.3), "b": r(cout)}
    outs = ["y"]
    if xs[1] == cout:  # residual add of the input
        nodes.append(helper.make_node("Add", ["y", "x"], ["z"]))
        outs = ["z"]
    _check(_model(nodes, {"x": x}, consts, outs), {"x": x})


def test_gemm_sigmoid() -> None:
    x = r(5, 40)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
        helper.make_node("Sigmoid", ["g"], ["y"]),
    ]
    _check(_model(nodes, {"x": x}, {"w": r(33, 40), "b": r(33)}, ["y"]), {"x": x})


def test_attention_block() -> None:
    q, k, v = r(1, 4, 10, 16), r(1, 4, 16, 10), r(1, 4, 10, 16)
    nodes = [
        helper.make_node("MatMul", ["q", "k"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["s2"]),
        helper.make_node("Softmax", ["s2"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("MatMul", ["o", "wo"], ["y0"]),
        helper.make_node("Add", ["y0", "bo"], ["y"]),
    ]
    consts = {"scale": np.array(0.25, np.float32), "wo": r(16, 24), "bo": r(24)}
    feeds = {"q": q, "k": k, "v": v}
    _check(_model(nodes, feeds, consts, ["y"]), feeds)


def test_pools_then_activation() -> None:
    x = r(1, 6, 12, 20)
    nodes = [
        helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 2], strides=[3, 2]),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["m"], ["g"]),
        helper.make_node("Sigmoid", ["g"], ["sg"]),
    ]
    _check(_model(nodes, {"x": x}, {}, ["ra", "sg"]), {"x": x})


def test_conv_transpose_bias_relu() -> None:
    x = r(1, 8, 6, 7)
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    _check(_model(nodes, {"x": x}, {"w": r(8, 4, 2, 2), "b": r(4)}, ["y"]), {"x": x})


def test_lstm_single_node() -> None:
    t, b, i, h = 4, 1, 6, 12
    feeds = {"x": r(t, b, i, scale=0.5)}
    model = make_node_model(
        "LSTM",
        {
            "x": feeds["x"],
            "w": r(1, 4 * h, i, scale=0.3),
            "r": r(1, 4 * h, h, scale=0.3),
            "b": r(1, 8 * h, scale=0.3),
        },
        {"hidden_size": h},
        outputs=3,
        constant_inputs=["w", "r", "b"],
        opset=14,
    )
    _check(model, feeds)


@pytest.mark.parametrize("op,attrs", [("MatMul", {}), ("Gemm", {"alpha": 0.5})])
def test_single_node_models(op: str, attrs: dict) -> None:
    a, b = r(7, 20), r(20, 9)
    model = make_node_model(op, {"a": a, "b": b}, attrs, constant_inputs=["b"], opset=13)
    _check(model, {"a": a})
