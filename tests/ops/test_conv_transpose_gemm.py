"""ConvTranspose whose kernel tiles the output (stride == kernel): the fused GEMM +
depth-to-space kernel of conv_transpose.h (``ml_tconv_exact``), against the NumPy reference and
ONNX Runtime, under each tiling of gemm.h, at 1 and 2 threads; shapes it does not cover
(output cropping, overlap, a packed A above ``FUSED_MAX_A_BYTES``) take the other paths.
"""

from __future__ import annotations


import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import TILINGS, NodeContext, check_node, make_node, run_threads
from onnx import helper

from monolib.compiler.build import lower
from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn.conv_transpose import FUSED_MAX_A_BYTES
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(23)

def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


# name -> (X shape, W shape, attrs, bias); every one has stride == kernel, no pads
CASES = {
    # 2x2: the interleaving store; M = 5*4 = 20 rows (a short last panel of 2)
    "k2_odd_hw": ((1, 7, 9, 37), (7, 5, 2, 2), {"strides": [2, 2]}, True),
    # W < one block of pixels: only the zero-padded block
    "k2_narrow": ((2, 3, 5, 6), (3, 4, 2, 2), {"strides": [2, 2]}, False),
    # M = 1*4 (PP-OCR det's last layer): one 4-row panel
    "k2_one_channel": ((1, 24, 6, 50), (24, 1, 2, 2), {"strides": [2, 2]}, True),
    # 3x3 and 2x3: the generic scatter (M = 3*9 = 27, 4*6 = 24)
    "k3": ((1, 4, 5, 19), (4, 3, 3, 3), {"strides": [3, 3]}, True),
    "k2x3": ((1, 6, 4, 33), (6, 4, 2, 3), {"strides": [2, 3]}, True),
    # groups: each group one call on its slice of the packed A
    "groups": ((2, 6, 4, 20), (6, 2, 2, 2), {"strides": [2, 2], "group": 3}, True),
    # 1-D: height 1, KW 2 (interleaving) and 3
    "1d_k2": ((2, 5, 41), (5, 7, 2), {"strides": [2]}, True),
    "1d_k3": ((1, 3, 18), (3, 2, 3), {"strides": [3]}, False),
}


def _inputs(case: str) -> tuple[list[np.ndarray], dict]:
    xs, ws, attrs, bias = CASES[case]
    cout = ws[1] * attrs.get("group", 1)
    ins = [r(*xs), r(*ws, scale=0.3)] + ([r(cout)] if bias else [])
    return ins, attrs


def _emitted(node) -> str:
    return op_of(node).emit(node, NodeContext(node, "affine"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_kernel(case: str) -> None:
    ins, attrs = _inputs(case)
    const = [1, 2] if len(ins) > 2 else [1]
    node = check_node("ConvTranspose", ins, attrs, const=const, opset=11)
    assert "ml_tconv_exact(" in _emitted(node)


@pytest.mark.parametrize("tiling", sorted(TILINGS))
@pytest.mark.parametrize("case", ["k2_odd_hw", "k3"])
def test_fused_kernel_tiling(case: str, tiling: str) -> None:
    """Two-panel tiles (interleaving 4 vectors per row pair) and 4-float vectors."""
    ins, attrs = _inputs(case)
    check_node(
        "ConvTranspose",
        ins,
        attrs,
        const=[1, 2],
        opset=11,
        options=TILINGS[tiling],
        ort=False,
        epilogue=False,
    )


def test_fused_kernel_runtime_weights() -> None:
    """Weights that are an input: packed at run time into scratch, same kernel."""
    ins, attrs = _inputs("k2_odd_hw")
    node = check_node("ConvTranspose", ins, attrs, const=[], opset=11)
    body = _emitted(node)
    assert "ml_pack_a(" in body and "ml_tconv_exact(" in body


@pytest.mark.parametrize(
    "xs, ws, attrs",
    [
        # output cropped at the end (pads, output_padding adds a row): not an exact tiling
        ((1, 3, 4, 6), (3, 2, 2, 2), {"strides": [2, 2], "pads": [0, 0, 1, 1]}),
        ((1, 3, 4, 6), (3, 2, 2, 2), {"strides": [2, 2], "output_padding": [1, 0]}),
        # overlapping taps
        ((1, 3, 4, 6), (3, 2, 3, 3), {"strides": [2, 2]}),
    ],
)
def test_other_shapes_take_the_col2im_path(xs, ws, attrs) -> None:
    node = check_node("ConvTranspose", [r(*xs), r(*ws, scale=0.3)], attrs, const=[1], opset=11)
    body = _emitted(node)
    assert "ml_col2im_add(" in body and "ml_tconv_exact(" not in body


def test_large_weights_take_the_blocked_gemm() -> None:
    """A packed A above FUSED_MAX_A_BYTES would be re-read per pixel block: GEMM + col2im."""
    cin = FUSED_MAX_A_BYTES // (4 * 24) + 1  # M = 6 * 2 * 2 = 24 rows of K = cin floats
    node = make_node(
        "ConvTranspose", [r(1, cin, 2, 3), r(cin, 6, 2, 2)], {"strides": [2, 2]}, const=[1]
    )
    body = _emitted(node)
    assert "ml_col2im_exact_epi(" in body and "ml_tconv_exact(" not in body


def _model() -> tuple:
    """Relu(ConvTranspose 2x2/2 16->12 + bias) -> Sigmoid(ConvTranspose 2x2/2 12->1), the
    PP-OCR det head at a smaller size, each large enough to split over threads; a 1-D
    one (height 1: split over pixel blocks) beside it."""
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w1", "b1"], ["t1"], strides=[2, 2]),
        helper.make_node("Relu", ["t1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", "w2", "b2"], ["t2"], strides=[2, 2]),
        helper.make_node("Sigmoid", ["t2"], ["y"]),
        helper.make_node("ConvTranspose", ["u", "w3"], ["v"], strides=[2]),
    ]
    shapes = {"w1": (16, 12, 2, 2), "b1": (12,), "w2": (12, 1, 2, 2), "b2": (1,), "w3": (40, 30, 2)}
    model = make_model(
        nodes,
        [("x", F32, [1, 16, 80, 84]), ("u", F32, [1, 40, 3000])],
        [("y", F32, [1, 1, 320, 336]), ("v", F32, [1, 30, 6000])],
        {k: r(*s, scale=0.3) for k, s in shapes.items()},
    )
    feeds = {"x": r(1, 16, 80, 84), "u": r(1, 40, 3000)}
    return model, feeds


def test_model_threads_and_fused_activations() -> None:
    model, feeds = _model()
    source = lower(model)[0]
    # both 2-D ones and the 1-D one fused, Relu/Sigmoid in their epilogues
    assert source.count("ml_tconv_exact(48, 16, 2, 2, 80, 84,") == 1
    assert source.count("ml_tconv_exact(4, 12, 2, 2, 160, 168,") == 1
    assert source.count("ml_tconv_exact(60, 40, 1, 2, 1, 3000,") == 1
    assert "ConvTranspose -> Relu" in source and "ConvTranspose -> Sigmoid" in source
    want = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    for got, ref in zip(two, one):  # tasks split rows / pixels: every sum keeps its order
        np.testing.assert_array_equal(got, ref)
