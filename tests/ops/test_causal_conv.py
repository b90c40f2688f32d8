"""CausalConvWithState (27) against ``onnx.reference``: with and without past state
and bias, SiLU, kernel 1 (empty state), float64."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(9)


@pytest.mark.parametrize("k,act,dtype", [(4, "silu", np.float32), (3, "none", np.float64)])
def test_causal_conv_with_past(k, act, dtype):
    b, c, ln = 2, 5, 7
    check_node("CausalConvWithState",
               {"x": RNG.standard_normal((b, c, ln)).astype(dtype),
                "w": RNG.standard_normal((c, 1, k)).astype(dtype),
                "bias": RNG.standard_normal(c).astype(dtype),
                "past": RNG.standard_normal((b, c, k - 1)).astype(dtype)},
               ["y", "present"], opset=27, activation=act)


def test_causal_conv_no_state_kernel_2():
    check_node("CausalConvWithState",
               {"x": RNG.standard_normal((1, 3, 6)).astype(np.float32),
                "w": RNG.standard_normal((3, 1, 2)).astype(np.float32)},
               ["y", "present"], opset=27)
