"""GridSample (every mode and padding mode, 2-D and 3-D, grid points far outside
[-1, 1]) and AffineGrid (2-D, 3-D) against ``onnx.reference``."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(2)


@pytest.mark.parametrize("mode,pad,align,shape", [
    ("linear", "reflection", 0, (2, 3, 4, 5, 3)),
    ("nearest", "zeros", 1, (1, 2, 5, 4)),
    ("cubic", "border", 0, (2, 2, 4, 6)),
    ("cubic", "reflection", 1, (1, 1, 5, 3)),
])
def test_grid_sample(mode, pad, align, shape):
    r = len(shape) - 2
    x = RNG.standard_normal(shape).astype(np.float32)
    grid = (RNG.random((shape[0], *([3] * r), r)) * 5 - 2.5).astype(np.float32)
    check_node("GridSample", {"x": x, "grid": grid}, ["y"], opset=21, mode=mode,
               padding_mode=pad, align_corners=align, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size,align", [([2, 3, 4, 5], 0), ([1, 1, 3, 2, 4], 1)])
def test_affine_grid(size, align):
    r = len(size) - 2
    theta = RNG.standard_normal((size[0], r, r + 1)).astype(np.float32)
    check_node("AffineGrid", {"theta": theta}, ["grid"], consts={"size": np.array(size)},
               align_corners=align)
