"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool vs ONNX Runtime and the
NumPy reference: strides, pads, auto_pad, ceil_mode, count_include_pad, dilations,
1-D pools, MaxPool's Indices output, and the fused epilogue path (output_expr)."""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_node, make_node

from monolib.errors import ShapeError

RNG = np.random.default_rng(7)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


MAX_CASES = {
    "cls_2x2_s2": ((1, 3, 8, 9), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "3x3_s2_pad_ceil": (
        (1, 3, 8, 9),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    ),
    "1d_same_upper": ((1, 3, 10), {"kernel_shape": [3], "strides": [2], "auto_pad": "SAME_UPPER"}),
    "dilated": (
        (2, 2, 11, 10),
        {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 0, 1, 2]},
    ),
}


@pytest.mark.parametrize("name", sorted(MAX_CASES))
def test_maxpool(name: str) -> None:
    xs, attrs = MAX_CASES[name]
    check_node("MaxPool", [r(*xs)], attrs, opset=12)


def test_maxpool_indices() -> None:
    check_node(
        "MaxPool",
        [r(2, 3, 8, 9)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        n_outputs=2,
        opset=12,
    )


AVG_CASES = {
    "rec_3x2_s3x2": ((1, 4, 12, 20), {"kernel_shape": [3, 2], "strides": [3, 2]}),
    "pad_exclude": (
        (1, 3, 8, 9),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "pad_include": (
        (1, 3, 8, 9),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    "pad_include_ceil": (
        (1, 3, 8, 9),
        {
            "kernel_shape": [3, 3],
            "strides": [2, 2],
            "pads": [1, 1, 1, 1],
            "count_include_pad": 1,
            "ceil_mode": 1,
        },
    ),
    "ceil_no_pad": ((1, 3, 7, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "same_lower": ((1, 2, 7, 7), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
}


@pytest.mark.parametrize("name", sorted(AVG_CASES))
def test_averagepool(name: str) -> None:
    xs, attrs = AVG_CASES[name]
    check_node("AveragePool", [r(*xs)], attrs, opset=11)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 9), (1, 5, 17), (1, 3, 1, 1)])
def test_global_pool(op: str, shape: tuple[int, ...]) -> None:
    check_node(op, [r(*shape)], {})


def test_pool_without_kernel_shape_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="kernel_shape"):
        make_node("MaxPool", [r(1, 2, 4, 4)], {"kernel_shape": [2]})


def test_global_pool_needs_spatial_dims() -> None:
    with pytest.raises(ShapeError, match=r"\[N, C, \.\.\.\]"):
        make_node("GlobalAveragePool", [r(2, 3)], {})
