"""Adagrad, Momentum (standard, nesterov) and Adam of ai.onnx.preview.training, two
tensors per node, against ``onnx.reference``."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(29)
D = "ai.onnx.preview.training"


def _t(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op,states,attrs", [
    ("Adagrad", 1, {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}),
    ("Momentum", 1, {"alpha": 0.8, "beta": 0.3, "mode": "nesterov", "norm_coefficient": 0.1}),
    ("Adam", 2, {"alpha": 0.85, "beta": 0.95, "norm_coefficient": 0.02,
                 "norm_coefficient_post": 0.1}),
])
def test_optimizer(op, states, attrs):
    shapes = [(3, 4), (5,)]
    ins = {"r": np.array(0.1, np.float32), "t": np.array(3, np.int64)}
    for role in ["x", "g"] + [f"s{k}" for k in range(states)]:
        for i, s in enumerate(shapes):
            ins[f"{role}{i}"] = np.abs(_t(*s)) if role == "s1" or op == "Adagrad" and role == "s0" \
                else _t(*s)
    outs = [f"o{k}_{i}" for k in range(1 + states) for i in range(len(shapes))]
    check_node(op, ins, outs, domain=D, rtol=1e-5, atol=1e-5, **attrs)
