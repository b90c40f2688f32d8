"""GEMV-shaped products in gemm.h: ``ml_sgemv_pa`` (a packed A against at most
``GEMV_NMAX`` columns: a conv on a 1x1 or 2x2 map), the few columns past the last whole
16-column panel of a GEMM with a packed A (``ml_gemm_tail_cols``: 49 columns, a 7x7
map's), few rows against a run-time B^T (``ml_gemm_small_m_t``) and the few-row path
against a prepacked B (a batch-1 FC layer: each pair of panels over the whole K in one
pass), against the NumPy reference and ONNX Runtime, on odd shapes and tails, under each
tiling, at 1 and 2 threads (bit-identical)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from frontend.onnx_util import F32, make_model
from harness import TILINGS, NodeContext, check_node, run_threads
from onnx import helper

from monolib.compiler.backends.c.generate import host_prelude
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.ops import op_of
from monolib.compiler.ops.nn._gemm import (
    GEMV_NMAX,
    MR,
    bbuf_floats,
    dot_shaped,
    gemm_call,
    gemv_shaped,
    pack_a,
)
from monolib.compiler.testing import aligned_empty, build_shared

RNG = np.random.default_rng(41)


def r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


# name -> (X shape, W shape, attrs): M = 37 rows (a short last panel of 1), K = 45
# (5 past the last step of 8), N = 1..4 columns
CONV_CASES = {
    "n1": ((1, 45, 1, 1), (37, 45, 1, 1), {}),
    "n2": ((1, 45, 1, 2), (37, 45, 1, 1), {}),
    "n3": ((1, 45, 3, 1), (37, 45, 1, 1), {}),
    "n4": ((1, 45, 2, 2), (37, 45, 1, 1), {}),
}


def _conv(case: str):
    xs, ws, attrs = CONV_CASES[case]
    return [r(*xs), r(*ws, scale=0.3), r(ws[0])], attrs


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_few_columns(case: str) -> None:
    ins, attrs = _conv(case)
    check_node("Conv", ins, attrs, const=[1, 2])


@pytest.mark.parametrize("n", range(1, GEMV_NMAX + 1))
def test_gemm_const_a_few_columns(n: int) -> None:
    # a constant A (packed at compile time) against n run-time columns: ml_sgemv_pa
    ins = [r(37, 45, scale=0.3), r(45, n), r(37, 1)]
    node = check_node("Gemm", ins, {"alpha": 0.5}, const=[0, 2], opset=13)
    code = op_of(node).emit(node, NodeContext(node, None))
    assert f"ml_sgemv_pa(&ga_, ml_gemv_pa_task_{n})" in code, code


@pytest.mark.parametrize("tiling", sorted(TILINGS))
@pytest.mark.parametrize("n", [1, 3])
def test_gemm_const_a_few_columns_tilings(n: int, tiling: str) -> None:
    ins = [r(37, 45, scale=0.3), r(45, n), r(37, 1)]
    check_node("Gemm", ins, {}, const=[0, 2], opset=13, ort=False, options=TILINGS[tiling])


IM2COL_C = r"""
/* C = alpha * A B + bias_m for a packed A (M x K) and B the implicit im2col of a 3x3,
 * stride-2 conv over an already padded C x H x W image (2 x 2 outputs: 4 columns). */
