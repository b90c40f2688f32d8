"""A static batch of images' 1x1 convs as one ``ml_sgemm_batch`` (``conv.py``'s
``_image_batch``): each thread takes whole images, one job for the op.

The library matches ONNX Runtime, gives the same bits at 1, 2 and 3 threads, and each
image's output is bit for bit what a batch-1 library computes for that image alone (the
per-image GEMM is the same call in the same order). Grouped, padded and GEMV-shaped
(at most 4 pixels) convs keep the loop over images.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import run_threads
from onnx import helper

import monolib
from monolib.compiler.build import lower
from monolib.compiler.testing import ort_run
from monolib.compiler.tuning.select import Selection, selecting

#: the GEMM per image (the rule may fold a batch of small images into one GEMM, or
#: take pixels as rows)
GEMM = Selection(forced={"conv1": "gemm", "conv2": "gemm"})

RNG = np.random.default_rng(11)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


def _model(n, c: int, m: int, h: int, w: int, group: int = 1, pads=(0, 0, 0, 0),
           k: int = 1):
    """Conv (k x k, c -> m) + HardSwish, then a 1x1 conv back to c plus the input;
    ``n``: the batch (a name: a symbolic one)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=group, pads=list(pads),
                         name="conv1"),
        helper.make_node("HardSwish", ["c1"], ["h1"]),
        helper.make_node("Conv", ["h1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["c2", "x"], ["y"]),
    ]
    oh, ow = h + pads[0] + pads[2] - k + 1, w + pads[1] + pads[3] - k + 1
    weights = {"w1": r(m, c // group, k, k, scale=0.3), "b1": r(m),
               "w2": r(c, m, 1, 1, scale=0.2)}
    assert (oh, ow) == (h, w)
    return make_model(nodes, [("x", F32, [n, c, h, w])], [("y", F32, [n, c, h, w])],
                      weights, opset=14)


def _batched_calls(model) -> int:
    with selecting(GEMM):
        source, _, _ = lower(model, None, None)
    return source.count("ml_sgemm_batch(&gb_")


@pytest.mark.parametrize("n,c,m,h,w", [(8, 8, 24, 12, 96), (3, 16, 40, 7, 9), (5, 24, 8, 1, 33)])
def test_batch_of_images_matches_ort_and_one_image(n, c, m, h, w) -> None:
    model = _model(n, c, m, h, w)
    assert _batched_calls(model) == 2  # both 1x1 convs
    feeds = {"x": r(n, c, h, w)}
    want = ort_run(model, feeds)[0]
    # the split runs first: a later run would find the serial run's outputs in the arena
    with selecting(GEMM):
        two, three, one = run_threads(model, feeds, (2, 3, 1))
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[0], three[0])
    single = _model(1, c, m, h, w)
    for init, src in zip(single.graph.initializer, model.graph.initializer):
        init.CopyFrom(src)  # the same weights
    with selecting(GEMM):
        gm = monolib.GraphModule(monolib.compile(single)["default"](monolib.cpu()))
    for i in range(n):
        gm.run(x=feeds["x"][i : i + 1])
        np.testing.assert_array_equal(gm.get_output(0).numpy()[0], one[0][i])


@pytest.mark.parametrize("case", ["grouped", "padded", "gemv_shaped", "one_image"])
def test_loop_over_images_stays(case) -> None:
    if case == "grouped":
        model = _model(4, 16, 32, 6, 20, group=2)
    elif case == "padded":  # a 3x3 conv pads the input per image: the loop keeps its buffer
        model = _model(4, 8, 16, 6, 20, pads=(1, 1, 1, 1), k=3)
    elif case == "gemv_shaped":  # 2x2 maps: ml_sgemv_pa sums in its own order
        model = _model(4, 32, 32, 2, 2)
    else:
        model = _model(1, 8, 16, 6, 20)
    batched = _batched_calls(model)
    assert batched == (1 if case in ("grouped", "padded") else 0)  # the second 1x1 conv
    feeds = {"x": r(*(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim))}
    want = ort_run(model, feeds)[0]
    with selecting(GEMM):
        one, two = run_threads(model, feeds)
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    np.testing.assert_array_equal(one[0], two[0])


def test_run_time_batch_is_batched_and_invariant() -> None:
    """A run-time batch (1..6) takes the batch too (its offset table for 6 images); at
    every batch size and thread count each image's output is a batch-1 library's."""
    c, m, h, w = 8, 24, 6, 40
    model = _model("N", c, m, h, w)
    with selecting(GEMM):
        source, _, _ = lower(model, {"x": ((1, 6), c, h, w)}, None)
        assert source.count("ml_sgemm_batch(&gb_") == 2
        gm = monolib.GraphModule(monolib.compile(model, shapes={"x": ((1, 6), c, h, w)})
                                 ["default"](monolib.cpu()))
        single = _model(1, c, m, h, w)
        for init, src in zip(single.graph.initializer, model.graph.initializer):
            init.CopyFrom(src)
        one = monolib.GraphModule(monolib.compile(single)["default"](monolib.cpu()))
    x = r(6, c, h, w)
    alone = []
    for i in range(6):
        one.run(x=x[i : i + 1])
        alone.append(one.get_output(0).numpy()[0].copy())
    try:
        for threads in (2, 1, 3):
            monolib.runtime.set_num_threads(threads)
            for b in (6, 1, 4):
                gm.run(x=x[:b])
                got = gm.get_output(0).numpy()
                assert got.shape[0] == b
                for i in range(b):
                    np.testing.assert_array_equal(got[i], alone[i])
    finally:
        monolib.runtime.set_num_threads(len(os.sched_getaffinity(0)))
