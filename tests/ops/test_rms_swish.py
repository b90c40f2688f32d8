"""RMSNormalization (23), Swish (24) and SwiGLU (28) against ``onnx.reference``: axes,
broadcast scales, float64, alpha."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("shape,axis,scale_shape,dtype", [
    ((2, 3, 64), -1, (64,), np.float32),
    ((2, 3, 4, 5), 1, (1, 4, 1), np.float32),
    ((3, 7), 0, (3, 7), np.float64),
])
def test_rms_normalization(shape, axis, scale_shape, dtype):
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    check_node("RMSNormalization", {"x": x}, ["y"], opset=23, rtol=1e-5, atol=1e-6,
               consts={"s": RNG.standard_normal(scale_shape).astype(dtype)}, axis=axis,
               epsilon=1e-3)


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swish_and_swiglu(alpha):
    a = (RNG.standard_normal((4, 33)) * 4).astype(np.float32)
    b = RNG.standard_normal((4, 33)).astype(np.float32)
    check_node("Swish", {"a": a}, ["y"], opset=24, alpha=alpha)
    check_node("SwiGLU", {"a": a, "b": b}, ["y"], opset=28, alpha=alpha)
