"""How a Winograd conv splits over the thread pool (winograd.h's ``ml_winograd``).

Each task is a block of tiles times a range of output channels; every further range of
a block repeats its input transform, so the plan's ``co_split`` is only a ceiling:
``ml_wino_parts`` takes one range per block where the blocks alone share out evenly over
the threads (and always on one thread), else the fewest ranges that make the tasks a
multiple of the threads. The split never changes the bits: a narrow image whose plan
has two blocks and two ranges gives the same output on 1 and 2 threads, matching ORT.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import run_threads
from onnx import helper

import monolib
from monolib.compiler.build import lower
from monolib.compiler.ops.nn import winograd
from monolib.compiler.ops.nn.conv import as_2d, conv_geometry
from monolib.compiler.testing import ort_run
from monolib.compiler.tuning.select import Selection, selecting

NN = Path(monolib.__file__).parent / "compiler" / "ops" / "nn"

_HARNESS = r"""
#include <stdio.h>
#include "gemm.h"
#include "winograd.h"
int main(void) {
    /* blocks, plan's co_split, threads */
    static const int64_t cases[][3] = {
        {2, 2, 1}, {2, 2, 2}, {1, 2, 2}, {1, 4, 2}, {3, 4, 2}, {3, 2, 2}, {8, 2, 2},
        {5, 1, 2}, {1, 3, 4}, {2, 4, 4}};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); ++i)
        printf("%ld ", (long)ml_wino_parts(cases[i][0], cases[i][1], cases[i][2]));
    printf("\n");
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_ranges_per_block(tmp_path) -> None:
    src = tmp_path / "w.c"
    src.write_text(_HARNESS)
    exe = tmp_path / "w"
    subprocess.run(["gcc", "-O1", f"-I{NN}", str(src), "-o", str(exe)], check=True,
                   capture_output=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60)
    parts = list(map(int, out.stdout.split()))
    # 1 thread: 1; blocks even over the threads: 1; 1 block on 2 threads: 2; 3 blocks on
    # 2 threads: 2 ranges (6 tasks); 5 blocks, plan allows 1: 1; 1 block, 4 threads,
    # plan allows 3: 3; 2 blocks on 4 threads: 2
    assert parts == [1, 1, 2, 2, 2, 2, 1, 1, 3, 2]


def test_narrow_image_same_bits_on_one_and_two_threads() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="wg"),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    rng = np.random.default_rng(16)
    weights = {"w1": (0.1 * rng.standard_normal((120, 64, 3, 3))).astype(np.float32),
               "b1": rng.standard_normal(120).astype(np.float32)}
    model = make_model(nodes, [("x", F32, [1, 64, 14, 14])], [("y", F32, [1, 120, 14, 14])],
                       weights)
    feeds = {"x": rng.standard_normal((1, 64, 14, 14)).astype(np.float32)}
    with selecting(Selection(forced={"wg": "winograd(m=2)"})):
        source, _, _ = lower(model, None, None)
        assert "ml_winograd(" in source
        want = ort_run(model, feeds)[0]
        one, two = run_threads(model, feeds)
    assert np.abs(one[0] - want).max() <= 3e-5 * np.abs(want).max()
    np.testing.assert_array_equal(one[0], two[0])


def test_plan_allows_ranges_for_few_blocks(monkeypatch) -> None:
    """The plan's ceiling: two packed blocks of a 14x14 F(2) grid, 120 channels in
    48-channel passes: two ranges a block may run (ml_wino_parts takes one on 2 threads)."""
    from harness import make_node

    monkeypatch.setattr(winograd, "_pack_wins", lambda grid, tw: True)
    x = np.zeros((1, 64, 14, 14), np.float32)
    w = np.zeros((120, 64, 3, 3), np.float32)
    node = make_node("Conv", [x, w], {"pads": [1, 1, 1, 1]}, const=[1], opset=11)
    d = as_2d([14, 14], conv_geometry(node))
    plan = winograd.plan_winograd(node, d, 1, 2)
    assert plan is not None and plan.co_split == 2


@pytest.mark.parametrize("tiles", [17, 50, 100, 161, 800, 3200])
@pytest.mark.parametrize("per_tile", [1536, 3072, 6144])
def test_one_row_blocks_share_out_evenly(tiles: int, per_tile: int) -> None:
    """1-D: the blocks of one row of tiles are multiples of 8 wide, cover the row, keep V
    within the budget where it allows more than the 16-tile floor, and differ by less
    than a vector of tiles (100 tiles were 80 + 20: two blocks, one thread idle most of
    the op)."""
    rows, cols = winograd._block((1, tiles), per_tile)
    assert rows == 1 and cols % 8 == 0 and cols >= 16
    n = -(-tiles // cols)
    last = tiles - (n - 1) * cols
    assert 0 < last <= cols
    if n > 1:
        assert cols * per_tile <= winograd.V_BYTES
        assert cols - last < 8 * n  # the rounding to 8 is all the imbalance
