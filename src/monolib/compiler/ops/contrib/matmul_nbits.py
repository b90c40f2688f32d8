"""``com.microsoft`` ``MatMulNBits`` 1: float32 ``A`` times 4-bit block-quantized ``B``.

Follows ONNX Runtime's contrib operator spec (``docs/ContribOperators.md``,
``com.microsoft.MatMulNBits``), checked against its CPU kernel in the tests:

* ``A``: float32 ``[..., K]``; ``Y``: float32 ``[..., N]``.
* ``B``: uint8 ``[N, k_blocks, block_size / 2]`` with ``k_blocks = ceil(K / block_size)``:
  element ``k`` of row ``n`` of block ``b`` is the low nibble of byte ``k // 2`` of the
  block when ``k`` is even, the high nibble when odd.
* ``scales``: float32, ``N * k_blocks`` values (``[N, k_blocks]`` or flat).
* ``zero_points`` (optional): uint8 packed two per byte, ``N * ceil(k_blocks / 2)``
  (block ``b`` in the low nibble when ``b`` is even), or float32 ``N * k_blocks``; absent:
  ``2 ** (bits - 1) = 8``.
* ``bias`` (optional, input 5): float32 ``[N]``, added to each row.
* ``W[n, k] = (q - zero_point) * scale``; ``Y = A @ W^T (+ bias)``.

The library keeps B 4-bit, repacked at compile time into panels of 16 columns
(:func:`repack_nbits`); the kernel (``matmul_nbits.h``) dequantizes on the fly inside a
GEMV loop for a few rows and inside gemm.h's blocked GEMM for more. B, scales and zero
points must be constants (initializers, as the quantizers write them).
``accuracy_level`` only lets ONNX Runtime compute in lower precision; monolib computes
in float32 whatever it says.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, shape_size
from ...symbolic import is_dim
from .._constants import include_checked
from ..base import EmitContext, OpDef, OutType, register
from ..nn._gemm import KC, MR, NR, include_gemm

__all__ = ["MatMulNBits", "dequantize_nbits", "repack_nbits"]

logger = logging.getLogger(__name__)

GEMV_ROWS = 8  # ML_NBITS_GEMV_ROWS of matmul_nbits.h
NCHUNK = 256  # ML_NBITS_NCHUNK
PANEL = NR  # columns of a repacked panel: one vector of 16 floats, gemm.h's panel width


def _dims(node: Node) -> tuple[int, int, int, int]:
    """``(K, N, block_size, k_blocks)`` of a MatMulNBits node, checked.

    Raises
    ------
    UnsupportedOpError
        ``bits`` other than 4, a ``g_idx`` input, types other than float32 ``A``/scales.
    ShapeError
        ``block_size`` not a power of two in 16..256, or inputs whose sizes disagree with
        ``K``/``N``/``block_size``.
    """
    where = f"MatMulNBits (node {node.name!r})"
    k, n = int(node.attrs["K"]), int(node.attrs["N"])
    bits, bs = int(node.attrs.get("bits", 4)), int(node.attrs["block_size"])
    if bits != 4:
        raise UnsupportedOpError(f"{where}: bits={bits}; monolib implements 4-bit weights")
    if bs < 16 or bs > 256 or bs & (bs - 1):
        raise ShapeError(f"{where}: block_size {bs} is not a power of two in 16..256")
    a, b, sc = node.inputs[0], node.inputs[1], node.inputs[2]
    if a.dtype != np.float32 or sc.dtype != np.float32:
        raise UnsupportedOpError(f"{where}: A {a.dtype}, scales {sc.dtype} (float32 only)")
    if node.input(4) is not None:
        raise UnsupportedOpError(f"{where}: the g_idx input (act-order) is not supported")
    nblk = -(-k // bs)
    if not a.shape or a.shape[-1] != k:
        raise ShapeError(f"{where}: A {a.shape} does not end in K={k}")
    if b.dtype != np.uint8 or int(np.prod(b.shape)) != n * nblk * bs // 2:
        raise ShapeError(f"{where}: B {b.dtype}{b.shape} is not uint8 [{n}, {nblk}, {bs // 2}]")
    if int(np.prod(sc.shape)) != n * nblk:
        raise ShapeError(f"{where}: scales {sc.shape} do not hold N*k_blocks={n * nblk} values")
    zp = node.input(3)
    if zp is not None:
        want = n * ((nblk + 1) // 2) if zp.dtype == np.uint8 else n * nblk
        if zp.dtype not in (np.uint8, np.float32) or int(np.prod(zp.shape)) != want:
            raise ShapeError(f"{where}: zero_points {zp.dtype}{zp.shape} (want {want} values)")
    bias = node.input(5)
    if bias is not None and (bias.dtype != np.float32 or int(np.prod(bias.shape)) != n):
        raise ShapeError(f"{where}: bias {bias.dtype}{bias.shape} is not float32 [{n}]")
    return k, n, bs, nblk


def _zero_points(zp: np.ndarray | None, n: int, nblk: int) -> np.ndarray:
    """MatMulNBits' zero points as float32 ``[N, k_blocks]``: 8 when absent, two 4-bit
    values a byte (low nibble first, each row padded to whole bytes) when uint8, else the
    float values as given."""
    if zp is None:
        return np.full((n, nblk), 8.0, np.float32)
    if zp.dtype == np.uint8:
        zb = np.asarray(zp).reshape(n, -1)
        return np.stack([zb & 15, zb >> 4], axis=-1).reshape(n, -1)[:, :nblk].astype(np.float32)
    return np.asarray(zp, np.float32).reshape(n, nblk)


def dequantize_nbits(b: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, k: int,
                     n: int, bs: int) -> np.ndarray:
    """The float32 ``[N, K]`` weight of MatMulNBits 4-bit data (the NumPy reference of the
    layout the module docstring describes)."""
    nblk = -(-k // bs)
    raw = np.asarray(b, np.uint8).reshape(n, nblk, bs // 2)
    q = np.empty((n, nblk, bs), np.float32)
    q[..., 0::2], q[..., 1::2] = raw & 15, raw >> 4
    z = _zero_points(zp, n, nblk)
    s = np.asarray(scales, np.float32).reshape(n, nblk)
    w = (q - z[..., None]) * s[..., None]
    return w.reshape(n, nblk * bs)[:, :k]


def repack_nbits(b: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, k: int, n: int,
                 bs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MatMulNBits' 4-bit data in ``matmul_nbits.h``'s panel layout, still 4-bit.

    Returns
    -------
    q : uint8 ``[ceil(N/16), ceil(K/2), 16]``
        Byte ``(p, i, c)`` holds ``W[16p + c]``'s elements ``2i`` (low nibble) and
        ``2i + 1`` (high nibble): ORT's row bytes transposed into panels of 16 columns.
    s, zs : float32 ``[ceil(N/16), k_blocks, 16]``
        The scales and ``zero_point * scale`` (zero past column ``N``), so that
        ``W = q * s - zs``.
    """
    nblk, panels, kp2 = -(-k // bs), -(-n // PANEL), -(-k // 2)
    rows = np.zeros((panels * PANEL, kp2), np.uint8)
    rows[:n] = np.asarray(b, np.uint8).reshape(n, nblk * bs // 2)[:, :kp2]
    q = np.ascontiguousarray(rows.reshape(panels, PANEL, kp2).transpose(0, 2, 1))
    sc = np.asarray(scales, np.float32).reshape(n, nblk)
    z = _zero_points(zp, n, nblk)
    out = []
    for v in (sc, z * sc):
        full = np.zeros((panels * PANEL, nblk), np.float32)
        full[:n] = v
        out.append(np.ascontiguousarray(full.reshape(panels, PANEL, nblk).transpose(0, 2, 1)))
    return q, out[0], out[1]


@register
class MatMulNBits(OpDef):
    """``com.microsoft`` ``MatMulNBits`` 1 with 4-bit weights; see the module docstring.

    Raises
    ------
    UnsupportedOpError, ShapeError
        See :func:`_dims`.
    """

    op_type, domain, since_version = "MatMulNBits", "com.microsoft", 1
    defaults = {"bits": 4, "accuracy_level": 0}

    def infer(self, node: Node) -> list[OutType]:
        _, n, _, _ = _dims(node)
        return [(tuple(node.inputs[0].shape[:-1]) + (n,), np.dtype(np.float32))]

    def reference(self, node: Node, inputs):
        k, n, bs, _ = _dims(node)
        a, b, sc = inputs[:3]
        zp = inputs[3] if len(inputs) > 3 else None
        bias = inputs[5] if len(inputs) > 5 else None
        w = dequantize_nbits(b, sc, zp, k, n, bs).astype(np.float64)
        y = np.asarray(a, np.float64) @ w.T
        if bias is not None:
            y = y + bias
        return [y.astype(np.float32)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        k, n, bs, nblk = _dims(node)
        a, y = node.inputs[0], node.outputs[0]
        for i, what in ((1, "B"), (2, "scales"), (3, "zero_points")):
            v = node.input(i)
            if v is not None and v.const is None:
                raise UnsupportedOpError(
                    f"MatMulNBits (node {node.name!r}): {what} is computed at run time; "
                    f"monolib repacks the quantized weight at compile time (a constant)")
        m = shape_size(a.shape[:-1])
        m_hi = m.hi if is_dim(m) else int(m)
        if m_hi == 0 or n == 0:
            return ""
        include_gemm(ctx)
        include_checked(ctx, "matmul_nbits.h", {"ML_NBITS_GEMV_ROWS": GEMV_ROWS,
                                                "ML_NBITS_NCHUNK": NCHUNK, "ML_NR": PANEL},
                        __name__)
        zp, bias = node.input(3), node.input(5)
        q, s, zs = repack_nbits(node.inputs[1].const, node.inputs[2].const,
                                None if zp is None else zp.const, k, n, bs)
        # the work buffer: A padded to an even K + block sums, or packed A (the header)
        work = max(m_hi * (k + k % 2 + nblk), -(-m_hi // MR) * MR * k)
        fields = {
            "M": str(m), "N": str(n), "K": str(k), "bs": str(bs), "nblk": str(nblk),
            "a": ctx.ptr(a), "q": ctx.param(q, f"{node.name}.q4"),
            "s": ctx.param(s, f"{node.name}.scales"), "zs": ctx.param(zs, f"{node.name}.zs"),
            "bias": ctx.ptr(bias) if bias is not None else "0",
            "c": ctx.ptr(y), "work": f"(float*){ctx.scratch(4 * work)}",
        }
        scratch = ctx.scratch(4 * min(k, KC) * NCHUNK)
        body = "".join(f"  g_.{f} = {v};\n" for f, v in fields.items())
        return (f"{{\n  ml_nbits_args g_;\n  memset(&g_, 0, sizeof g_);\n{body}"
                f"  ml_matmul_nbits(&g_, {scratch});\n}}")
