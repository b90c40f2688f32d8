"""Byte-packed constant weights for integer products of a run-time uint8 A
(``q8gemv.h``): an LSTM step, a MatMulInteger after DynamicQuantizeLinear. The weights
stay one byte per value (qgemm.h's int16 packing doubles what a product of few rows,
bound by reading them, has to read) and AVX-512 VNNI multiplies them as bytes; the zero
points are applied through column and row sums (see the header's comment)."""

from __future__ import annotations

import logging

import numpy as np

from ....runtime import isa
from ..base import EmitContext
from ._qcommon import QMR, QNR, include_qgemm

__all__ = [
    "Q8_AVX2_ROWS",
    "include_q8",
    "pack_a8",
    "pack_b8",
    "q8_a_bytes",
    "q8_call",
    "q8_conv_bbuf_bytes",
    "q8_kq",
    "use_q8",
    "use_q8conv",
]

logger = logging.getLogger(__name__)


def _host_has(feature: str) -> bool:
    feats = isa.host_features()
    return feats is not None and feature in feats


#: Most rows a product takes ``q8gemv.h`` with on a CPU with AVX2 but no VNNI: its bytes
#: are widened per row, so only a one-row product (an LSTM step, a batch-1 MatMul) gains
#: from reading half of qgemm.h's int16 B
Q8_AVX2_ROWS = 1


def use_q8(rows: int) -> bool:
    """Whether a product of ``rows`` rows of a run-time uint8 A with constant 8-bit
    weights takes ``q8gemv.h``. Where the CPU compiled on has AVX-512 VNNI, at any number
    of rows (vpdpbusd: 64 multiply-adds an instruction, twice qgemm.h's vpdpwssd, and half
    the weight bytes; Zen 4, 1 thread, [M,1024]x[1024,2048]: M=1 21 vs 40 us, M=8 128 vs
    203, M=32 339 vs 676). With AVX2 alone, one row (:data:`Q8_AVX2_ROWS`): the bytes
    widened by vpmovsxbw, the product bound by reading B (Zen 3, 1 thread: 1x512 x
    512x2048 34 vs 48 us, 1x1024 x 1024x8210 291 vs 921; 2 rows 61 vs 62, 32 rows lost
    3094 vs 794 before the widening was one instruction). Elsewhere qgemm.h. The choice
    only moves speed: both kernels give the same exact sums on any CPU."""
    if rows < 1:
        return False
    return _host_has("avx512vnni") or (rows <= Q8_AVX2_ROWS and _host_has("avx2"))


def use_q8conv(rows: int) -> bool:
    """Whether a convolution of ``rows`` output channels a group takes ``q8gemv.h``'s
    ``ml_q8conv``: with AVX-512 VNNI only (its weights are the broadcast side, read once
    whatever their size; the int16 widening has nothing to gain there)."""
    return rows >= 1 and _host_has("avx512vnni")


def include_q8(ctx: EmitContext) -> None:
    """Paste ``qgemm.h`` (its tile store) and ``q8gemv.h``."""
    include_qgemm(ctx)
    ctx.include("q8gemv.h")


