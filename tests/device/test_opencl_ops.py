"""Every device kernel against ONNX Runtime, on the OpenCL device (PoCL in CI): one
model holding each lowering (grouped / depthwise / 1x1 / strided Conv with fused
epilogues, pools, MatMul with batch broadcast, Gemm, Softmax on an inner axis,
reductions, Transpose, Slice with negative steps, Concat, an elementwise LayerNorm
chain with broadcasts), built once, run once."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from monolib.compiler.testing import ort_run

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)
FEEDS = {
    "x": RNG.standard_normal((1, 4, 9, 10)).astype(np.float32),
    "a": RNG.standard_normal((2, 1, 5, 6)).astype(np.float32),
    "b": RNG.standard_normal((3, 6, 7)).astype(np.float32),
    "g": RNG.standard_normal((6, 5)).astype(np.float32),
}


def _const(name: str, arr) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr), name)


def ops_model() -> onnx.ModelProto:
    """The model: inputs of FEEDS, one output per lowering."""
    f = lambda *s: RNG.standard_normal(s).astype(np.float32)
    inits = [
        _const("w_grp", f(8, 2, 3, 3)), _const("b_grp", f(8)), _const("s_grp", f(1, 8, 1, 1)),
        _const("w_dw", f(4, 1, 3, 3)), _const("w_1x1", f(5, 4, 1, 1)),
        _const("gb", f(7, 6)), _const("gc", f(7)),
        _const("st", np.array([1, -1], np.int64)), _const("en", np.array([4, -10], np.int64)),
        _const("ax", np.array([1, 3], np.int64)), _const("sp", np.array([2, -2], np.int64)),
        _const("two", np.array(2.0, np.float32)), _const("eps", np.array(1e-5, np.float32)),
    ]
    N = helper.make_node
    nodes = [
        N("Conv", ["x", "w_grp", "b_grp"], ["c1"], group=2, strides=[2, 2], pads=[1, 1, 1, 1]),
        N("Mul", ["c1", "s_grp"], ["c1s"]),
        N("HardSwish", ["c1s"], ["conv_group"]),
        N("Conv", ["x", "w_dw"], ["c2"], group=4, dilations=[2, 2], pads=[2, 2, 2, 2]),
        N("Relu", ["c2"], ["conv_dw"]),
        N("Conv", ["x", "w_1x1"], ["c3"]),
        N("HardSigmoid", ["c3"], ["conv_1x1"], alpha=0.2, beta=0.5),
        N("MaxPool", ["x"], ["maxpool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
          ceil_mode=1),
        N("AveragePool", ["x"], ["avg_pad"], kernel_shape=[3, 2], strides=[2, 2],
          pads=[1, 0, 1, 1], count_include_pad=1),
        N("AveragePool", ["x"], ["avg_nopad"], kernel_shape=[3, 3], strides=[2, 1],
          pads=[1, 1, 1, 1]),
        N("GlobalAveragePool", ["x"], ["gap"]),
        N("ReduceMean", ["x"], ["rmean"], axes=[1, 3], keepdims=0),
        N("ReduceMax", ["x"], ["rmax"], axes=[2], keepdims=1),
        N("Softmax", ["x"], ["softmax"], axis=2),
        N("Transpose", ["x"], ["transpose"], perm=[0, 2, 3, 1]),
        N("Slice", ["x", "st", "en", "ax", "sp"], ["slice"]),
        N("Relu", ["x"], ["xr"]),
        N("Concat", ["x", "xr"], ["concat"], axis=2),
        N("MatMul", ["a", "b"], ["matmul"]),
        N("Gemm", ["g", "gb", "gc"], ["gemm"], transA=1, transB=1, alpha=2.0, beta=0.5),
        # a decomposed LayerNorm, as in PP-OCR rec
        N("ReduceMean", ["x"], ["mu"], axes=[-1], keepdims=1),
        N("Sub", ["x", "mu"], ["d"]),
        N("Pow", ["d", "two"], ["d2"]),
        N("ReduceMean", ["d2"], ["var"], axes=[-1], keepdims=1),
        N("Add", ["var", "eps"], ["ve"]),
        N("Sqrt", ["ve"], ["sd"]),
        N("Div", ["d", "sd"], ["layernorm"]),
    ]
    outs = ["conv_group", "conv_dw", "conv_1x1", "maxpool", "avg_pad", "avg_nopad", "gap",
            "rmean", "rmax", "softmax", "transpose", "slice", "concat", "matmul", "gemm",
            "layernorm"]
    graph = helper.make_graph(
        nodes, "device_ops",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in FEEDS.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


def test_every_kernel_matches_onnxruntime(need_opencl):
    model = ops_model()
    want = ort_run(model, FEEDS)
    factory = monolib.compile(model, target="opencl")
    kinds = {n["op"] for n in factory.get_graph_json()["nodes"]}
    assert {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean", "Softmax",
            "Transpose", "Slice", "Concat", "MatMul", "Gemm"} <= kinds
    gm = monolib.GraphModule(factory["default"](monolib.opencl()))
    gm.run(**FEEDS)
    names = [o.name for o in model.graph.output]
    for i, (name, w) in enumerate(zip(names, want)):
        got = gm.get_output(i).numpy()
        assert got.shape == w.shape, name
        tol = 1e-5 * max(float(np.abs(w).max()), 1.0)
        np.testing.assert_allclose(got, w, rtol=0, atol=tol, err_msg=name)
    # a second run on other inputs: nothing stale in the device arena
    x2 = {**FEEDS, "x": -FEEDS["x"]}
    w2 = ort_run(model, x2)
    gm.run(**x2)
    np.testing.assert_allclose(gm.get_output(0).numpy(), w2[0], rtol=0, atol=1e-4)
