"""Separable two-tap linear resize (resize.h ``ml_resize_linear2``): up- and
downsampling of H and W, one axis alone, every coordinate transformation ONNX Resize
has for linear mode, several planes and a batch, against ONNX's reference evaluator
(the spec; ONNX Runtime's align_corners differs from it at a non-integer ratio, 0.42
off on ``h_only``); with a fused
residual Add + Relu (the tile epilogue per output row); a large one split over the
thread pool gives the single-thread bits. Shapes the kernel does not take (a resized
channel axis, tf_crop_and_resize's extrapolated pixels, cubic) keep the generic loop."""

from __future__ import annotations

import numpy as np
import pytest
from harness import NodeContext, make_node, run_threads
from onnx import TensorProto, helper, numpy_helper, reference

from monolib.compiler.build import lower
from monolib.compiler.ops import op_of

RNG = np.random.default_rng(23)
F = TensorProto.FLOAT

# name -> (input shape, scales, coordinate_transformation_mode)
CASES = {
    "up2_half_pixel": ((1, 3, 7, 9), (1, 1, 2, 2), "half_pixel"),
    "up2_align_corners": ((2, 2, 5, 8), (1, 1, 2, 2), "align_corners"),
    "up_odd_pytorch": ((1, 4, 6, 5), (1, 1, 1.7, 2.5), "pytorch_half_pixel"),
    "down_asymmetric": ((1, 2, 17, 23), (1, 1, 0.5, 0.6), "asymmetric"),
    "w_only": ((1, 3, 4, 10), (1, 1, 1, 3), "half_pixel"),
    "h_only": ((1, 3, 9, 4), (1, 1, 2.5, 1), "align_corners"),
    "big_split": ((1, 48, 40, 44), (1, 1, 2, 2), "half_pixel"),
}


def _out_shape(shape, scales):
    return [int(np.floor(n * s)) for n, s in zip(shape, scales)]


def _model(fused: bool):
    nodes, inits, ins, outs = [], [], [], []
    for name, (shape, scales, coord) in CASES.items():
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), f"s_{name}"))
        y = f"r_{name}" if fused else f"y_{name}"
        nodes.append(helper.make_node("Resize", [f"x_{name}", "", f"s_{name}"], [y],
                                      mode="linear", coordinate_transformation_mode=coord))
        out = _out_shape(shape, scales)
        if fused:  # a residual Add + Relu: the tile epilogue of each output row
            inits.append(numpy_helper.from_array(RNG.standard_normal(out).astype(np.float32),
                                                 f"a_{name}"))
            nodes += [helper.make_node("Add", [y, f"a_{name}"], [f"t_{name}"]),
                      helper.make_node("Relu", [f"t_{name}"], [f"y_{name}"])]
        ins.append(helper.make_tensor_value_info(f"x_{name}", F, list(shape)))
        outs.append(helper.make_tensor_value_info(f"y_{name}", F, out))
    graph = helper.make_graph(nodes, "resize", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "add_relu"])
def test_linear_resize_kernel(fused: bool) -> None:
    model = _model(fused)
    source = lower(model)[0]
    assert source.count("ml_resize_linear2(") == len(CASES) + 1  # + its definition
    feeds = {f"x_{n}": RNG.standard_normal(s).astype(np.float32) for n, (s, _, _) in CASES.items()}
    want = reference.ReferenceEvaluator(model).run(None, feeds)
    one, two = run_threads(model, feeds)
    for name, got, ref in zip(CASES, one, want):
        assert got.shape == ref.shape, name
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=name)
        if fused:
            assert (got >= 0).all(), name
    for name, a, b in zip(CASES, one, two):  # rows are independent: the same bits
        np.testing.assert_array_equal(a, b, err_msg=name)


def _source(shape, scales, attrs) -> str:
    x = RNG.standard_normal(shape).astype(np.float32)
    roi = None  # tf_crop_and_resize: a crop reaching past the image (extrapolated pixels)
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        roi = np.array([0, 0, -0.2, 0.1, 1, 1, 1.1, 0.9], np.float32)
    node = make_node("Resize", [x, roi, np.array(scales, np.float32)], attrs,
                     const=(1, 2) if roi is not None else (2,), opset=13)
    ctx = NodeContext(node)
    return op_of(node).emit(node, ctx)


@pytest.mark.parametrize(
    "shape, scales, attrs, why",
    [
        ((1, 4, 5, 6), (1, 2, 2, 2), {"mode": "linear"}, "the channel axis resized"),
        ((1, 2, 5, 6), (1, 1, 2, 2),
         {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"},
         "extrapolated pixels"),
        ((1, 2, 5, 6), (1, 1, 2, 2), {"mode": "cubic"}, "four taps"),
    ],
)
def test_other_resizes_keep_the_generic_loop(shape, scales, attrs, why) -> None:
    assert "ml_resize_linear2(" not in _source(shape, scales, attrs), why


def test_eligible_node_takes_the_kernel() -> None:
    src = _source((1, 2, 5, 6), (1, 1, 2, 2), {"mode": "linear"})
    assert "ml_resize_linear2(" in src
