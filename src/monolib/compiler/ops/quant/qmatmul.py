"""QLinearMatMul (10, 21) and MatMulInteger (10): 8-bit matrix products with int32
accumulation (NumPy ``matmul`` shapes: 1-D operands, broadcast batch dims).

ONNX specs: ``MatMulInteger``: ``Y = (A - a_zero_point) @ (B - b_zero_point)`` in int32,
``a_zero_point`` per tensor or per row of A (``M`` values), ``b_zero_point`` per tensor or
per column of B (``N`` values). ``QLinearMatMul``: the same product requantized with
``a_scale * b_scale / y_scale`` (``a_scale`` per tensor, ``b_scale`` per tensor or per
column) to ``y_zero_point``'s type. Zero points that differ per batch are not supported.

Lowering: per batch one ``ml_qgemm`` of ``kernels/qgemm.h``; a constant operand (the
weights) is packed at compile time with its zero point subtracted, a runtime A is packed
per batch into scratch, a runtime B is packed per block of columns by the kernel. A
run-time uint8 A times a constant B keeps B as bytes (``q8gemv.h``) where the CPU has
AVX-512 VNNI, or AVX2 and A is one row (``_q8.use_q8``).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UndecidableDimError, UnsupportedOpError
from ...ir import Node, max_shape, shape_size
from ..base import EmitContext, OutType, register
from ..tensor.loops import broadcast_shape
from ._q8 import include_q8, pack_b8, q8_call, use_q8
from ._qcommon import (
    Q8,
    QMR,
    check_vector,
    include_qgemm,
    mult_ref,
    pack_a16,
    pack_b16,
    qgemm_bbuf_bytes,
    qgemm_call,
    requantize,
    require_q8,
    zp_c,
    zp_ref,
)
from ._qop import QuantOp, check_float_scales, requantized_out

__all__ = ["MatMulInteger", "QLinearMatMul"]

logger = logging.getLogger(__name__)


def _dims(node: Node, a_shape, b_shape):
    """(batch shape, M, K, N, output shape) of ``matmul(A, B)``.

    Raises
    ------
    ShapeError
        When K differs or the batch dims do not broadcast.
    """
    a, b = list(a_shape), list(b_shape)
    if not a or not b:
        raise ShapeError(f"{node.op_type} node {node.name!r}: operands must be at least 1-D")
    drop_m, drop_n = len(a) == 1, len(b) == 1
    a = [1] + a if drop_m else a
    b = b + [1] if drop_n else b
    if a[-1] != b[-2]:
        raise ShapeError(f"{node.op_type} node {node.name!r}: A {list(a_shape)} and B {list(b_shape)} disagree on K")
    try:  # by structure: a run-time batch dim meets 1 or itself
        batch = list(broadcast_shape(tuple(a[:-2]), tuple(b[:-2])))
    except ShapeError:
        raise ShapeError(
            f"{node.op_type} node {node.name!r}: batch dims of A {list(a_shape)} and B "
            f"{list(b_shape)} do not broadcast"
        ) from None
    m, k, n = a[-2], a[-1], b[-1]
    out = batch + ([] if drop_m else [m]) + ([] if drop_n else [n])
    return batch, a, b, m, k, n, tuple(out)


def _batch_index(shape: list[int], batch: list[int]) -> np.ndarray:
    """For each batch of the broadcast ``batch`` shape, the batch index in ``shape``."""
    own = shape[:-2]
    count = int(np.prod(own, dtype=np.int64))
    idx = np.arange(count, dtype=np.int64).reshape(own) if own else np.zeros((), np.int64)
    return np.broadcast_to(idx, tuple(batch)).ravel() if batch else idx.reshape(1)


def _bbuf_bytes_at_bounds(k, n) -> int:
    """``qgemm_bbuf_bytes(k, n)``, for a run-time K or N the most any in-bound size needs
    (it grows with N; along K it is not monotonic, so every K up to its bound is tried)."""
    kh, nh = max_shape((k, n))
    if type(k) is int:
        return qgemm_bbuf_bytes(k, nh)
    return max(qgemm_bbuf_bytes(kk, nh) for kk in range(1, kh + 1))


class _QMatMul(QuantOp):
    """Shared logic; subclasses name the input positions."""

    A, B, AZP, BZP = 0, 1, 2, 3

    def _check(self, node: Node):
        require_q8(node, self.A, self.B)
        dims = _dims(node, node.inputs[self.A].shape, node.inputs[self.B].shape)
        _, _, _, m, _, n, _ = dims
        check_vector(node, self.AZP, m, "row of A")
        check_vector(node, self.BZP, n, "column of B")
        return dims

    def infer(self, node: Node) -> list[OutType]:
        return [(self._check(node)[-1], self._out_dtype(node))]

    def _acc(self, node: Node, inputs: list) -> np.ndarray:
        _, ash, bsh, m, _, n, out = _dims(node, inputs[self.A].shape, inputs[self.B].shape)
        a = inputs[self.A].astype(np.int64).reshape(ash)
        b = inputs[self.B].astype(np.int64).reshape(bsh)
        az = zp_ref(inputs[self.AZP] if len(inputs) > self.AZP else None, m).reshape(m, 1)
        bz = zp_ref(inputs[self.BZP] if len(inputs) > self.BZP else None, n)
        return np.matmul(a - az, b - bz).astype(np.int32).reshape(out)

    def emit(self, node: Node, ctx: EmitContext) -> str:
        batch, ash, bsh, m, k, n, _ = _dims(node, node.inputs[self.A].shape, node.inputs[self.B].shape)
        a, b, y = node.inputs[self.A], node.inputs[self.B], node.outputs[0]
        if m == 0 or n == 0 or y.size == 0:
            return ""
        include_qgemm(ctx)
        out, code, _ = self._out(node, ctx)
        if all(type(d) is int for d in batch):
            nb = int(np.prod(batch, dtype=np.int64))
            a_at = self._bidx(ctx, node, _batch_index(ash, batch), "a")
            b_at = self._bidx(ctx, node, _batch_index(bsh, batch), "b")
        elif len(bsh) == 2 and len(ash) == len(batch) + 2:
            # a run-time batch of A against one B matrix: A's batch is the output's
            nb, a_at, b_at = shape_size(batch), "bt", "0"
        else:
            raise UndecidableDimError(
                f"{node.op_type} node {node.name!r}: a run-time batch {batch} is taken only "
                f"by A against a 2-D B"
            )
        q8 = self._emit_q8(node, ctx, out, code, nb, a_at, bsh, m, k, n)
        if q8 is not None:
            return q8
        kp = k + k % 2  # K rounded up to even (a Dim too)
        per_a = -(-m // QMR) * QMR * kp
        per_b = kp * (-(-n // 16) * 16)
        lines = [self._prologue(node, ctx), code]
        # A: packed at compile time when constant, else per batch into scratch
        az, bz = node.input(self.AZP), node.input(self.BZP)
        pack_a = ""
        if a.const is not None and a.dtype in Q8 and (az is None or az.const is not None):
            ai_ = a.const.astype(np.int32).reshape(-1, m, k) - zp_ref(None if az is None else az.const, m)[:, None]
            apk = ctx.param(np.concatenate([pack_a16(x) for x in ai_]), f"{node.name}.packed_a16")
            a_expr = f"{apk} + {a_at} * {per_a}"
        else:
            zcode, a_ptr, a_signed, azp_arr, azp0 = self._a_source(node, ctx, m)
            abuf = ctx.scratch(2 * per_a)
            lines.append(zcode)
            a_expr = f"(const int16_t*){abuf}"
            pack_a = (
                f"  ml_qpack_a({m}, {k}, {a_ptr} + {a_at} * {m * k}, "
                f"{a_signed}, {k}, 1, {azp_arr}, {azp0}, (int16_t*){abuf});\n"
            )
        if b.const is not None and (bz is None or bz.const is not None):
            bi_ = b.const.astype(np.int32).reshape(-1, k, n) - zp_ref(None if bz is None else bz.const, n)
            bpk = ctx.param(np.concatenate([pack_b16(x) for x in bi_]), f"{node.name}.packed_b16")
            bsrc = {"kind": "ML_QB_PACKED", "p16": f"{bpk} + {b_at} * {per_b}"}
            bbuf = "0"
        else:
            bzp0, bzp_arr, zcode = zp_c(ctx, node, self.BZP, n)
            lines.append(zcode)
            bsrc = {
                "kind": "ML_QB_STRIDED",
                "is_signed": str(int(b.dtype == np.int8)),
                "p8": f"{ctx.ptr(b)} + {b_at} * {k * n}",
                "ldk": str(n),
                "ldn": "1",
                "zp_n": bzp_arr if bzp_arr != "0" else "0",
                "zp0": bzp0,
            }
            bbuf = f"(int16_t*){ctx.scratch(_bbuf_bytes_at_bounds(k, n))}"
        out = dict(out)
        out["y"] = f"(void*)({ctx.ptr(y)} + bt * {m * n})"
        out["ld"] = str(n)
        fields = {"M": str(m), "N": str(n), "K": str(k), "a": a_expr, "bbuf": bbuf}
        body = pack_a + qgemm_call(fields, bsrc, out)
        lines.append(f"for (int64_t bt = 0; bt < {nb}; ++bt) {{\n{body}\n}}")
        return "\n".join(x for x in lines if x)

    def _emit_q8(self, node: Node, ctx: EmitContext, out, code, nb, a_at, bsh, m, k, n) -> str | None:
        """The product through ``q8gemv.h`` (weights kept as bytes) for a run-time uint8
        A with one zero point against one constant 2-D B where ``_q8.use_q8``; else None."""
        a, b, bz = node.inputs[self.A], node.inputs[self.B], node.input(self.BZP)
        if not (
            all(type(v) is int for v in (m, k, n))
            and use_q8(m)
            and a.const is None
            and len(bsh) == 2
            and b.const is not None
            and (bz is None or bz.const is not None)
        ):
            return None
        zcode, a_ptr, a_signed, azp_arr, azp0 = self._a_source(node, ctx, m)
        if a_signed != "0" or azp_arr != "0":
            return None
        include_q8(ctx)
        zb = zp_ref(None if bz is None else bz.const, n)
        packed = pack_b8(b.const.reshape(k, n), zb)
        out = dict(out)
        out["y"] = f"(void*)({ctx.ptr(node.outputs[0])} + bt * {m * n})"
        out["ld"] = str(n)
        call = q8_call(ctx, node.name, m, k, n, f"{a_ptr} + {a_at} * {m * k}", str(k), azp0, packed, out)
        lines = [self._prologue(node, ctx), code, zcode, f"for (int64_t bt = 0; bt < {nb}; ++bt) {{\n{call}\n}}"]
        return "\n".join(x for x in lines if x)

    def _prologue(self, node: Node, ctx: EmitContext) -> str:
        """C run first in the op (none here; DynamicQuantizeMatMul quantizes A)."""
        return ""

    def _a_source(self, node: Node, ctx: EmitContext, m) -> tuple[str, str, str, str, str]:
        """``(code, pointer, is_signed, zp array, zp0)`` of the 8-bit A packed at run
        time: here input ``A`` with its zero point input (``zp_c``)."""
        a = node.inputs[self.A]
        azp0, azp_arr, zcode = zp_c(ctx, node, self.AZP, m)
        return zcode, ctx.ptr(a), str(int(a.dtype == np.int8)), azp_arr, azp0

    def _bidx(self, ctx: EmitContext, node: Node, idx: np.ndarray, which: str) -> str:
        """C expression of the operand's batch index at output batch ``bt``."""
        if idx.size == 1 or np.array_equal(idx, np.arange(idx.size)):
            return "bt" if idx.size > 1 else "0"
        return f"{ctx.param(idx.astype(np.int64), f'{node.name}.{which}_batch')}[bt]"


