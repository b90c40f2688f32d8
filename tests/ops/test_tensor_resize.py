"""Resize (10, 11, 13, 18, 19) nearest, linear and cubic against ONNX Runtime, including
the PP-OCR detector's configuration (nearest, asymmetric, floor, scale 2); antialias,
tf_crop_and_resize and fractional align_corners against ``onnx.reference`` (ONNX
Runtime differs or lacks them)."""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_op, make_node

from monolib.errors import UnsupportedOpError

R = np.random.default_rng(5)
F = lambda *v: np.array(v, np.float32)
I64 = lambda *v: np.array(v, np.int64)
EMPTY = np.zeros(0, np.float32)

COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def x4(*shape):
    return R.standard_normal(shape).astype(np.float32)


def test_ppocr_detector_config():
    attrs = {
        "mode": "nearest",
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "floor",
    }
    check_op(
        "Resize", [x4(1, 4, 5, 6), EMPTY, F(1, 1, 2, 2)], attrs, opset=12, const=(1, 2)
    )
    check_op(
        "Resize", [x4(1, 2, 3, 4), EMPTY, F(1, 1, 8, 8)], attrs, opset=12, const=(1, 2)
    )


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest", NEAREST)
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.6, 1.7), (1, 1, 3, 0.5)], ids=str)
def test_nearest_scales(coord, nearest, scales):
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    check_op("Resize", [x4(1, 2, 5, 6), EMPTY, F(*scales)], attrs, opset=13, const=(1, 2))


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.6, 1.7), (1, 1, 1, 2.5)], ids=str)
def test_linear_scales(coord, scales):
    attrs = {"mode": "linear", "coordinate_transformation_mode": coord}
    if coord == "align_corners" and scales[2] == 0.6:
        return _onnx_reference_only(attrs, scales)
    check_op(
        "Resize",
        [x4(1, 2, 5, 6), EMPTY, F(*scales)],
        attrs,
        opset=13,
        const=(1, 2),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "mode,sizes",
    [
        ("nearest", (1, 2, 10, 12)),
        ("linear", (1, 2, 10, 12)),
        ("nearest", (1, 2, 3, 7)),
        ("linear", (1, 2, 3, 7)),
        ("nearest", (2, 2, 5, 6)),
    ],
    ids=str,
)
def test_sizes(mode, sizes):
    attrs = {"mode": mode, "coordinate_transformation_mode": "half_pixel"}
    check_op(
        "Resize",
        [x4(1, 2, 5, 6), None, None, I64(*sizes)],
        attrs,
        opset=13,
        const=(3,),
        rtol=1e-5,
        atol=1e-5,
    )


def test_resize10_and_upsample():
    check_op(
        "Resize",
        [x4(1, 2, 3, 4), F(1, 1, 2, 3)],
        {"mode": "nearest"},
        opset=10,
        const=(1,),
    )
    check_op(
        "Resize",
        [x4(1, 2, 3, 4), F(1, 1, 2, 2)],
        {"mode": "linear"},
        opset=10,
        const=(1,),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize18_axes_and_policy(policy):
    attrs = {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": policy}
    check_op(
        "Resize",
        [x4(1, 2, 4, 6), None, None, I64(8, 9)],
        attrs,
        opset=18,
        const=(3,),
        rtol=1e-5,
        atol=1e-5,
    )


def test_resize19_half_pixel_symmetric():
    attrs = {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}
    check_op(
        "Resize",
        [x4(1, 1, 4, 5), None, F(1, 1, 1.5, 2.3)],
        attrs,
        opset=19,
        const=(2,),
        rtol=1e-5,
        atol=1e-5,
    )


def test_linear_3d_trilinear():
    attrs = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    check_op(
        "Resize",
        [x4(1, 1, 3, 4, 5), EMPTY, F(1, 1, 2, 1.5, 2)],
        attrs,
        opset=13,
        const=(1, 2),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.6, 1.7)], ids=str)
@pytest.mark.parametrize("exclude", [0, 1])
def test_cubic(coord, scales, exclude):
    attrs = {"mode": "cubic", "coordinate_transformation_mode": coord, "exclude_outside": exclude}
    if exclude:
        attrs["cubic_coeff_a"] = -0.5
    if coord == "align_corners" and scales[2] == 0.6:
        return _onnx_reference_only(attrs, scales)
    check_op("Resize", [x4(1, 2, 5, 6), EMPTY, F(*scales)], attrs, opset=13,
             const=(1, 2), rtol=1e-4, atol=1e-5)  # fmt: skip


def _onnx_reference_only(attrs, scales):
    """align_corners with a fractional output length: ONNX Runtime divides by (out - 1),
    ONNX's reference (which monolib follows) by (scale * in - 1): compare with the latter."""
    from refnode import check_node

    check_node("Resize", {"x": x4(1, 2, 5, 6)}, ["y"], opset=13, rtol=1e-4, atol=1e-5,
               consts={"roi": EMPTY, "scales": F(*scales)}, **attrs)


@pytest.mark.parametrize("mode,scales", [("linear", (1, 1, 0.3, 0.45)), ("cubic", (1, 1, 0.15, 0.7))])
def test_antialias_downsample(mode, scales):
    # cubic at 0.15 has 2 * 14 taps on one axis: the tap-loop path, not the unrolled one
    from refnode import check_node

    check_node("Resize", {"x": x4(1, 2, 13, 11)}, ["y"], opset=18, rtol=1e-4, atol=1e-5,
               consts={"roi": EMPTY, "scales": F(*scales)}, mode=mode, antialias=1)


def test_tf_crop_and_resize_extrapolation():
    from refnode import check_node

    check_node("Resize", {"x": x4(1, 2, 5, 6)}, ["y"], opset=18, rtol=1e-4, atol=1e-5,
               consts={"roi": F(0.2, -0.3, 0.9, 1.4), "scales": EMPTY, "sizes": I64(4, 7)},
               axes=[2, 3],
               mode="cubic", coordinate_transformation_mode="tf_crop_and_resize",
               extrapolation_value=-3.0)


def test_unsupported_modes():
    with pytest.raises(UnsupportedOpError, match="mode 'area'"):
        make_node("Resize", [x4(1, 1, 4, 4), EMPTY, F(1, 1, 2, 2)], {"mode": "area"}, 13, (1, 2))
    with pytest.raises(UnsupportedOpError, match="antialias"):
        make_node("Resize", [x4(1, 1, 4, 4), None, F(1, 1, 0.5, 0.5)],
                {"mode": "nearest", "antialias": 1}, 18, (2,))  # fmt: skip


def test_runtime_scales_without_bound_rejected():
    """Run-time scales compile only with a max_sizes bound (tests/ops/test_bounded_sizes.py)."""
    with pytest.raises(UnsupportedOpError, match=r"scales.*max_sizes=.*compile-time constant"):
        make_node("Resize", [x4(1, 1, 4, 4), EMPTY, F(1, 1, 2, 2)], {}, 13, (1,))
