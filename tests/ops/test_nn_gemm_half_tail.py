"""gemm.h's half-width tiles: with AVX-512, the last 1-8 columns past a GEMM's whole
16-column panels are computed as tiles of 256-bit vectors, two panels of A (12 rows) at
a time, after the panels (not as a 16-lane tile mostly masked off).

Each case is checked against a float64 NumPy product, and against a build without the
half-width tiles (``-DML_HALF_TAIL=0``) bit for bit: the tiles sum every element in the
micro-kernel's order, so a column's bits do not depend on which tile computed it (a
run-time batch folded into the columns moves the tail). On a CPU without AVX-512 both
builds are the whole-panel kernel and agree trivially; the NumPy checks still hold.
"""

from __future__ import annotations

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import make_node, run_c, run_threads
from onnx import helper

RNG = np.random.default_rng(2611)
NO_HALF = ("-DML_HALF_TAIL=0",)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _conv1x1(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("nchw,mc->nmhw", x.astype(np.float64), w[:, :, 0, 0]) + b[None, :, None, None]


# name -> (op, inputs, attrs, const, float64 reference): columns past the panels 5 (21),
# 8 (24 = an attention head's 16 + 8), 3 without a compiled GEMV tail (a run-time A);
# rows that are not a multiple of 12 and cross the 144-row block; K over the 256 of a K
# block (C reloaded between blocks); a 1x1 conv of 40 output channels on a 13x13 map
CASES = {
    "const_a_n21_m150_k300": ("Gemm", [r(150, 300, scale=0.1), r(300, 21), r(150, 1)], {}, [0, 2],
                              lambda a, b, c: a.astype(np.float64) @ b + c),
    "runtime_n3_m150": ("MatMul", [r(150, 64), r(64, 3)], {}, [],
                        lambda a, b: a.astype(np.float64) @ b),
    "runtime_n24_m37_k300": ("MatMul", [r(37, 300, scale=0.1), r(300, 24)], {}, [1],
                             lambda a, b: a.astype(np.float64) @ b),
    "conv_1x1_c40_13x13": ("Conv", [r(1, 64, 13, 13), r(40, 64, 1, 1, scale=0.2), r(40)], {},
                           [1, 2], _conv1x1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_half_width_tail_matches_numpy_and_whole_panel_bits(name: str) -> None:
    op, ins, attrs, const, ref = CASES[name]
    node = make_node(op, ins, attrs, opset=13 if op == "Gemm" else 17, const=const)
    half = run_c(node, ins)[0]
    np.testing.assert_allclose(half, ref(*ins), rtol=2e-4, atol=2e-4)
    np.testing.assert_array_equal(half, run_c(node, ins, options=NO_HALF)[0])


def test_half_width_tail_two_threads_bit_identical() -> None:
    # 300 x 200 weights by 200 x 200 (12 panels + 8 columns): split into column ranges
    # and row blocks; the range holding the tail sums it as the whole GEMM does
    a, b = r(300, 200, scale=0.05), r(200, 200)
    node = helper.make_node("Gemm", ["A", "B"], ["Y"])
    model = make_model([node], [("B", F32, [200, 200])], [("Y", F32, [300, 200])], {"A": a})
    one, two = run_threads(model, {"B": b})
    np.testing.assert_allclose(one[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(one[0], two[0])
