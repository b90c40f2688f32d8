"""``com.microsoft`` quantized matrix products: MatMulIntegerToFloat, DynamicQuantizeMatMul
(what ONNX Runtime's graph optimizer fuses ``quantize_dynamic``'s DynamicQuantizeLinear +
MatMulInteger + Cast + Mul (+ Add) into) and QGemm (the QOperator quantizer's Gemm).

Semantics (ONNX Runtime ``docs/ContribOperators.md``, checked against its CPU kernels):

* ``MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?)``:
  ``Y = float32(acc) * (a_scale * b_scale[n]) + bias[n]``, ``acc`` the exact int32 sum
  ``(A - a_zp) @ (B - b_zp)`` (NumPy matmul shapes); ``a_scale``/``a_zero_point`` per
  tensor, ``b_scale``/``b_zero_point`` per tensor or per column.
* ``DynamicQuantizeMatMul(A, B, b_scale, b_zero_point?, bias?)``: A (float32) quantized
  to uint8 first as DynamicQuantizeLinear does it (over the whole tensor, min/max
  including 0, ``scale = (max - min) / 255``, zero point rounded half to even,
  ``round(x / scale) + zp`` saturated), then as MatMulIntegerToFloat.
* ``QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zero_point?)``, attributes
  ``transA``, ``transB``, ``alpha``: ``acc = (A' - a_zp) @ (B' - b_zp) + C`` (C int32,
  broadcast), ``scale[n] = alpha * a_scale * b_scale[n] (/ y_scale)``; with ``y_scale``
  ``Y = saturate(round_half_even(acc * scale) + y_zp)`` in ``y_zero_point``'s type, else
  ``Y = float32(acc) * scale``.

The sums are exact (``ops/quant/qgemm.h``, shared with MatMulInteger/QLinearMatMul); the
float tail is ``acc * mult (+ bias)`` in float32 like ONNX Runtime's scale-bias output
(the C compiler may contract it to one fused multiply-add: within 1 ulp).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from ..quant._qcommon import (
    QMR,
    check_vector,
    include_qgemm,
    out_fields,
    pack_a16,
    pack_b16,
    qgemm_bbuf_bytes,
    qgemm_call,
    requantize,
    require_q8,
    scale_product_c,
    zp_c,
    zp_ref,
)
from ..quant.dynamic_quantize import DynamicQuantizeLinear
from ..quant.qmatmul import _dims, _QMatMul

__all__ = ["DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm"]

logger = logging.getLogger(__name__)

_F32 = np.dtype(np.float32)


def _require_float(node: Node, *idx: int) -> None:
    """Raise UnsupportedOpError unless the listed (present) inputs are float32."""
    for i in idx:
        v = node.input(i)
        if v is not None and v.dtype != _F32:
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name!r}: input {i} is {v.dtype}; only float32 is supported"
            )


def _check_scalar(node: Node, idx: int, what: str) -> None:
    """Raise UnsupportedOpError unless input ``idx`` (if present) holds one value."""
    v = node.input(idx)
    if v is not None and v.size != 1:
        raise UnsupportedOpError(
            f"{node.op_type} node {node.name!r}: {what} (input {idx}) has shape "
            f"{list(v.shape)}; only a per-tensor value is supported"
        )


class _ToFloat(_QMatMul):
    """The float-output matmuls: input positions ``A, B, AZP, BZP`` plus ``BS`` (b_scale)
    and ``BIAS``; :meth:`_a_scale` names the C float of A's scale."""

    BS, BIAS = 3, 6

    def _check(self, node: Node):
        require_q8(node, self.B)
        _require_float(node, self.BS, self.BIAS)
        dims = _dims(node, node.inputs[self.A].shape, node.inputs[self.B].shape)
        n = dims[5]
        check_vector(node, self.BZP, n, "column of B")
        check_vector(node, self.BS, n, "column of B")
        _check_scalar(node, self.AZP, "a_zero_point")
        bias = node.input(self.BIAS)
        if bias is not None and (len(bias.shape) != 1 or bias.shape[0] != n):
            raise ShapeError(
                f"{node.op_type} node {node.name!r}: bias has shape {list(bias.shape)}; expected [{n}]"
            )
        return dims

    def _out_dtype(self, node: Node) -> np.dtype:
        return _F32

    def _float_out(self, acc: np.ndarray, a_scale, inputs: list) -> np.ndarray:
        """``float32(acc) * (a_scale * b_scale) + bias`` in NumPy."""
        mult = (
            np.float32(np.asarray(a_scale, np.float32).ravel()[0])
            * np.asarray(inputs[self.BS], np.float32).ravel()
        )
        if inputs[self.B].ndim == 1:  # the N axis was dropped
            mult = mult[:1]
        y = acc.astype(np.float32) * mult
        bias = inputs[self.BIAS] if len(inputs) > self.BIAS else None
        return y + bias.astype(np.float32) if bias is not None else y

    def _a_scale(self, node: Node, ctx: EmitContext) -> str:
        raise NotImplementedError

    def _out(self, node: Node, ctx: EmitContext):
        bs = node.inputs[self.BS]
        mult, code = scale_product_c(ctx, self._a_scale(node, ctx), bs)
        out = out_fields(_F32, "0", "0", mult, "ML_QMULT_COL" if bs.size > 1 else "ML_QMULT_TENSOR")
        bias = node.input(self.BIAS)
        if bias is not None:
            out["fbias"] = ctx.ptr(bias)
        return out, code, bs.size > 1


