"""The kernels under every tiling of gemm.h, whatever this machine's ISA.

``gemm.h`` picks its vector width ``ML_VW`` and panels per micro-tile ``ML_NP`` from the
ISA (AVX-512: 16 and 2, AVX2: 8 and 1, otherwise 4 and 1). The deployment CPU (Zen 5)
has AVX-512 and the CI machine may not: forcing the macros runs the same C logic with
each tiling here (two-panel tiles, edge tiles, direct-conv slack), compared with the
NumPy reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from harness import TILINGS, check_node

RNG = np.random.default_rng(11)

def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


CASES = {
    "gemm_edges": ("Gemm", [r(37, 53), r(53, 71), r(71)], {}, [1, 2]),
    "gemm_runtime_b": ("Gemm", [r(20, 260), r(260, 1030)], {"alpha": 2.0}, []),
    "matmul_batched": ("MatMul", [r(2, 3, 7, 13), r(2, 3, 13, 40)], {}, []),
    "gemm_cut_tiles": ("Gemm", [r(13, 300), r(300, 24), r(24)], {}, [1, 2]),
    "conv_pointwise": ("Conv", [r(1, 8, 7, 9), r(13, 8, 1, 1, scale=0.3), r(13)], {}, [1, 2]),
    "conv_direct": (
        "Conv",
        [r(1, 6, 9, 45), r(10, 6, 3, 3, scale=0.3), r(10)],
        {"pads": [1, 1, 1, 1]},
        [1, 2],
    ),
    "conv_direct_s2": (
        "Conv",
        [r(1, 6, 9, 70), r(10, 6, 3, 5, scale=0.3), r(10)],
        {"pads": [1, 2, 1, 2], "strides": [2, 2]},
        [1, 2],
    ),
    "conv_packed": (
        "Conv",
        [r(1, 5, 19, 21), r(70, 5, 3, 3, scale=0.3), r(70)],
        {"pads": [1, 1, 1, 1], "strides": [2, 2]},
        [1, 2],
    ),
    "conv_folded": ("Conv", [r(5, 9, 4), r(16, 9, 3, scale=0.3), r(16)], {"pads": [1, 1]}, [1, 2]),
    "depthwise_5x5": (
        "Conv",
        [r(1, 12, 13, 50), r(12, 1, 5, 5, scale=0.3), r(12)],
        {"group": 12, "pads": [2, 2, 2, 2], "strides": [2, 1]},
        [1, 2],
    ),
}


@pytest.mark.parametrize("tiling", sorted(TILINGS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_tiling(tiling: str, case: str) -> None:
    op, inputs, attrs, const = CASES[case]
    check_node(
        op, inputs, attrs, const=const, opset=13, options=TILINGS[tiling], ort=False, epilogue=False
    )


@pytest.mark.parametrize("tiling", sorted(TILINGS))
def test_lstm_tiling(tiling: str) -> None:
    h = 20  # 4H = 80: not a multiple of the 4-vector block
    check_node(
        "LSTM",
        [
            r(3, 2, 7, scale=0.3),
            r(1, 4 * h, 7, scale=0.3),
            r(1, 4 * h, h, scale=0.3),
            r(1, 8 * h, scale=0.3),
        ],
        {"hidden_size": h},
        const=[1, 2, 3],
        n_outputs=3,
        options=TILINGS[tiling],
        ort=False,
    )
