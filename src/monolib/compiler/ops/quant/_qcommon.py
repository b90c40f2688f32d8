"""Shared pieces of the quantized ops: compile-time packing for ``kernels/qgemm.h``,
zero points and scales as C, and the NumPy requantization they all follow.

Requantization (QLinearConv, QLinearMatMul) follows ONNX Runtime's kernels, which the
ONNX spec's QuantizeLinear describes: ``mult = x_scale * w_scale / y_scale`` in float32
(per tensor, per output channel or per column), then
``y = saturate(round_half_even(float32(acc) * mult) + y_zero_point)``.
The layouts here must equal ``qgemm.h``'s (see its header comment).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, Value
from .._constants import include_checked
from ..base import EmitContext

__all__ = [
    "Q8",
    "QMR",
    "QNR",
    "check_qlinear_unary",
    "mult_c",
    "mult_ref",
    "out_fields",
    "pack_a16",
    "pack_b16",
    "include_qgemm",
    "qgemm_bbuf_bytes",
    "qgemm_call",
    "requantize",
    "require_q8",
    "scale_product_c",
    "zp_c",
    "zp_ref",
]

logger = logging.getLogger(__name__)

QMR = 6
QNR = 16


def include_qgemm(ctx: EmitContext) -> None:
    """Paste ``qgemm.h``, checked against :data:`QMR` and :data:`QNR`."""
    include_checked(ctx, "qgemm.h", {"ML_QMR": QMR, "ML_QNR": QNR}, __name__)
Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _even(k: int) -> int:
    return k + (k & 1)


def pack_a16(a: np.ndarray) -> np.ndarray:
    """Pack an integer ``[M, K]`` matrix (zero points already subtracted, values in
    int16) into qgemm.h's A panels: 1-D int16 of ``ceil(M/QMR)*QMR * Kp`` elements."""
    m, k = a.shape
    mp, kp = -(-m // QMR) * QMR, _even(k)
    padded = np.zeros((mp, kp), np.int16)
    padded[:m, :k] = a
    # [panel, r, k/2, k%2] -> [panel, k/2, r, k%2]
    return np.ascontiguousarray(padded.reshape(mp // QMR, QMR, kp // 2, 2).transpose(0, 2, 1, 3)).ravel()


def pack_b16(b: np.ndarray) -> np.ndarray:
    """Pack an integer ``[K, N]`` matrix (zero points subtracted) into qgemm.h's full B
    panels (``ML_QB_PACKED``): 1-D int16 of ``Kp * ceil(N/QNR)*QNR`` elements."""
    k, n = b.shape
    kp, np_ = _even(k), -(-n // QNR) * QNR
    padded = np.zeros((kp, np_), np.int16)
    padded[:k, :n] = b
    # [k/2, k%2, panel, c] -> [panel, k/2, c, k%2]
    return np.ascontiguousarray(padded.reshape(kp // 2, 2, np_ // QNR, QNR).transpose(2, 0, 3, 1)).ravel()


def qgemm_bbuf_bytes(k: int, n: int) -> int:
    """Bytes of the B block buffer one ``ml_qgemm`` call needs (mirrors
    ``ml_qgemm_bbuf_bytes`` of qgemm.h)."""
    kp = _even(k)
    nc = min(max((2**18 // max(kp, 1)) // QNR * QNR, QNR), 1024)
    return 2 * kp * min(-(-n // QNR) * QNR, nc)


def require_q8(node: Node, *idx: int) -> None:
    """Raise UnsupportedOpError unless the listed (present) inputs are uint8 or int8."""
    for i in idx:
        v = node.input(i)
        if v is not None and v.dtype not in Q8:
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name!r}: input {i} is {v.dtype}; the integer "
                "kernels take uint8 or int8"
            )


def check_qlinear_unary(node: Node) -> np.dtype:
    """X's type, for the ``com.microsoft`` QLinear ops over one tensor (inputs ``X,
    X_scale, X_zero_point?, Y_scale, Y_zero_point?``: QLinearSigmoid, QLinearLeakyRelu,
    QLinearSoftmax, QLinearAveragePool, QLinearGlobalAveragePool; ONNX Runtime's
    ``ContribOperators.md``), after checking X is uint8 or int8, the scales are float32
    scalars (per tensor) and the zero points scalars of X's type.

    Raises
    ------
    UnsupportedOpError
        Naming the node and the offending input.
    """
    x = node.inputs[0]
    if x.dtype not in Q8:
        raise UnsupportedOpError(
            f"{node.op_type} node {node.name!r}: X is {x.dtype}; expected uint8 or int8"
        )
    for i in (1, 3):
        if node.inputs[i].size != 1 or node.inputs[i].dtype != np.float32:
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name!r}: input {i} must be a float32 scalar "
                "(per-tensor scale)"
            )
    for i in (2, 4):
        z = node.input(i)
        if z is not None and (z.size != 1 or z.dtype != x.dtype):
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name!r}: zero point input {i} must be a "
                f"{x.dtype} scalar"
            )
    return x.dtype


def _count_ok(v: Value, count: int) -> bool:
    """A scalar (any shape of one element) or ``count`` elements along one dim."""
    return v.size == 1 or (v.size == count and max(v.shape, default=1) == count)


def check_vector(node: Node, idx: int, count: int, what: str) -> None:
    """Raise ShapeError unless input ``idx`` (if present) is a scalar or has ``count``
    elements (``what``: what they run along, for the message)."""
    v = node.input(idx)
    if v is not None and not _count_ok(v, count):
        raise ShapeError(
            f"{node.op_type} node {node.name!r}: input {idx} has shape {list(v.shape)}; "
            f"expected a scalar or {count} values (one per {what})"
        )


def zp_ref(zp: np.ndarray | None, count: int) -> np.ndarray:
    """A zero point input as int32 ``[count]`` (0 when omitted; a scalar broadcast)."""
    if zp is None:
        return np.zeros(count, np.int32)
    return np.broadcast_to(np.asarray(zp).astype(np.int32).ravel(), (count,)).copy()


def zp_c(ctx: EmitContext, node: Node, idx: int, count: int) -> tuple[str, str, str]:
    """``(zp0, zp_array, code)`` C for zero point input ``idx``: a scalar as ``zp0`` (and
    a null array), or a per-element int32 array of ``count`` (a param when constant, else
    converted into scratch by ``code``)."""
    v = node.input(idx)
    if v is None:
        return "0", "0", ""
    if v.size == 1:
        return f"(int32_t){ctx.ptr(v)}[0]", "0", ""
    if v.const is not None:
        return "0", ctx.param(zp_ref(v.const, count), f"{node.name}.zp{idx}"), ""
    buf = ctx.scratch(4 * count)
    i = ctx.unique("i")
    code = f"for (int64_t {i} = 0; {i} < {count}; ++{i}) ((int32_t*){buf})[{i}] = {ctx.ptr(v)}[{i}];\n"
    return "0", f"((const int32_t*){buf})", code


def mult_ref(a_scale: np.ndarray, b_scale: np.ndarray, y_scale: np.ndarray) -> np.ndarray:
    """``a_scale * b_scale / y_scale`` in float32, in that order (as ONNX Runtime)."""
    a = np.float32(np.asarray(a_scale, np.float32).ravel()[0])
    y = np.float32(np.asarray(y_scale, np.float32).ravel()[0])
    return (a * np.asarray(b_scale, np.float32).ravel()) / y


def scale_product_c(
    ctx: EmitContext, a_scale: str, b_scale: Value, extra: str = ""
) -> tuple[str, str]:
    """``(pointer, code)``: C filling a scratch float array at run time with
    ``(a_scale * b_scale[i])`` then ``extra`` (e.g. ``" / y[0]"``), one float per
    ``b_scale`` element; ``a_scale`` is a C float expression."""
    n = b_scale.size
    buf = ctx.scratch(4 * n)
    i = ctx.unique("i")
    code = (
        f"for (int64_t {i} = 0; {i} < {n}; ++{i}) ((float*){buf})[{i}] = "
        f"({a_scale} * {ctx.ptr(b_scale)}[{i}]){extra};\n"
    )
    return f"((const float*){buf})", code


def mult_c(ctx: EmitContext, a_scale: Value, b_scale: Value, y_scale: Value) -> tuple[str, str]:
    """``(pointer, code)``: C that computes ``mult_ref`` into a scratch float array at
    run time (``b_scale.size`` elements)."""
    return scale_product_c(ctx, f"{ctx.ptr(a_scale)}[0]", b_scale, f" / {ctx.ptr(y_scale)}[0]")


def requantize(acc: np.ndarray, mult: np.ndarray, zp: np.ndarray | None, dtype) -> np.ndarray:
    """``saturate(rint(float32(acc) * mult) + zp)`` into ``dtype`` (uint8/int8)."""
    info = np.iinfo(dtype)
    f = np.rint(acc.astype(np.float32) * mult.astype(np.float32))
    q = f.astype(np.float64) + (0 if zp is None else np.asarray(zp).astype(np.float64))
    return np.clip(q, info.min, info.max).astype(dtype)


def out_fields(dtype, y: str, ld: str, mult: str = "0", mode: str = "ML_QMULT_TENSOR", zp: str = "0") -> dict[str, str]:
    """``ml_qout`` members: int32 output, requantized into uint8/int8, or float32
    (``(float)acc * mult``; the caller may add ``fbias``)."""
    kind = {
        np.dtype(np.int32): "ML_QOUT_I32",
        np.dtype(np.uint8): "ML_QOUT_U8",
        np.dtype(np.int8): "ML_QOUT_S8",
        np.dtype(np.float32): "ML_QOUT_F32",  # (float)acc * mult (+ fbias): com.microsoft ops
    }[np.dtype(dtype)]
    return {"kind": kind, "y": f"(void*)({y})", "ld": ld, "mult": mult, "mult_mode": mode, "zp": zp}


def qgemm_call(fields: dict[str, str], bsrc: dict[str, str], out: dict[str, str]) -> str:
    """C block that fills an ``ml_qgemm_args`` (``qa_``) and calls ``ml_qgemm_par``.
    ``fields`` needs ``M``, ``N``, ``K``, ``a`` and ``bbuf``; omitted members are 0."""
    lines = ["{", "  ml_qgemm_args qa_;", "  memset(&qa_, 0, sizeof qa_);"]
    for key, val in fields.items():
        lines.append(f"  qa_.{key} = {val};")
    lines.append(f"  qa_.n_end = {fields['N']};")
    for key, val in bsrc.items():
        lines.append(f"  qa_.b.{key} = {val};")
    for key, val in out.items():
        lines.append(f"  qa_.out.{key} = {val};")
    lines += ["  ml_qgemm_par(&qa_);", "}"]
    return "\n".join(lines)
