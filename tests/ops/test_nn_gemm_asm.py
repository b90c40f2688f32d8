"""gemm.h's AVX2 micro-kernel in inline assembly (``ml_uk_asm_cols`` / ``ml_uk_asm_rows``).

On an x86-64 build with AVX2 and FMA (and without AVX-512) the full 6 x 16 tile's k loop
is assembly: packed A (weights, Winograd's transformed inputs), A's rows read in place (a
run-time MatMul operand) and a column-major A (an NCHW image as pixels x channels). Each
case is checked against a float64 NumPy product, and bit for bit against the same node
built with ``-DML_NO_ASM`` (the C loop): both sum each element as one FMA chain over k in
the same order. K covers the 4-step loop, its 1-3 single steps, and K below 4; rows that
are not a multiple of 6 (the last panel's rows past M). On a CPU without AVX2, or with
AVX-512, both builds are the C loop and agree trivially; the NumPy checks still hold.
"""

from __future__ import annotations

import numpy as np
import pytest
from harness import make_node, run_c
from onnx import helper

from monolib.compiler.tuning.select import Selection, selecting

RNG = np.random.default_rng(2711)
NO_ASM = ("-DML_NO_ASM",)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _mm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    out = a.astype(np.float64) @ b
    return out + c if c is not None else out


def _conv1x1(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("nchw,mc->nmhw", x.astype(np.float64), w[:, :, 0, 0]) + b[None, :, None, None]


# name -> (op, inputs, attrs, const, forced candidate or None, float64 reference)
CASES = {
    # packed A (constant weights), K = 301: 75 four-step iterations + 1; M = 151
    "packed_a_k301": ("Gemm", [r(151, 301, scale=0.1), r(301, 70), r(151, 1)], {}, [0, 2], None, _mm),
    # K = 3: no four-step iteration, three single steps
    "packed_a_k3": ("Gemm", [r(13, 3), r(3, 40), r(13, 1)], {}, [0, 2], None, _mm),
    # a run-time A read row by row in place; K over one 256-float block, 6 rows + 1
    "rows_of_a_k514": ("MatMul", [r(37, 514, scale=0.1), r(514, 50)], {}, [1], None, _mm),
    # pixels as rows: the NCHW image column-major, 13x13 = 169 pixels (28 x 6 + 1)
    "pixel_rows_1x1": ("Conv", [r(1, 130, 13, 13), r(40, 130, 1, 1, scale=0.1), r(40)], {},
                       [1, 2], "pixel_rows", _conv1x1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_asm_micro_kernel_matches_numpy_and_c_loop_bits(name: str) -> None:
    op, ins, attrs, const, forced, ref = CASES[name]
    node = make_node(op, ins, attrs, opset=13 if op == "Gemm" else 17, const=const)
    with selecting(Selection(forced={node.name: forced} if forced else {})):
        asm = run_c(node, ins)[0]
        c_loop = run_c(node, ins, options=NO_ASM)[0]
    np.testing.assert_allclose(asm, ref(*ins), rtol=2e-4, atol=2e-4)
    np.testing.assert_array_equal(asm, c_loop)
