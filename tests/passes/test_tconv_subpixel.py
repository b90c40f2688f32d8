"""Overlapping strided ConvTransposes as a sub-pixel Conv + DepthToSpace (+ Slice)
(``passes/tconv_subpixel.py``, run by the C backend).

Kernels 3 to 6 at strides 2 and 3, pads 0 to 2, output_padding, output_shape and
SAME_UPPER, a batch of 2, with and without bias, a fused Relu after: outputs match ONNX
Runtime, and the library's graph has the Conv and DepthToSpace in place of the
ConvTranspose. What stays (kernel == stride, groups, dilation, unequal strides) is left to the ConvTranspose kernels and still matches. The per-dim tap table
is the ConvTranspose's own arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import monolib
from monolib.compiler.passes.tconv_subpixel import subpixel_taps
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(5)


def _model(n, cin, cout, h, w, k, s, attrs, bias=True, relu=False, group=1, strides=None):
    inits = [numpy_helper.from_array(
        (RNG.standard_normal((cin, cout // group, k, k)) * 0.2).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(cout).astype(np.float32), "b"))
        ins.append("b")
    nodes = [helper.make_node("ConvTranspose", ins, ["t" if relu else "y"],
                              strides=strides or [s, s],
                              kernel_shape=[k, k], group=group, **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    g = helper.make_graph(nodes, "tc", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [n, cin, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


REWRITTEN = {
    "4x4_s2_p1": (1, 16, 8, 20, 17, {"pads": [1, 1, 1, 1]}),
    "3x3_s2_p1_op1": (1, 8, 12, 13, 9, {"pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    "3x3_s2_p0": (2, 6, 5, 11, 14, {}),
    "5x5_s2_p2_op1": (1, 7, 9, 10, 12, {"pads": [2, 2, 2, 2], "output_padding": [1, 1]}),
    "6x6_s3_p1": (1, 5, 4, 9, 8, {"pads": [1, 2, 1, 0]}),
    "4x4_s2_output_shape": (1, 6, 6, 10, 10, {"output_shape": [19, 20]}),
    "4x4_s2_same_upper": (1, 6, 6, 7, 9, {"auto_pad": "SAME_UPPER"}),
}
KERNELS = {"4x4_s2_p1": (4, 2), "3x3_s2_p1_op1": (3, 2), "3x3_s2_p0": (3, 2),
           "5x5_s2_p2_op1": (5, 2), "6x6_s3_p1": (6, 3), "4x4_s2_output_shape": (4, 2),
           "4x4_s2_same_upper": (4, 2)}


def _check(model, x):
    want = ort_run(model, {"x": x})[0]
    del model.graph.output[:]  # the output typed with its shape (the checker needs one)
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, want.shape))
    factory = monolib.compile(model)
    gm = monolib.GraphModule(factory["default"](monolib.cpu()))
    gm.run(x=x)
    got = gm.get_output(0).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    return [nd["op"] for nd in factory.graph_json["nodes"]]


@pytest.mark.parametrize("bias,relu", [(True, False), (False, True)])
@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_rewritten_matches_onnxruntime(name, bias, relu):
    n, cin, cout, h, w, attrs = REWRITTEN[name]
    k, s = KERNELS[name]
    model = _model(n, cin, cout, h, w, k, s, attrs, bias=bias, relu=relu)
    x = RNG.standard_normal((n, cin, h, w)).astype(np.float32)
    ops = _check(model, x)
    assert "ConvTranspose" not in ops and "DepthToSpace" in ops and "Conv" in ops, ops


@pytest.mark.parametrize("case", ["tiles_exactly", "padded_tiles", "groups", "dilated",
                                  "unequal_strides"])
def test_left_to_the_conv_transpose_kernels(case):
    if case == "tiles_exactly":
        model = _model(1, 8, 8, 10, 10, 2, 2, {})
    elif case == "padded_tiles":  # 2x2 / 2, pad 1: a 2x2 window per phase, 4x the work
        model = _model(1, 8, 8, 10, 10, 2, 2, {"pads": [1, 1, 1, 1]})
    elif case == "groups":
        model = _model(1, 8, 8, 10, 10, 4, 2, {"pads": [1, 1, 1, 1]}, group=2)
    elif case == "dilated":
        model = _model(1, 8, 8, 10, 10, 3, 2, {"dilations": [2, 2]})
    else:
        model = _model(1, 8, 8, 10, 10, 4, 2, {"pads": [1, 1, 1, 1]}, strides=[2, 1])
    x = RNG.standard_normal((1, 8, 10, 10)).astype(np.float32)
    assert "ConvTranspose" in _check(model, x)


@pytest.mark.parametrize("k,s,pt", [(4, 2, 1), (3, 2, 1), (3, 2, 0), (6, 3, 1), (5, 2, 2)])
def test_taps_are_the_conv_transposes(k, s, pt):
    """Phase r's window position u with tap ky reads input row i + lo + u for output
    row s*i + r: the row the ConvTranspose's own formula oy = iy*s - pt + ky gives."""
    lo, size, taps = subpixel_taps(k, s, pt)
    seen = set()
    for r in range(s):
        for u, ky in taps[r]:
            assert 0 <= u < size
            for i in range(5):
                iy = i + lo + u
                assert iy * s - pt + ky == s * i + r
            seen.add(ky)
    assert seen == set(range(k))  # every tap is used by one phase


def _model_1d(n, cin, cout, length, k, s, attrs, bias=True):
    inits = [numpy_helper.from_array(
        (RNG.standard_normal((cin, cout, k)) * 0.2).astype(np.float32), "w")]
    ins = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(cout).astype(np.float32), "b"))
        ins.append("b")
    nodes = [helper.make_node("ConvTranspose", ins, ["t"], strides=[s], kernel_shape=[k],
                              **attrs),
             helper.make_node("LeakyRelu", ["t"], ["y"], alpha=0.1)]
    g = helper.make_graph(nodes, "tc1", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [n, cin, length])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


REWRITTEN_1D = {
    # HiFi-GAN's upsampling: kernel 2s, pad s/2
    "16_s8_p4": (1, 32, 16, 50, 16, 8, {"pads": [4, 4]}),
    "4_s2_p1": (2, 12, 10, 37, 4, 2, {"pads": [1, 1]}),
    # the phases overshoot the output: a Slice after
    "5_s3_p1_op2": (1, 9, 7, 20, 5, 3, {"pads": [1, 1], "output_padding": [2]}),
    "3_s2_p0": (1, 6, 5, 15, 3, 2, {}),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", sorted(REWRITTEN_1D))
def test_rewritten_1d_matches_onnxruntime(name, bias):
    """1-D: Conv to s phases, Reshape / Transpose / Reshape back, the LeakyRelu after."""
    n, cin, cout, length, k, s, attrs = REWRITTEN_1D[name]
    model = _model_1d(n, cin, cout, length, k, s, attrs, bias=bias)
    x = RNG.standard_normal((n, cin, length)).astype(np.float32)
    ops = _check(model, x)
    assert "ConvTranspose" not in ops and "Conv" in ops, ops
    assert "Transpose" in ops or any("Transpose" in str(o) for o in ops), ops