@register
class MatMulIntegerToFloat(_ToFloat):
    """``com.microsoft`` ``MatMulIntegerToFloat``: A ``[..., M, K]`` and B ``[..., K, N]``
    (uint8 or int8 each), ``a_scale`` float32 ``[]``, ``b_scale`` float32 ``[]`` or
    ``[N]``, optional zero points (A's per tensor, B's per tensor or ``[N]``) and float32
    ``bias [N]``; Y float32 ``[..., M, N]`` (module docstring: the formula)."""

    domain, op_type, since_version = "com.microsoft", "MatMulIntegerToFloat", 1
    A, B, AS, BS, AZP, BZP, BIAS = 0, 1, 2, 3, 4, 5, 6

    def _check(self, node: Node):
        require_q8(node, self.A, self.AZP)
        _require_float(node, self.AS)
        _check_scalar(node, self.AS, "a_scale")
        return super()._check(node)

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        return [self._float_out(self._acc(node, inputs), inputs[self.AS], inputs)]

    def _a_scale(self, node: Node, ctx: EmitContext) -> str:
        return f"{ctx.ptr(node.inputs[self.AS])}[0]"


@register
class DynamicQuantizeMatMul(_ToFloat):
    """``com.microsoft`` ``DynamicQuantizeMatMul``: A float32 ``[..., M, K]``, B
    ``[..., K, N]`` uint8 or int8, ``b_scale`` float32 ``[]`` or ``[N]``, optional
    ``b_zero_point`` and float32 ``bias [N]``; Y float32 ``[..., M, N]``. A is quantized
    to uint8 in the op (C locals ``ml_dqa_``, ``ml_dqs_``, ``ml_dqz_``: one such node per
    op function)."""

    domain, op_type, since_version = "com.microsoft", "DynamicQuantizeMatMul", 1
    A, B, BS, BZP, BIAS = 0, 1, 2, 3, 4
    AZP = 5  # A's zero point is computed, never an input

    def _check(self, node: Node):
        _require_float(node, self.A)
        return super()._check(node)

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        aq, scale, zp = DynamicQuantizeLinear().reference(node, [inputs[self.A]])
        padded = list(inputs) + [None] * (self.AZP + 1 - len(inputs))
        padded[self.A], padded[self.AZP] = aq, zp
        return [self._float_out(self._acc(node, padded), scale, padded)]

    def _prologue(self, node: Node, ctx: EmitContext) -> str:
        a = node.inputs[self.A]
        n, xp, buf = a.size, ctx.ptr(a), ctx.scratch(a.size)
        i = ctx.unique("i")
        # DynamicQuantizeLinear's arithmetic, into uint8 scratch (ORT: GetQuantizationParameter
        # + MlasQuantizeLinear); an all-zero A gives zp 0, so the scale's value is moot
        return (
            "float ml_dqs_;\nint32_t ml_dqz_;\n"
            f"const uint8_t* ml_dqa_ = (const uint8_t*){buf};\n"
            "{\n"
            "  float mn_ = 0.0f, mx_ = 0.0f;\n"
            f"  for (int64_t {i} = 0; {i} < {n}; ++{i}) {{ mn_ = fminf(mn_, {xp}[{i}]); "
            f"mx_ = fmaxf(mx_, {xp}[{i}]); }}\n"
            "  ml_dqs_ = (mx_ == mn_ ? 1.0f : mx_ - mn_) / 255.0f;\n"
            "  float z_ = 0.0f - mn_ / ml_dqs_;\n"
            "  z_ = nearbyintf(z_ < 0.0f ? 0.0f : (z_ > 255.0f ? 255.0f : z_));\n"
            "  ml_dqz_ = (int32_t)z_;\n"
            f"  for (int64_t {i} = 0; {i} < {n}; ++{i}) {{\n"
            f"    float q_ = nearbyintf({xp}[{i}] / ml_dqs_) + z_;\n"
            f"    ((uint8_t*){buf})[{i}] = (uint8_t)(q_ >= 255.0f ? 255.0f : (q_ > 0.0f ? q_ : 0.0f));\n"
            "  }\n"
            "}"
        )

    def _a_source(self, node: Node, ctx: EmitContext, m):
        return "", "ml_dqa_", "0", "0", "ml_dqz_"

    def _a_scale(self, node: Node, ctx: EmitContext) -> str:
        return "ml_dqs_"


