"""TensorScatter (24) against ``onnx.reference``: linear and circular modes, axis 2 of
a 4-D cache and the last axis, with and without write indices."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(19)


@pytest.mark.parametrize("mode,idx", [("linear", [0, 3]), ("circular", [4, 6])])
def test_tensor_scatter_axis2(mode, idx):
    check_node("TensorScatter", {"past": RNG.standard_normal((2, 3, 6, 4)).astype(np.float32),
                                 "upd": RNG.standard_normal((2, 3, 3, 4)).astype(np.float32),
                                 "idx": np.array(idx, np.int64)},
               ["y"], opset=24, axis=2, mode=mode)


def test_tensor_scatter_last_axis_no_indices():
    check_node("TensorScatter", {"past": RNG.standard_normal((2, 5)).astype(np.float32),
                                 "upd": RNG.standard_normal((2, 2)).astype(np.float32)},
               ["y"], opset=24, axis=-1)
