"""GlobalAveragePool / GlobalMaxPool on the thread pool (pool.h ``ml_global_pool``): large
inputs are split over channels; the result, with a fused epilogue, matches ONNX Runtime
and is the same at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
from frontend.onnx_util import F32, make_model
from harness import run_threads
from onnx import helper

from monolib.compiler.build import lower
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(5)


def _model():
    """x [2, 40, 81, 91] (7,371 floats a plane: not a multiple of the 32-float step) ->
    GlobalAveragePool -> HardSigmoid (fused), and GlobalMaxPool of -x."""
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["a"]),
        helper.make_node("HardSigmoid", ["a"], ["y"], alpha=2.0, beta=0.5),
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node("GlobalMaxPool", ["nx"], ["z"]),
    ]
    return make_model(
        nodes, [("x", F32, [2, 40, 81, 91])], [("y", F32, [2, 40, 1, 1]), ("z", F32, [2, 40, 1, 1])]
    )


def test_global_pools_split_over_channels() -> None:
    model = _model()
    source = lower(model)[0]
    assert source.count("ml_global_pool(80, 7371,") == 2
    assert "GlobalAveragePool -> HardSigmoid" in source
    # centred off zero so the mean is not lost in rounding; HardSigmoid not saturated
    feeds = {"x": (RNG.standard_normal((2, 40, 81, 91)) * 0.5 + 0.1).astype(np.float32)}
    want = ort_run(model, feeds)
    one, two = run_threads(model, feeds)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    for got, ref in zip(two, one):  # each channel's sum is one task's: same order
        np.testing.assert_array_equal(got, ref)