@register
class MatMulInteger(_QMatMul):
    """ONNX ``MatMulInteger``: A ``[..., M, K]``, B ``[..., K, N]`` (uint8 or int8 each),
    zero points per tensor or per row (A) / per column (B); Y int32 ``[..., M, N]``."""

    op_type, since_version = "MatMulInteger", 10
    A, B, AZP, BZP = 0, 1, 2, 3


@register
class QLinearMatMul(_QMatMul):
    """ONNX ``QLinearMatMul`` (10; 21 adds float16/float8 scales, refused here): inputs
    ``a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point``; a and b
    uint8 or int8, scales float32 (``b_scale`` per tensor or per column); y in
    ``y_zero_point``'s type, requantized as ``_qcommon.requantize``."""

    op_type, since_version = "QLinearMatMul", 10
    also_versions = (21,)
    A, B, AZP, BZP = 0, 3, 2, 5

    def _check(self, node: Node):
        dims = super()._check(node)
        n = dims[5]
        check_float_scales(node)
        if node.inputs[1].size != 1:
            raise UnsupportedOpError(
                f"QLinearMatMul node {node.name!r}: a_scale has {node.inputs[1].size} values; "
                "only a per-tensor a_scale is supported"
            )
        check_vector(node, 4, n, "column of B")
        check_vector(node, 6, 1, "tensor")
        check_vector(node, 7, 1, "tensor")
        require_q8(node, 7)
        return dims

    def _out_dtype(self, node: Node) -> np.dtype:
        return node.inputs[7].dtype

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        acc = self._acc(node, inputs)
        n = _dims(node, inputs[0].shape, inputs[3].shape)[5]
        mult = np.broadcast_to(mult_ref(inputs[1], inputs[4], inputs[6]), (n,))
        if len(inputs[3].shape) == 1:  # the N axis was dropped
            mult = mult[:1]
        return [requantize(acc, mult, zp_ref(inputs[7], 1)[0], self._out_dtype(node))]

    def _out(self, node: Node, ctx: EmitContext):
        return requantized_out(ctx, node, self._out_dtype(node), "ML_QMULT_COL")
