"""Det against ``onnx.reference``: batches, 1x1 and 4x4, a singular matrix, float64."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(31)


@pytest.mark.parametrize("shape,dtype", [((3, 4, 4), np.float32), ((1, 1), np.float32),
                                         ((2, 2, 3, 3), np.float64)])
def test_det(shape, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    if len(shape) == 3:
        x[1, 3] = x[1, 0] * 2  # singular: determinant 0
    check_node("Det", {"x": x}, ["y"], opset=22, rtol=1e-4, atol=1e-5)