void run(const float* ap, const float* img, const float* bias, float* c, float* bbuf,
         int64_t M, int64_t C, int64_t H, int64_t W) {
    ml_gemm_args g = ml_gemm_defaults(M, 4, C * 9, ap, c);
    g.b.kind = ML_B_IM2COL; g.b.p = img; g.b.H = H; g.b.W = W; g.b.KH = 3; g.b.KW = 3;
    g.b.SH = 2; g.b.SW = 2; g.b.DH = 1; g.b.DW = 1; g.b.OH = 2; g.b.OW = 2;
    g.bias_m = bias; g.bbuf = bbuf; g.alpha = 0.5f;
    ml_sgemv_pa(&g, ml_gemv_pa_task_4);
}
"""


@pytest.mark.parametrize("tiling", [(), *TILINGS.values()])
def test_gemv_im2col_source(tiling) -> None:
    m, c, h, w = 23, 7, 5, 5
    lib = build_shared(host_prelude() + kernel_header("gemm.h") + IM2COL_C, tiling)
    a, img, bias = r(m, c * 9), r(c, h, w), r(m)
    ap = aligned(pack_a(a))
    out = np.zeros((m, 4), np.float32)
    bbuf = aligned(np.zeros(bbuf_floats(c * 9, 4), np.float32))
    p = ctypes.c_void_p
    lib.run(p(ap.ctypes.data), p(img.ctypes.data), p(bias.ctypes.data), p(out.ctypes.data),
            p(bbuf.ctypes.data), *(ctypes.c_int64(v) for v in (m, c, h, w)))
    cols = np.stack([img[:, y:y + 3, x:x + 3].ravel() for y in (0, 2) for x in (0, 2)], 1)
    np.testing.assert_allclose(out, 0.5 * (a @ cols) + bias[:, None], rtol=1e-5, atol=1e-5)


def aligned(x: np.ndarray) -> np.ndarray:
    """A 64-byte aligned copy of ``x``."""
    buf = aligned_empty(x.nbytes)
    out = buf.view(x.dtype)[: x.size]
    out[:] = x.ravel()
    return out


# name -> (M, K, N) of a Gemm with a constant (packed) A: column tails past the
# 16-column panels of 1, 2, 3 and 4 columns (49 = 3*16 + 1, 18 = 16 + 2, 3 alone,
# 196 = 12*16 + 4), K over KC = 256
TAIL_CASES = {
    "n49_k300": (37, 300, 49),
    "n18": (13, 20, 18),
    "n3_few_rows": (5, 20, 3),
    "n196": (8, 9, 196),
}


def _tail_inputs(case: str) -> list[np.ndarray]:
    m, k, n = TAIL_CASES[case]
    return [r(m, k, scale=0.1), r(k, n), r(m, 1)]


@pytest.mark.parametrize("case", sorted(TAIL_CASES))
def test_column_tail(case: str) -> None:
    check_node("Gemm", _tail_inputs(case), {}, const=[0, 2], opset=13)


@pytest.mark.parametrize("tiling", sorted(TILINGS))
def test_column_tail_tilings(tiling: str) -> None:
    check_node("Gemm", _tail_inputs("n49_k300"), {}, const=[0, 2], opset=13, ort=False,
               options=TILINGS[tiling])


def _gemm_const_a_model(a: np.ndarray, n: int):
    node = helper.make_node("Gemm", ["A", "B"], ["Y"])
    m, k = a.shape
    return make_model([node], [("B", F32, [k, n])], [("Y", F32, [m, n])], {"A": a})


def test_column_tail_two_threads_bit_identical() -> None:
    # 256 x 300 x 49: split into column ranges and row blocks; a range of the tail alone
    # sums it as the whole GEMM does
    a, b = r(256, 300, scale=0.05), r(300, 49)
    one, two = run_threads(_gemm_const_a_model(a, 49), {"B": b})
    np.testing.assert_allclose(one[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(one[0], two[0])


def test_gemv_two_threads_bit_identical() -> None:
    # 1030 x 515 weights (over the pool's work threshold): split by panels
    a, b = r(1030, 515, scale=0.05), r(515, 1)
    one, two = run_threads(_gemm_const_a_model(a, 1), {"B": b})
    np.testing.assert_allclose(one[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(one[0], two[0])


# name -> (A shape, B shape); B constant (prepacked), M below the micro-tile's 6 rows
FC_CASES = {
    "m1_k_over_kc": ((1, 700), (700, 70)),
    "m3": ((3, 300), (300, 33)),
    "m5_nc_blocks": ((5, 40), (40, 1100)),
}


@pytest.mark.parametrize("case", sorted(FC_CASES))
def test_fc_few_rows_packed_b(case: str) -> None:
    sa, sb = FC_CASES[case]
    check_node("Gemm", [r(*sa), r(*sb, scale=0.1), r(sb[1])], {}, const=[1, 2], opset=13)


def test_fc_few_rows_two_threads_bit_identical() -> None:
    # 2100 x 1000 weights: 2.1M multiply-adds, split because B's floats count 4
    a, w, b = r(1, 2100), r(1000, 2100, scale=0.02), r(1000)
    node = helper.make_node("Gemm", ["A", "W", "C"], ["Y"], transB=1)
    model = make_model([node], [("A", F32, [1, 2100])], [("Y", F32, [1, 1000])],
                       {"W": w, "C": b})
    one, two = run_threads(model, {"A": a})
    np.testing.assert_allclose(one[0], a.astype(np.float64) @ w.T + b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(one[0], two[0])


# name -> (A shape, B^T shape, constant inputs): a run-time B^T (Gemm transB) against
# fewer than MR rows: dot products along contiguous rows of B^T (ml_gemm_small_m_t);
# K = 37 and 70 leave tails past the vector width, N = 13 one past the blocks of 4
BT_CASES = {
    "m1": ((1, 37), (13, 37), []),
    "m5_k70": ((5, 70), (30, 70), []),
    "m3_const_a": ((3, 37), (13, 37), [0]),
}


@pytest.mark.parametrize("case", sorted(BT_CASES))
def test_few_rows_transposed_runtime_b(case: str) -> None:
    sa, sb, const = BT_CASES[case]
    check_node("Gemm", [r(*sa), r(*sb), r(sb[0])], {"transB": 1, "alpha": 0.5}, const=const + [2],
               opset=13)


@pytest.mark.parametrize("tiling", sorted(TILINGS))
def test_few_rows_transposed_runtime_b_tilings(tiling: str) -> None:
    check_node("Gemm", [r(2, 37), r(13, 37)], {"transB": 1}, opset=13, ort=False,
               options=TILINGS[tiling])


def test_few_rows_transposed_runtime_b_two_threads() -> None:
    # 1 x 2100 against a run-time 1000 x 2100 weight (over the work threshold): column
    # ranges per thread, each output one dot product, bit-identical
    a, w = r(1, 2100), r(1000, 2100, scale=0.02)
    node = helper.make_node("Gemm", ["A", "W"], ["Y"], transB=1)
    model = make_model([node], [("A", F32, [1, 2100]), ("W", F32, [1000, 2100])],
                       [("Y", F32, [1, 1000])])
    one, two = run_threads(model, {"A": a, "W": w})
    np.testing.assert_allclose(one[0], a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(one[0], two[0])


def test_gemv_shaped_rule() -> None:
    packed = {"M": "64", "N": "1", "K": "128", "a": "W", "c": "Y", "bbuf": "buf"}
    strided = {"kind": "ML_B_STRIDED", "p": "X", "ldk": "1", "ldn": "1"}
    assert gemv_shaped(packed, strided)
    assert gemv_shaped({**packed, "N": str(GEMV_NMAX)}, strided)
    assert not gemv_shaped({**packed, "N": str(GEMV_NMAX + 1)}, strided)
    assert not gemv_shaped({**packed, "M": str(MR)}, strided)  # too few rows to matter
    assert not gemv_shaped({**packed, "N": "n"}, strided)  # a run-time size
    assert not gemv_shaped({**packed, "K": "0"}, strided)
    assert not gemv_shaped({**packed, "a": "0", "a_raw": "A"}, strided)
    assert not gemv_shaped(packed, {"kind": "ML_B_PACKED", "p": "B"})
    assert "ml_sgemv_pa(&ga_, ml_gemv_pa_task_1)" in gemm_call(packed, strided)
    assert "ml_sgemm_par(&ga_)" in gemm_call({**packed, "N": "5"}, strided)
    # few rows of an unpacked A against a run-time B^T: dot products (ml_sgemm_t_par)
    raw = {"M": "1", "N": "300", "K": "64", "a": "0", "a_raw": "A", "lda": "64", "c": "Y"}
    bt = {"kind": "ML_B_STRIDED", "p": "W", "ldk": "1", "ldn": "64"}
    assert dot_shaped(raw, bt) and "ml_sgemm_t_par(&ga_)" in gemm_call(raw, bt)
    assert not dot_shaped({**raw, "M": str(MR)}, bt)
    assert not dot_shaped(raw, {**bt, "ldk": "300", "ldn": "1"})
    assert not dot_shaped({k: v for k, v in raw.items() if k != "a_raw"}, bt)  # packed A
    # the block buffer holds x expanded to A's panel layout (MR floats per k and column)
    assert bbuf_floats(1000, 3) >= 1000 * MR * 3


SPLIT_C = r"""
/* ml_sgemm_par's split of an M x N x K GEMM (run-time B unless packed) on nt threads */
void split(int nt, int64_t M, int64_t N, int64_t K, int packed, int64_t* out) {
    ml_set_num_threads(nt);
    ml_gemm_args g = ml_gemm_defaults(M, N, K, (const float*)64, 0);
    g.b.kind = packed ? ML_B_PACKED : ML_B_STRIDED;
    int64_t units = ((N + 31) / 32) * ((M + ML_MR - 1) / ML_MR);
    ml_gemm_split(&g, ml_par_tasks((double)M * N * K, units), out, out + 1);
    out[2] = (int64_t)ml_gemm_task_cost(&g, out[1], out[0]);
    out[3] = (int64_t)ml_gemm_task_cost(&g, M - out[1], N - out[0]);
}
"""


def _split(nt: int, m: int, n: int, k: int, packed: bool) -> tuple[int, int, int, int]:
    lib = build_shared(kernel_header("threadpool.h") + kernel_header("gemm.h") + SPLIT_C)
    out = (ctypes.c_int64 * 4)()
    lib.split(nt, ctypes.c_int64(m), ctypes.c_int64(n), ctypes.c_int64(k), int(packed), out)
    return tuple(out)


def test_split_by_estimated_work() -> None:
    # 196 columns (a 14x14 map): halving them gives 128 + 68 (a 4-column tail), so the
    # two threads take 2 row blocks of whole rows instead
    cn, cm, *_ = _split(2, 1024, 196, 256, False)
    assert (cn, cm) == (224, 516)
    # 12 rows (two panels) by 4096 prepacked columns: two column ranges of 2048
    cn, cm, *_ = _split(2, 12, 4096, 512, True)
    assert -(-4096 // cn) * -(-12 // cm) == 2
    # 4 threads on 256 x 3136: four column ranges, each packing only its own B
    cn, cm, *_ = _split(4, 256, 3136, 64, False)
    assert (-(-3136 // cn), -(-256 // cm)) == (4, 1)
    # a 7x7 map's 49 columns: a column range holding the 1-column tail alone costs far
    # less than a whole 16-column panel, so rows split
    cn, cm, *_ = _split(2, 2048, 49, 512, False)
    assert cn >= 49 and cm == 1026
