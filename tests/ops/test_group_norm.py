"""GroupNormalization (21) and MeanVarianceNormalization
against ``onnx.reference``: 3-D and 4-D inputs, one group and one per channel, other
axes, float64."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(23)


@pytest.mark.parametrize("opset,shape,groups,dtype", [
    (21, (2, 6, 3, 4), 3, np.float32), (21, (1, 4, 5), 1, np.float64)])
def test_group_normalization(opset, shape, groups, dtype):
    n = shape[1]
    check_node("GroupNormalization", {"x": (RNG.standard_normal(shape) * 2 + 1).astype(dtype)},
               ["y"], opset=opset, rtol=1e-5, atol=1e-5, num_groups=groups, epsilon=1e-3,
               consts={"s": RNG.standard_normal(n).astype(dtype),
                       "b": RNG.standard_normal(n).astype(dtype)})


@pytest.mark.parametrize("axes", [None, [1], [0, 1, 3]])
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    check_node("MeanVarianceNormalization", {"x": RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)},
               ["y"], opset=13, rtol=1e-4, atol=1e-5, **attrs)
