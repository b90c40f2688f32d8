"""The device lowerings of Resize and ConvTranspose (the FPN and DB head of PP-OCR det)
against ONNX Runtime: one model holding nearest 2x with a fused add + Relu after it,
nearest to non-integer sizes, linear half_pixel, cubic, tf_crop_and_resize with an
extrapolated border, an antialiased downsampling, and ConvTranspose with stride 2 kernel
2 (+ Sigmoid), stride 2 kernel 3 with pads and output_padding, grouped with dilations and
uneven pads, and 1-D; run on the OpenCL device (PoCL in CI), on a GPU where there is
one, and compiled to PTX with NVRTC (no GPU needed). Also: PP-OCRv4/v6 det build for
both device targets, and a long device mean is a sum of partial sums."""

from __future__ import annotations

import numpy as np
import pytest

import monolib
from .conftest import check_outputs_vs_ort

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(14)
FEEDS = {
    "x": RNG.standard_normal((1, 4, 5, 6)).astype(np.float32),
    "up": RNG.standard_normal((1, 4, 10, 12)).astype(np.float32),
    "s": RNG.standard_normal((1, 4, 7)).astype(np.float32),
}


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def model() -> onnx.ModelProto:
    """FEEDS in, one output per case (opset 18: Resize's antialias)."""
    c = numpy_helper.from_array
    inits = [
        c(np.array([1, 1, 2, 2], np.float32), "sc2"),
        c(np.array([1, 4, 9, 4], np.int64), "sz_near"),
        c(np.array([1, 1, 1.5, 0.7], np.float32), "sc_lin"),
        c(np.array([1, 4, 8, 9], np.int64), "sz_cubic"),
        c(np.array([0, 0, -0.25, 0.1, 1, 1, 0.8, 1.3], np.float32), "roi"),
        c(np.array([1, 4, 6, 7], np.int64), "sz_crop"),
        c(np.array([1, 1, 0.5, 0.4], np.float32), "sc_aa"),
        c(_f(4, 3, 2, 2), "w_db"), c(_f(3), "b_db"),
        c(_f(4, 2, 3, 3), "w_pad"), c(_f(2), "b_pad"),
        c(_f(4, 3, 3, 2), "w_grp"),
        c(_f(4, 2, 3), "w_1d"), c(_f(2), "b_1d"),
    ]
    N = helper.make_node
    nodes = [
        N("Resize", ["x", "", "sc2"], ["r2"], mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        N("Add", ["r2", "up"], ["r2a"]),
        N("Relu", ["r2a"], ["near2x_add_relu"]),
        N("Resize", ["x", "", "", "sz_near"], ["near_sizes"], mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_ceil"),
        N("Resize", ["x", "", "sc_lin"], ["linear"], mode="linear",
          coordinate_transformation_mode="half_pixel"),
        N("Resize", ["x", "", "", "sz_cubic"], ["cubic"], mode="cubic",
          coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.5),
        N("Resize", ["x", "roi", "", "sz_crop"], ["crop"], mode="linear",
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0),
        N("Resize", ["up", "", "sc_aa"], ["antialias"], mode="cubic", antialias=1),
        N("ConvTranspose", ["x", "w_db", "b_db"], ["t_db"], kernel_shape=[2, 2],
          strides=[2, 2]),
        N("Sigmoid", ["t_db"], ["tconv_db"]),
        N("ConvTranspose", ["x", "w_pad", "b_pad"], ["tconv_pad"], strides=[2, 2],
          pads=[1, 1, 1, 1], output_padding=[1, 1]),
        N("ConvTranspose", ["x", "w_grp"], ["tconv_grp"], group=2, strides=[2, 1],
          dilations=[1, 2], pads=[0, 1, 2, 0]),
        N("ConvTranspose", ["s", "w_1d", "b_1d"], ["tconv_1d"], strides=[3], pads=[1, 0]),
    ]
    outs = ["near2x_add_relu", "near_sizes", "linear", "cubic", "crop", "antialias",
            "tconv_db", "tconv_pad", "tconv_grp", "tconv_1d"]
    graph = helper.make_graph(
        nodes, "resize_tconv",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in FEEDS.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(m)
    del m.graph.output[:]
    m.graph.output.extend(inferred.graph.output)
    return m


def test_resize_and_conv_transpose_on_opencl_match_onnxruntime(need_opencl):
    m = model()
    factory = monolib.compile(m, target="opencl")
    nodes = factory.get_graph_json()["nodes"]
    ops = [n["op"] for n in nodes]
    assert ops.count("Resize") == 6 and ops.count("ConvTranspose") == 4
    # the add + Relu after the 2x upsampling and the Sigmoid after the DB-style
    # ConvTranspose run inside their kernels: no elementwise kernel of their own
    assert len(nodes) == 10, ops
    gm = monolib.GraphModule(factory["default"](monolib.opencl()))
    check_outputs_vs_ort(gm, m, (FEEDS, {k: -v for k, v in FEEDS.items()}))
    crop = gm.get_output(4).numpy()
    assert (crop == -3.0).any() and (crop != -3.0).any()  # the extrapolated border


def test_resize_and_conv_transpose_compile_to_ptx(need_nvrtc):
    factory = monolib.compile(model(), target="cuda -arch=sm_90")
    dev = factory.lib.imported_modules[0]
    ptx = dev.binaries["sm_90"].decode()
    assert len(dev.functions) == 10
    for f in dev.functions:
        assert f".entry {f['name']}(" in ptx



def test_resize_and_conv_transpose_on_gpu_match_onnxruntime(need_gpu, need_nvrtc):
    """The same model on a CUDA GPU (skipped where there is none)."""
    m = model()
    gm = monolib.GraphModule(monolib.compile(m, target="cuda")["default"](monolib.cuda()))
    check_outputs_vs_ort(gm, m, (FEEDS, {k: -v for k, v in FEEDS.items()}))


def test_long_device_mean_is_a_sum_of_partial_sums(need_opencl):
    """ReduceMean over a 160x160 map (PP-OCRv6 det's squeeze-excitation): within 1e-3
    of the float64 mean of values near 1000, where one serial float sum is 5e-3 off
    (and drifted PP-OCRv6 det 7.5e-4 of its range from ORT; 5e-5 with partial sums)."""
    from monolib.compiler.testing import make_node_model

    x = (1000 + np.random.default_rng(1).standard_normal((1, 3, 160, 160))).astype(np.float32)
    m = make_node_model("ReduceMean", {"x": x}, {"axes": [2, 3], "keepdims": 1}, opset=13)
    gm = monolib.GraphModule(monolib.compile(m, target="opencl")["default"](monolib.opencl()))
    gm.run(x=x)
    exact = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(gm.get_output(0).numpy(), exact, rtol=0, atol=1e-3)


@pytest.mark.parametrize("key", ["ppocr_det", "ppocrv6_det"])
def test_det_models_compile_for_device_targets(key, need_nvrtc):
    """PP-OCRv4 and v6 det (FPN Resizes, DB-head ConvTransposes) build for both device
    targets: OpenCL C source, and PTX for sm_90 with every kernel an entry."""
    from monolib.models import fetch_model

    path = str(fetch_model(key))
    ocl = monolib.compile(path, target="opencl", shapes={"x": (1, 3, 640, 640)})
    assert {"Resize", "ConvTranspose"} <= {n["op"] for n in ocl.get_graph_json()["nodes"]}
    dev = monolib.compile(path, target="cuda -arch=sm_90",
                          shapes={"x": (1, 3, 640, 640)}).lib.imported_modules[0]
    ptx = dev.binaries["sm_90"].decode()
    assert all(f".entry {f['name']}(" in ptx for f in dev.functions)
