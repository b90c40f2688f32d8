"""A Transpose with a fused elementwise chain (``ops/tensor/transpose.py``): the
transpose runs its fast path (``ml_transpose2d`` row blocks, 16 x 16 tiles, or the copy
loop) and the chain runs as a tile epilogue, on each row block just written or in a
pass over the output after it; with run-time sizes, per element as before.

The chain is GELU (SegFormer's Mix-FFN exports Transpose, Div, Erf, Add, Mul by the
transposed value, Mul), plus an Add of a constant along the last dim. Every layout
path matches ONNX Runtime and gives the same bits at 1, 2 and 3 threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import run_threads
from onnx import helper

import monolib
from monolib.compiler.build import lower
from monolib.compiler.testing import ort_run

RNG = np.random.default_rng(5)


def _model(shape, perm, dims=None):
    """x -> Transpose(perm) -> GELU (erf form) -> + a constant along the last dim."""
    out = [shape[p] for p in perm]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=list(perm)),
        helper.make_node("Div", ["t", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["t", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]),
        helper.make_node("Add", ["g", "bias"], ["y"]),
    ]
    weights = {"sqrt2": np.array(np.sqrt(2.0), np.float32), "one": np.array(1.0, np.float32),
               "half": np.array(0.5, np.float32),
               "bias": RNG.standard_normal(out[-1]).astype(np.float32)}
    y = [d if isinstance(d, str) else out[i] for i, d in enumerate(
        [(dims or list(shape))[p] for p in perm])]
    return make_model(nodes, [("x", F32, dims or list(shape))], [("y", F32, y)], weights,
                      opset=13)


CASES = {
    # [C, HW] -> [HW, C]: ml_transpose2d row blocks, the epilogue in each task
    "row_blocks": ((1, 128, 40, 30), (0, 2, 3, 1)),
    # a batch of 2-D transposes: one per task, then the epilogue pass
    "batched": ((3, 64, 50), (0, 2, 1)),
    # 5 rows read contiguously: too short for registers, 16 x 16 tiles
    "tiles": ((300, 5), (1, 0)),
    # short dims: the copy loop
    "copy_loop": ((2, 3, 4), (2, 0, 1)),
    # an inner dim moved out: other dims between
    "four_d": ((4, 10, 12, 9), (2, 0, 3, 1)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_transpose_with_chain_matches_ort_on_threads(name: str) -> None:
    shape, perm = CASES[name]
    model = _model(shape, perm)
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    want = ort_run(model, feeds)[0]
    two, three, one = run_threads(model, feeds, (2, 3, 1))
    np.testing.assert_allclose(one[0], want, rtol=1e-5, atol=1e-6 * np.abs(want).max())
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[0], three[0])


def test_row_blocks_run_the_chain_per_task() -> None:
    """The 2-D case transposes by row blocks and calls the tile epilogue on each block's
    rows, not the per-element value function inside the copy."""
    shape, perm = CASES["row_blocks"]
    source, _, _ = lower(_model(shape, perm), None, None)
    at = source.index("ml_transpose2d(nr_")  # in the row block's task function
    task = source[source.rindex("static void", 0, at):source.index("\n}\n", at)]
    assert "epi_" in task and "epv_" not in task


def test_run_time_sizes_keep_the_per_element_chain() -> None:
    """A run-time dim: the chain per element as the copy writes it, still right."""
    shape, perm = (2, 24, 10), (0, 2, 1)
    model = _model(shape, perm, dims=["N", 24, 10])
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    want = ort_run(model, feeds)[0]
    gm = monolib.GraphModule(monolib.compile(model, shapes={"x": ((1, 4), 24, 10)})
                             ["default"](monolib.cpu()))
    gm.run(**feeds)
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5,
                               atol=1e-6 * np.abs(want).max())