def q8_kq(k: int) -> int:
    """K rounded up to a multiple of 4 (the quads of ``vpdpbusd``)."""
    return -(-k // 4) * 4


def q8_a_bytes(m: int, k: int) -> int:
    """Bytes of the A copy ``ml_q8_prep_a`` writes (rows up to a multiple of QMR)."""
    return -(-m // QMR) * QMR * q8_kq(k)


def pack_b8(b: np.ndarray, zb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pack an 8-bit ``[K, N]`` weight matrix (uint8 or int8) for ``q8gemv.h``.

    Parameters
    ----------
    b : numpy.ndarray
        ``[K, N]`` uint8 or int8.
    zb : numpy.ndarray
        The zero point per column, ``[N]`` (a scalar broadcast by the caller).

    Returns
    -------
    tuple of numpy.ndarray
        ``(packed int8, colsum int32 [N], beta int32 [N])``: ``b' = b - ob`` (``ob`` 128
        for uint8, 0 for int8) in panels of 16 columns and quads of K, the column sums
        of ``b'`` and ``ob - zb``.
    """
    k, n = b.shape
    ob = 128 if b.dtype == np.uint8 else 0
    bp = b.astype(np.int32) - ob
    kq, np_ = q8_kq(k), -(-n // QNR) * QNR
    padded = np.zeros((kq, np_), np.int8)
    padded[:k, :n] = bp
    # [k/4, k%4, panel, c] -> [panel, k/4, c, k%4]
    packed = padded.reshape(kq // 4, 4, np_ // QNR, QNR).transpose(2, 0, 3, 1)
    colsum = bp.sum(axis=0).astype(np.int32)
    beta = (ob - np.asarray(zb).astype(np.int32).reshape(n)).astype(np.int32)
    return np.ascontiguousarray(packed).ravel(), colsum, beta


def pack_a8(w: np.ndarray, zw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pack 8-bit ``[M, K]`` convolution weights (uint8 or int8) as the broadcast side
    of ``ml_q8conv``.

    Parameters
    ----------
    w : numpy.ndarray
        ``[M, K]`` uint8 or int8.
    zw : numpy.ndarray
        The zero point per row, ``[M]``.

    Returns
    -------
    tuple of numpy.ndarray
        ``(packed int8, alpha int32 [M], rowsum int32 [M])``: ``a' = w - oa`` (``oa``
        128 for uint8, 0 for int8) in panels of QMR rows and quads of K, ``oa - zw`` and
        the row sums of ``a'``.
    """
    m, k = w.shape
    oa = 128 if w.dtype == np.uint8 else 0
    ap = w.astype(np.int32) - oa
    mp, kq = -(-m // QMR) * QMR, q8_kq(k)
    padded = np.zeros((mp, kq), np.int8)
    padded[:m, :k] = ap
    # [panel, r, k/4, k%4] -> [panel, k/4, r, k%4]
    packed = padded.reshape(mp // QMR, QMR, kq // 4, 4).transpose(0, 2, 1, 3)
    alpha = (oa - np.asarray(zw).astype(np.int32).reshape(m)).astype(np.int32)
    return np.ascontiguousarray(packed).ravel(), alpha, ap.sum(axis=1).astype(np.int32)


def q8_conv_bbuf_bytes(k: int) -> int:
    """Bytes of one thread's B block in ``ml_q8conv`` (mirrors ``ml_q8c_bbuf_bytes``)."""
    kq = q8_kq(k)
    nc = min(max((2**18 // kq) // QNR * QNR, QNR), 1024)
    return nc * kq + 4 * (nc + 64) + 4 * nc + 64


def q8_call(
    ctx: EmitContext,
    name: str,
    m: int,
    k: int,
    n: int,
    a: str,
    lda: str,
    za: str,
    packed: tuple[np.ndarray, np.ndarray, np.ndarray],
    out: dict[str, str],
) -> str:
    """C block: copy the ``m`` uint8 rows of A (``a``, row stride ``lda``, zero point
    ``za``, C expressions) into scratch, then ``ml_q8gemv_par`` with B ``packed``
    (:func:`pack_b8`, made params named after ``name``) storing through ``out``
    (``ml_qout`` members, ``y``/``ld`` filled)."""
    kq = q8_kq(k)
    pb, colsum, beta = packed
    bp = ctx.param(pb, f"{name}.b8")
    cs = ctx.param(colsum, f"{name}.colsum8")
    bt = ctx.param(beta, f"{name}.beta8")
    abuf = ctx.scratch(q8_a_bytes(m, k))
    rows = ctx.scratch(4 * m)
    lines = [
        "{",
        f"  ml_q8_prep_a({m}, {k}, {kq}, (const uint8_t*)({a}), {lda}, (uint8_t*){abuf}, (int32_t*){rows});",
        "  ml_q8_args q8_;",
        "  memset(&q8_, 0, sizeof q8_);",
        f"  q8_.M = {m}; q8_.N = {n}; q8_.K = {k}; q8_.Kq = {kq};",
        f"  q8_.a = (const uint8_t*){abuf}; q8_.rowsum = (const int32_t*){rows};",
        f"  q8_.b = (const int8_t*){bp}; q8_.colsum = {cs}; q8_.beta = {bt};",
        f"  q8_.za = {za};",
        f"  q8_.n_end = {n};",
    ]
    lines += [f"  q8_.out.{key} = {val};" for key, val in out.items()]
    lines += ["  ml_q8gemv_par(&q8_);", "}"]
    return "\n".join(lines)
