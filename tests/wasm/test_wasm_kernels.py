"""The WebAssembly-only kernel paths (issue 17, speed) against ONNX Runtime, on odd shapes:
gemm.h's micro-kernel in passes of ``ML_UK_ROWS`` rows (row counts that end mid-pass,
column tails), conv_depthwise.h's tile with its input-row loop not unrolled (3x3 and
5x5, strides 1 and 2) and pool.h's SIMD128 interior of max and average pools (strides 1
and 2, widths that leave a partial last vector). One small model, one ``.wasm``.
"""

from __future__ import annotations

import numpy as np
import pytest


def _model(path: str) -> str:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    c = 8

    def w(name, *shape):
        return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)

    inits = [w("w1", 13, c, 1, 1), w("b1", 13), w("dw5", c, 1, 5, 5), w("dw3", c, 1, 3, 3),
             w("b8", c), w("mm", 21, 19), w("w3", 7, c, 3, 3)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["pw"]),  # 13 rows: 6 + 6 + 1
        helper.make_node("Conv", ["x", "dw5", "b8"], ["d5"], group=c, pads=[2, 2, 2, 2]),
        helper.make_node("Conv", ["x", "dw3", "b8"], ["d3"], group=c, pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Conv", ["x", "w3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("MatMul", ["x", "mm"], ["mmo"]),  # run-time A rows of 21
        helper.make_node("MaxPool", ["x"], ["mp2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxPool", ["x"], ["mp3"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["ap3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["ap2"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    outs = {"pw": [1, 13, 9, 21], "d5": [1, c, 9, 21], "d3": [1, c, 5, 11], "c3": [1, 7, 9, 21],
            "mmo": [1, c, 9, 19], "mp2": [1, c, 4, 10], "mp3": [1, c, 5, 11],
            "ap3": [1, c, 9, 21], "ap2": [1, c, 4, 10]}
    graph = helper.make_graph(
        nodes, "wasm_kernels",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 9, 21])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, sh) for o, sh in outs.items()],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_wasm_kernel_paths_match_ort(tmp_path, ort_run):
    pytest.importorskip("ziglang")
    pytest.importorskip("wasmtime")
    import monolib

    model = _model(str(tmp_path / "kernels.onnx"))
    factory = monolib.compile(model, target="c -mtriple=wasm32-wasi", shapes={"x": (1, 8, 9, 21)})
    gm = monolib.GraphModule(monolib.load_module(factory.export_library(str(tmp_path / "k"))))
    x = np.random.default_rng(5).standard_normal((1, 8, 9, 21)).astype(np.float32)
    gm.run(x=x)
    want = ort_run(model, {"x": x})
    assert len(want) == gm.get_num_outputs() == 9
    for i, ref in enumerate(want):
        got = gm.get_output(i).numpy()
        assert got.shape == ref.shape, i
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=f"output {i}")
