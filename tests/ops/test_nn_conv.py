"""Conv and ConvTranspose: NumPy reference vs ONNX Runtime, emitted C vs reference.

Cases cover the attribute combinations of the real models (PP-OCR det/rec/cls: 1x1
pointwise, 3x3 stride 2 stems, depthwise 3x3/5x5 with strides (1,1), (2,2), (2,1),
(1,2); Silero VAD: 1-D convs incl. the STFT conv, kernel 256 stride 128) plus edge cases:
sizes not multiples of the GEMM tile, K > KC (several depth blocks), M > MC, asymmetric
pads, auto_pad, dilations, groups, runtime (non-constant) weights.
"""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_node, make_node, run_c

from monolib.errors import MonolibError, ShapeError, UnsupportedOpError

RNG = np.random.default_rng(1234)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


CONV_CASES = {
    "pointwise": ((1, 8, 7, 9), (13, 8, 1, 1), {}),
    "pointwise_big_k": ((1, 300, 5, 7), (20, 300, 1, 1), {}),
    "pointwise_big_m": ((1, 16, 6, 6), (150, 16, 1, 1), {}),
    "stem_3x3_s2": ((1, 3, 33, 30), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3_s1_group1": ((2, 5, 9, 11), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_s2_packed_path": (
        (1, 5, 19, 21),
        (70, 5, 3, 3),
        {"pads": [1, 1, 1, 1], "strides": [2, 2]},
    ),
    "3x3_packed_path_no_pad": ((2, 4, 9, 30), (66, 4, 3, 3), {}),
    "direct_wide_rows": ((1, 6, 5, 70), (10, 6, 3, 5), {"pads": [1, 2, 1, 2], "strides": [1, 3]}),
    "1x3_pad_w": ((1, 6, 1, 20), (12, 6, 1, 3), {"pads": [0, 1, 0, 1]}),
    "5x1_magika": ((1, 4, 20, 3), (6, 4, 5, 1), {}),
    "asym_pads": ((1, 3, 10, 10), (4, 3, 3, 3), {"pads": [0, 1, 2, 0]}),
    "dilated": ((1, 3, 12, 12), (4, 3, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    "same_upper_s2": ((1, 3, 9, 10), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "same_lower": ((1, 3, 8, 7), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER"}),
    "valid": ((1, 3, 8, 7), (4, 3, 3, 2), {"auto_pad": "VALID"}),
    "grouped": ((1, 8, 9, 9), (12, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "grouped_dw_mult": ((1, 4, 9, 9), (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "dw3_s1": ((1, 16, 20, 37), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}),
    "dw3_s2": (
        (1, 32, 21, 40),
        (32, 1, 3, 3),
        {"group": 32, "pads": [1, 1, 1, 1], "strides": [2, 2]},
    ),
    "dw3_s21": (
        (1, 8, 12, 41),
        (8, 1, 3, 3),
        {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 1]},
    ),
    "dw3_s12": (
        (1, 8, 12, 41),
        (8, 1, 3, 3),
        {"group": 8, "pads": [1, 1, 1, 1], "strides": [1, 2]},
    ),
    "dw5_s1": ((2, 12, 13, 50), (12, 1, 5, 5), {"group": 12, "pads": [2, 2, 2, 2]}),
    "dw5_s2": (
        (1, 12, 13, 50),
        (12, 1, 5, 5),
        {"group": 12, "pads": [2, 2, 2, 2], "strides": [2, 2]},
    ),
    "dw5_s21": (
        (1, 12, 12, 40),
        (12, 1, 5, 5),
        {"group": 12, "pads": [2, 2, 2, 2], "strides": [2, 1]},
    ),
    "dw_dilated_generic": (
        (1, 4, 11, 12),
        (4, 1, 3, 2),
        {"group": 4, "pads": [2, 1, 2, 1], "dilations": [2, 2], "strides": [1, 3]},
    ),
    "conv1d_k3_s2": ((1, 9, 33), (16, 9, 3), {"pads": [1, 1], "strides": [2]}),
    "conv1d_k1": ((2, 16, 7), (1, 16, 1), {}),
    "conv1d_stft": ((1, 1, 1152), (258, 1, 256), {"strides": [128]}),
    # one-column 2-D convs run as 1-D ones (Magika: [1, 256, 512, 1], kernel 5x1)
    "column_packed": ((1, 20, 40, 1), (70, 20, 5, 1), {}),
    "column_direct": ((2, 6, 33, 1), (8, 6, 3, 1), {"pads": [1, 0, 1, 0], "strides": [2, 1]}),
    "column_depthwise": ((1, 6, 33, 1), (6, 1, 3, 1), {"group": 6, "pads": [1, 0, 1, 0]}),
    # batches of small images fold into one GEMM (silero sequence: N=32, 4 positions)
    "fold_stft": ((6, 1, 832), (258, 1, 256), {"strides": [128]}),
    "fold_1d_k3": ((5, 9, 4), (16, 9, 3), {"pads": [1, 1]}),
    "fold_1d_k3_s2": ((7, 8, 4), (12, 8, 3), {"pads": [1, 1], "strides": [2]}),
    "fold_pointwise": ((3, 10, 2, 3), (7, 10, 1, 1), {}),
    "fold_grouped_2d": ((4, 6, 5, 5), (9, 2, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
}


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv(name: str) -> None:
    xs, ws, attrs = CONV_CASES[name]
    check_node("Conv", [r(*xs), r(*ws, scale=0.3), r(ws[0])], attrs, const=[1, 2], opset=11)


def test_conv_no_bias_runtime_weights() -> None:
    check_node("Conv", [r(1, 6, 8, 9), r(4, 3, 3, 3)], {"group": 2, "pads": [1, 1, 1, 1]})


def test_conv_runtime_depthwise_weights_and_bias() -> None:
    check_node("Conv", [r(1, 6, 8, 9), r(6, 1, 3, 3), r(6)], {"group": 6, "pads": [1, 1, 1, 1]})


def test_conv_channel_mismatch_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="group"):
        make_node("Conv", [r(1, 5, 8, 8), r(4, 3, 3, 3)], {}, const=[1])


def test_conv_window_too_big_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="does not fit"):
        make_node("Conv", [r(1, 3, 2, 2), r(4, 3, 3, 3)], {}, const=[1])


def test_conv3d_emit_is_unsupported() -> None:
    node = make_node("Conv", [r(1, 2, 3, 3, 3), r(2, 2, 1, 1, 1)], {}, const=[1])
    with pytest.raises(UnsupportedOpError, match="1-D and 2-D"):
        run_c(node, [r(1, 2, 3, 3, 3), None])


def test_conv_float64_is_unsupported_in_c() -> None:
    x = RNG.standard_normal((1, 2, 4, 4))
    node = make_node("Conv", [x, RNG.standard_normal((2, 2, 1, 1))], {}, const=[1])
    with pytest.raises(MonolibError, match="float32"):
        run_c(node, [x, None])


TCONV_CASES = {
    "det_k2_s2": ((1, 8, 5, 6), (8, 4, 2, 2), {"strides": [2, 2]}),
    "pads_outpad_groups": (
        (2, 6, 5, 6),
        (6, 2, 3, 3),
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1], "group": 2},
    ),
    "dilated": ((1, 3, 4, 5), (3, 2, 3, 3), {"dilations": [2, 1], "pads": [1, 0, 0, 1]}),
    "output_shape": ((1, 3, 4, 4), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 8]}),
    "same_upper_1d": ((1, 4, 7), (4, 3, 3), {"strides": [2], "auto_pad": "SAME_UPPER"}),
    "big_channels": ((1, 96, 10, 10), (96, 24, 2, 2), {"strides": [2, 2]}),
}


@pytest.mark.parametrize("name", sorted(TCONV_CASES))
def test_conv_transpose(name: str) -> None:
    xs, ws, attrs = TCONV_CASES[name]
    cout = ws[1] * attrs.get("group", 1)
    check_node("ConvTranspose", [r(*xs), r(*ws, scale=0.3), r(cout)], attrs, const=[1, 2], opset=11)


def test_conv_transpose_runtime_weights_no_bias() -> None:
    check_node("ConvTranspose", [r(1, 4, 5, 5), r(4, 3, 2, 2)], {"strides": [2, 2]})


def test_conv_transpose_bad_weights_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="ConvTranspose"):
        make_node("ConvTranspose", [r(1, 4, 5, 5), r(3, 3, 2, 2)], {}, const=[1])
