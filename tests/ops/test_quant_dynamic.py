"""Dynamically quantized graphs (as ``onnxruntime.quantization.quantize_dynamic`` writes
them) through the whole compiler: ``DynamicQuantizeLinear``'s vectorised, split kernel
(``quant/dql.h``) on sizes off the 16-lane vectors, NaN and infinities, 1 and 2 threads
bit-identical; equal to ONNX Runtime and to the NumPy reference."""

from __future__ import annotations

import numpy as np
from harness import run_threads

from monolib.compiler.ops.quant.dynamic_quantize import DynamicQuantizeLinear
from monolib.compiler.testing import make_node_model, ort_run

R = np.random.default_rng(21)


def _dql_ref(x: np.ndarray) -> list[np.ndarray]:
    return DynamicQuantizeLinear().reference(None, [x])


def test_dynamic_quantize_split_equals_ort_and_reference():
    """Sizes below, at and past the vector width and the split's blocks (600011 floats:
    past the pool's wake-up work, so split over 2 threads, with an odd tail): y, scale
    and zero point equal ORT's and the reference's, and the same at 1 and 2 threads."""
    for n in (5, 16, 47, 4099, 600011):
        x = (R.standard_normal(n) * 3 + 0.7).astype(np.float32)
        model = make_node_model("DynamicQuantizeLinear", {"x": x}, opset=11, outputs=3)
        one, two = run_threads(model, {"x": x})
        for a, b, c, d in zip(one, two, ort_run(model, {"x": x}), _dql_ref(x)):
            np.testing.assert_array_equal(a, b, err_msg=f"n={n}: 1 vs 2 threads")
            np.testing.assert_array_equal(a, c, err_msg=f"n={n}: vs ORT")
            np.testing.assert_array_equal(a, d, err_msg=f"n={n}: vs reference")


def test_dynamic_quantize_nan_and_all_positive():
    """NaN is skipped by min/max and quantizes to 0 (in the vector body and in the
    tail); an all-positive input has zero point 0 (min is 0) and its max maps to 255."""
    x = (R.standard_normal(70) * 2).astype(np.float32)
    x[[3, 40, 69]] = np.nan
    pos = R.uniform(0.5, 4.0, 333).astype(np.float32)
    for v in (x, pos):
        model = make_node_model("DynamicQuantizeLinear", {"x": v}, opset=11, outputs=3)
        one, two = run_threads(model, {"x": v})
        want = _dql_ref(v)
        for a, b, w in zip(one, two, want):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, w)
    assert one[2] == 0 and one[0].max() == 255
