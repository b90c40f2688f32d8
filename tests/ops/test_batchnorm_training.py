"""BatchNormalization training mode (14, 15) against ``onnx.reference``: Y from the
batch statistics, the running mean/variance outputs with momentum, 3-D and 4-D."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(37)


@pytest.mark.parametrize("shape,opset", [((2, 3, 4, 5), 15), ((4, 2, 6), 14)])
def test_batchnorm_training(shape, opset):
    c = shape[1]
    x = (RNG.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    check_node("BatchNormalization", {"x": x}, ["y", "rm", "rv"], opset=opset, rtol=1e-5, atol=1e-5,
               consts={"s": RNG.standard_normal(c).astype(np.float32),
                       "b": RNG.standard_normal(c).astype(np.float32),
                       "m": RNG.standard_normal(c).astype(np.float32),
                       "v": RNG.random(c).astype(np.float32) + 0.5},
               training_mode=1, momentum=0.8, epsilon=1e-3)
