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


def run_unary(op_type: str, x: np.ndarray, ml_name: str) -> np.ndarray:
    """``op_type`` on the float32 vector ``x`` through a compiled library, after checking
    that the generated op calls vmath.h's ``ml_name`` (``"ml_erff"``), not libm's."""
    from onnx import TensorProto

    from monolib.compiler.build import lower
    from monolib.compiler.testing import run_model

    model = onnx_model([helper.make_node(op_type, ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])])
    src = lower(model)[0]
    ops = src.split("/* ---- threadpool.h ---- */")[1]  # the op, after the kernels
    assert f"static inline float {ml_name}(float x)" in src and f"{ml_name}(" in ops
    libm = ml_name.removeprefix("ml_")
    assert f"{libm}(" not in ops.replace(f"{ml_name}(", "")  # not libm's
    return run_model(model, {"x": x})[0]
