"""Helpers of the vmath.h tests (``test_vector_erf.py``, ``test_vector_tanh.py``): the
error in float32 ulps and a one-graph ONNX model."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float32 spacings at ``want`` (float64)."""
    spacing = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


def onnx_model(nodes, inputs, outputs, inits=None):
    """An opset-17 model of ``nodes`` with ``inits`` (name -> array) as initializers."""
    graph = helper.make_graph(
        nodes, "m", inputs, outputs,
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