@register
class QGemm(OpDef):
    """``com.microsoft`` ``QGemm``: A ``[M, K]`` (``[K, M]`` with transA), B ``[K, N]``
    (``[N, K]`` with transB), 8-bit each; ``a_scale``/``a_zero_point`` per tensor,
    ``b_scale``/``b_zero_point`` per tensor or ``[N]``; optional int32 C broadcast to
    ``[M, N]`` (scalar, ``[N]``, ``[1, N]`` or ``[M, 1]``); optional ``y_scale`` and
    ``y_zero_point``: Y ``[M, N]`` in ``y_zero_point``'s type, else float32.

    Raises
    ------
    UnsupportedOpError
        Other types, a vector ``a_scale``/``a_zero_point``, a C that varies along both axes.
    """

    domain, op_type, since_version = "com.microsoft", "QGemm", 1
    defaults = {"transA": 0, "transB": 0, "alpha": 1.0}
    A, AS, AZP, B, BS, BZP, C, YS, YZP = range(9)

    def _mkn(self, node: Node, a_shape, b_shape) -> tuple[int, int, int]:
        if len(a_shape) != 2 or len(b_shape) != 2:
            raise ShapeError(
                f"QGemm node {node.name!r}: A {list(a_shape)} and B {list(b_shape)} must be 2-D"
            )
        m, k = a_shape[::-1] if self.attr(node, "transA") else a_shape
        kb, n = b_shape[::-1] if self.attr(node, "transB") else b_shape
        if k != kb:
            raise ShapeError(
                f"QGemm node {node.name!r}: A {list(a_shape)} and B {list(b_shape)} disagree on K"
            )
        return m, k, n

    def infer(self, node: Node) -> list[OutType]:
        require_q8(node, self.A, self.AZP, self.B, self.BZP, self.YZP)
        _require_float(node, self.AS, self.BS, self.YS)
        m, _, n = self._mkn(node, node.inputs[self.A].shape, node.inputs[self.B].shape)
        _check_scalar(node, self.AS, "a_scale")
        _check_scalar(node, self.AZP, "a_zero_point")
        check_vector(node, self.BS, n, "column of B")
        check_vector(node, self.BZP, n, "column of B")
        _check_scalar(node, self.YS, "y_scale")
        _check_scalar(node, self.YZP, "y_zero_point")
        c = node.input(self.C)
        if c is not None:
            if c.dtype != np.int32:
                raise UnsupportedOpError(f"QGemm node {node.name!r}: C is {c.dtype}, not int32")
            self._c_axis(node, c.shape, m, n)
        yzp = node.input(self.YZP)
        return [((m, n), yzp.dtype if yzp is not None else _F32)]

    def _c_axis(self, node: Node, shape, m, n) -> str:
        """``"n"`` when C varies along columns only (or is a scalar), ``"m"`` along rows."""
        s = [1] * (2 - len(shape)) + list(shape)
        if len(s) == 2 and s[0] == 1 and s[1] in (1, n):
            return "n"
        if len(s) == 2 and s[1] == 1 and s[0] == m:
            return "m"
        raise UnsupportedOpError(
            f"QGemm node {node.name!r}: C has shape {list(shape)}; supported: a scalar, [N], "
            f"[1, N] or [M, 1] (M={m}, N={n})"
        )

    def _scales(self, inputs: list, alpha: float) -> np.ndarray:
        """``alpha * a_scale * b_scale[n] (/ y_scale)`` in float32, in that order."""
        alpha = np.float32(alpha)
        s = (alpha * np.float32(np.asarray(inputs[self.AS]).ravel()[0])) * np.asarray(
            inputs[self.BS], np.float32
        ).ravel()
        ys = inputs[self.YS] if len(inputs) > self.YS else None
        return s / np.float32(np.asarray(ys).ravel()[0]) if ys is not None else s

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        a = inputs[self.A].astype(np.int64)
        b = inputs[self.B].astype(np.int64)
        a = a.T if self.attr(node, "transA") else a
        b = b.T if self.attr(node, "transB") else b
        n = b.shape[1]
        bz = zp_ref(inputs[self.BZP] if len(inputs) > self.BZP else None, n)
        acc = (a - int(np.asarray(inputs[self.AZP]).ravel()[0])) @ (b - bz)
        c = inputs[self.C] if len(inputs) > self.C else None
        if c is not None:
            acc = acc + c.astype(np.int64)
        acc = acc.astype(np.int32)
        scale = np.broadcast_to(self._scales(inputs, float(self.attr(node, "alpha"))), (n,))
        yzp = inputs[self.YZP] if len(inputs) > self.YZP else None
        if yzp is None:
            return [acc.astype(np.float32) * scale]
        return [requantize(acc, scale, zp_ref(yzp, 1)[0], yzp.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        a, b, y = node.inputs[self.A], node.inputs[self.B], node.outputs[0]
        m, k, n = self._mkn(node, a.shape, b.shape)
        if m == 0 or n == 0:
            return ""
        include_qgemm(ctx)
        ta, tb = bool(self.attr(node, "transA")), bool(self.attr(node, "transB"))
        lines = []
        # output scales at run time, in ORT's order: ((alpha * a_scale) * b_scale) / y_scale
        bs, ys = node.inputs[self.BS], node.input(self.YS)
        extra = f" / {ctx.ptr(ys)}[0]" if ys is not None else ""
        alpha = f"{float(self.attr(node, 'alpha'))!r}f"
        a_scale = f"({alpha} * {ctx.ptr(node.inputs[self.AS])}[0])"
        mult, code = scale_product_c(ctx, a_scale, bs, extra)
        lines.append(code)
        mode = "ML_QMULT_COL" if bs.size > 1 else "ML_QMULT_TENSOR"
        yzp = node.input(self.YZP)
        if yzp is not None:
            out = out_fields(yzp.dtype, "0", "0", mult, mode, f"(int32_t){ctx.ptr(yzp)}[0]")
        else:
            out = out_fields(_F32, "0", "0", mult, mode)
        out["y"], out["ld"] = f"(void*){ctx.ptr(y)}", str(n)
        fields = {"M": str(m), "N": str(n), "K": str(k)}
        c = node.input(self.C)
        if c is not None:  # C broadcast into an int32 vector along its one axis
            axis = self._c_axis(node, c.shape, m, n)
            cnt = n if axis == "n" else m
            cbuf, i = ctx.scratch(4 * cnt), ctx.unique("i")
            lines.append(
                f"for (int64_t {i} = 0; {i} < {cnt}; ++{i}) ((int32_t*){cbuf})[{i}] = "
                f"{ctx.ptr(c)}[{i} % {c.size}];"
            )
            if axis == "n":
                out["bias_n"] = f"(const int32_t*){cbuf}"
            else:
                fields["bias_m"] = f"(const int32_t*){cbuf}"
        # A: packed at compile time when constant, else packed from its strides
        az = node.inputs[self.AZP]
        if a.const is not None and az.const is not None:
            ai = (a.const.T if ta else a.const).astype(np.int32) - int(az.const.ravel()[0])
            fields["a"] = ctx.param(pack_a16(ai), f"{node.name}.packed_a16")
        else:
            abuf = ctx.scratch(2 * (-(-m // QMR) * QMR) * (k + k % 2))
            ldm, ldk = (1, m) if ta else (k, 1)
            lines.append(
                f"ml_qpack_a({m}, {k}, {ctx.ptr(a)}, {int(a.dtype == np.int8)}, {ldm}, {ldk}, 0, "
                f"(int32_t){ctx.ptr(az)}[0], (int16_t*){abuf});"
            )
            fields["a"] = f"(const int16_t*){abuf}"
        bz = node.input(self.BZP)
        if b.const is not None and (bz is None or bz.const is not None):
            bi = (b.const.T if tb else b.const).astype(np.int32) - zp_ref(
                None if bz is None else bz.const, n
            )
            bsrc = {
                "kind": "ML_QB_PACKED",
                "p16": ctx.param(pack_b16(bi), f"{node.name}.packed_b16"),
            }
            fields["bbuf"] = "0"
        else:
            bzp0, bzp_arr, zcode = zp_c(ctx, node, self.BZP, n)
            lines.append(zcode)
            ldk, ldn = (1, k) if tb else (n, 1)
            bsrc = {
                "kind": "ML_QB_STRIDED",
                "is_signed": str(int(b.dtype == np.int8)),
                "p8": ctx.ptr(b),
                "ldk": str(ldk),
                "ldn": str(ldn),
                "zp_n": bzp_arr,
                "zp0": bzp0,
            }
            fields["bbuf"] = f"(int16_t*){ctx.scratch(qgemm_bbuf_bytes(k, n))}"
        lines.append(qgemm_call(fields, bsrc, out))
        return "\n".join(x for x in lines if x)
