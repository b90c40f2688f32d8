"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against ``onnx.reference``:
weights, ignore_index, each reduction, float64, int32 targets, the log_prob output."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("reduction,dtype", [("none", np.float32), ("sum", np.float64),
                                             ("mean", np.float32)])
def test_sce_weighted_ignore(reduction, dtype):
    x = RNG.standard_normal((3, 5, 2, 4)).astype(dtype)
    t = RNG.integers(0, 5, (3, 2, 4)).astype(np.int64)
    t[0, 0, 0] = 2
    check_node("SoftmaxCrossEntropyLoss", {"x": x, "t": t}, ["loss", "logp"],
               consts={"w": RNG.random(5).astype(dtype)}, reduction=reduction,
               ignore_index=2)


def test_nll_int32_target_no_weight():
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    t = np.array([0, 2, 1, 2], np.int32)
    check_node("NegativeLogLikelihoodLoss", {"x": x, "t": t}, ["loss"], reduction="mean")
