"""RoiAlign (adaptive sampling grid, both coordinate modes, avg and max, rois partly
outside the image) against ``onnx.reference``."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(17)


@pytest.mark.parametrize("mode,coord,ratio", [("avg", "half_pixel", 0),
                                              ("max", "output_half_pixel", 2)])
def test_roi_align(mode, coord, ratio):
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 7.3, 8.0], [-2.0, -1.0, 4.0, 3.5], [3.0, 2.0, 14.0, 12.0]],
                    np.float32)
    check_node("RoiAlign", {"x": x, "rois": rois, "b": np.array([1, 0, 1])}, ["y"], opset=16,
               mode=mode, coordinate_transformation_mode=coord, sampling_ratio=ratio,
               output_height=3, output_width=4, spatial_scale=0.8, rtol=1e-4, atol=1e-5)
