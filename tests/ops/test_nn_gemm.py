"""Gemm and MatMul: NumPy reference vs ONNX Runtime, emitted C (gemm.h) vs reference.

Covers transA/transB, alpha/beta, every broadcast form of C (none, scalar, row, column,
full, runtime), shapes that cross the GEMM's blocking (K > KC=256, N > NC=1024,
M > MC=144, sizes that are not multiples of the 6x16 tile), N-D MatMul with broadcast
batch dims (the attention products of PP-OCR rec), 1-D operands, constant and runtime
operands on either side.
"""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_node, make_node

from monolib.errors import ShapeError

RNG = np.random.default_rng(99)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


GEMM_CASES = {
    "fc_bias_row": ((7, 13), (13, 19), (19,), {}, [1, 2]),
    "trans_both_col_bias": (
        (13, 7),
        (19, 13),
        (7, 1),
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
        [2],
    ),
    "full_c_runtime": ((7, 13), (13, 19), (7, 19), {"beta": 0.5}, []),
    "full_c_const": ((7, 13), (13, 19), (7, 19), {}, [1, 2]),
    "scalar_c": ((5, 4), (4, 3), (1,), {"beta": -1.0}, [1, 2]),
    "no_c_transB": ((1, 64), (10, 64), None, {"transB": 1}, [1]),
    "blocking": ((150, 300), (300, 1100), (1100,), {}, [1, 2]),
    "runtime_b_blocking": ((20, 260), (260, 1030), None, {"alpha": 2.0}, []),
    "const_a": ((9, 5), (5, 33), (9, 33), {"transA": 0}, [0]),
    # tiles cut by the last columns, stored by whole vectors then the last one's lanes:
    # 24 = 16 + 8 (an attention head), 8, and 40 = 32 + 8, over two K blocks (C reloaded)
    "cut_tile_n24": ((13, 300), (300, 24), (24,), {}, [1, 2]),
    "cut_tile_n8": ((7, 300), (300, 8), (7, 1), {"alpha": 0.5}, [1]),
    "cut_tile_n40_runtime": ((20, 40), (40, 40), (20, 40), {"beta": 0.5}, []),
}


@pytest.mark.parametrize("name", sorted(GEMM_CASES))
def test_gemm(name: str) -> None:
    a, b, c, attrs, const = GEMM_CASES[name]
    inputs = [r(*a), r(*b)] + ([r(*c)] if c is not None else [])
    check_node("Gemm", inputs, attrs, const=const, opset=13, rtol=2e-4, atol=2e-4)


MATMUL_CASES = {
    "x_at_w_3d": ((2, 37, 48), (48, 100), [1]),
    "x_at_w_4d": ((2, 3, 7, 13), (13, 40), [1]),
    "attention_qk": ((1, 8, 25, 32), (1, 8, 32, 25), []),
    "attention_av": ((1, 8, 25, 25), (1, 8, 25, 32), []),
    "broadcast_batch": ((2, 1, 7, 13), (3, 13, 40), [1]),
    "broadcast_batch_runtime": ((2, 1, 7, 13), (1, 3, 13, 40), []),
    "const_a_batched_b": ((3, 7, 13), (3, 13, 5), [0]),
    "vec_mat": ((13,), (3, 13, 5), []),
    "mat_vec": ((4, 13), (13,), []),
    "vec_vec": ((13,), (13,), []),
    "batched_mat_vec": ((2, 4, 13), (13,), [1]),
    "runtime_2d": ((33, 70), (70, 17), []),
}


@pytest.mark.parametrize("name", sorted(MATMUL_CASES))
def test_matmul(name: str) -> None:
    a, b, const = MATMUL_CASES[name]
    check_node("MatMul", [r(*a), r(*b)], {}, const=const, opset=13)


def test_matmul_inner_mismatch_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="inner dims"):
        make_node("MatMul", [r(3, 4), r(5, 6)], {})


def test_matmul_batch_mismatch_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="broadcast"):
        make_node("MatMul", [r(2, 3, 4), r(3, 4, 6)], {})


def test_gemm_bad_c_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="broadcast"):
        make_node("Gemm", [r(3, 4), r(4, 6), r(5)], {}, opset=13)


def test_matmul_empty_inner_dim_gives_zeros() -> None:
    check_node("MatMul", [np.ones((3, 0), np.float32), np.ones((0, 4), np.float32)], {}, opset=13)


def test_gemm_empty_inner_dim_gives_bias() -> None:
    a, b = np.ones((3, 0), np.float32), np.ones((0, 4), np.float32)
    check_node("Gemm", [a, b, np.arange(4, dtype=np.float32)], {}, const=[2], opset=13)
