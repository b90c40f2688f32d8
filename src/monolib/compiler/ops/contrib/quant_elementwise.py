"""``com.microsoft`` elementwise 8-bit ops: QLinearAdd, QLinearMul (NumPy broadcasting),
QLinearSigmoid, QLinearLeakyRelu. All scales and zero points are per tensor; omitted zero
points are 0; the output has input A's / X's type (uint8 or int8).

Each follows ONNX Runtime's CPU kernel (MLAS) so the integer outputs match it:

* QLinearAdd (``qladd`` AVX2): ``ra = A_scale / C_scale``, ``rb = B_scale / C_scale``,
  ``v = fma(A, ra, fma(B, rb, C_zp - fma(ra, A_zp, rb * B_zp)))``, rounded half to even,
  saturated; A and B trade places when A is the per-span scalar of a broadcast (ORT
  then passes B as its kernel's vector operand).
* QLinearMul (``qlmul``): ``(A - A_zp) * (B - B_zp)`` exactly in int32, times
  ``A_scale * B_scale / C_scale`` in float32, ``+ C_zp`` in float32, rounded half to
  even, saturated.
* QLinearSigmoid / QLinearLeakyRelu (ORT: a 256-entry table from
  ``QlinearBuildLookupTable``): ``x = X_scale * (X - X_zp)``, ``f(x)`` in float32,
  ``round_half_even(f(x) / Y_scale) + Y_zp`` saturated; here a table of that formula
  too (so these two are not fused into elementwise chains). ORT's logistic is MLAS's
  polynomial, so a value at a rounding tie may land one step apart (tests allow one
  step for Sigmoid; measured none).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ....errors import UnsupportedOpError
from ...backends.cstyle import c_literal
from ...ir import Node
from ..base import EmitContext, OutType, register
from ..math.elementwise import Elementwise, const_scalar
from ..quant._qcommon import check_qlinear_unary
from ..tensor.loops import has_epilogue

__all__ = ["QLinearAdd", "QLinearLeakyRelu", "QLinearMul", "QLinearSigmoid"]

logger = logging.getLogger(__name__)

MS = "com.microsoft"
_Q8 = (np.dtype(np.uint8), np.dtype(np.int8))


def _range(dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _saturate_c(expr: str, dtype) -> str:
    """C: float ``expr`` (already an integer value) clamped to ``dtype``'s range, cast."""
    lo, hi = _range(dtype)
    ct = "uint8_t" if np.dtype(dtype) == np.uint8 else "int8_t"
    return f"(({ct})fmaxf({lo}.0f, fminf({hi}.0f, {expr})))"


def _saturate(v: np.ndarray, dtype) -> np.ndarray:
    lo, hi = _range(dtype)
    return np.clip(v, lo, hi).astype(dtype)


def _zp(arg: str) -> str:
    """An omitted zero point reads 0."""
    return f"(float)({arg})" if arg else "0.0f"


def _zp_np(x) -> np.float32:
    return np.float32(0 if x is None else np.asarray(x).ravel()[0])


def _f(x) -> np.float32:
    return np.float32(np.asarray(x).ravel()[0])


class _QLinearUnary(Elementwise):
    """``X, X_scale, X_zero_point?, Y_scale, Y_zero_point?`` -> Y: ``quantize(f(dequantize(X)))``."""

    domain, since_version = MS, 1
    #: not fused into chains: on its own the op is a 256-entry table and one lookup per
    #: element (no exp per element)
    elementwise = False

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        check_qlinear_unary(node)
        return [(x.shape, x.dtype)]

    def _fn_np(self, node: Node, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _fn_c(self, node: Node, v: str) -> str:
        raise NotImplementedError

    def np_fn(self, node: Node, x, xs, xz=None, ys=None, yz=None):
        v = np.float32(_f(xs)) * (x.astype(np.int32) - np.int32(_zp_np(xz))).astype(np.float32)
        y = self._fn_np(node, v.astype(np.float32)).astype(np.float32)
        return _saturate(np.rint(y / _f(ys)) + _zp_np(yz), x.dtype)

    def emit(self, node: Node, ctx: EmitContext) -> str:
        """A 256-entry table of ``c_expr`` over every input value, then one lookup per
        element (ORT's structure; the same values as computing each element)."""
        x, y = node.inputs[0], node.outputs[0]
        if has_epilogue(ctx, len(y.shape)):
            return super().emit(node, ctx)
        args = [""] * len(node.inputs)
        for k, v in enumerate(node.inputs):
            if v is not None and k:
                s = const_scalar(v)
                args[k] = c_literal(s, v.dtype) if s is not None else f"{ctx.ptr(v)}[0]"
        ct = "uint8_t" if x.dtype == np.uint8 else "int8_t"
        table, i = f"((uint8_t*){ctx.scratch(256)})", ctx.unique("i")
        entry = self.c_expr(node, [f"(({ct}){i})", *args[1:]])
        return (
            f"for (int {i} = 0; {i} < 256; ++{i}) {table}[{i}] = (uint8_t)({entry});\n"
            f"for (int64_t {i} = 0; {i} < {x.size}; ++{i}) "
            f"{ctx.ptr(y)}[{i}] = ({ct}){table}[(uint8_t){ctx.ptr(x)}[{i}]];"
        )

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        x, xs, xz, ys = args[0], args[1], args[2] if len(args) > 2 else "", args[3]
        yz = args[4] if len(args) > 4 else ""
        v = f"({xs} * (float)((int32_t)({x}) - (int32_t){_zp(xz)}))"
        return _saturate_c(
            f"(nearbyintf({self._fn_c(node, v)} / {ys}) + {_zp(yz)})", node.inputs[0].dtype
        )


@register
class QLinearSigmoid(_QLinearUnary):
    """``com.microsoft.QLinearSigmoid`` (1): ``quantize(sigmoid(dequantize(X)))``, X and Y
    uint8 or int8 (any shape), per-tensor float32 scales and zero points of X's type."""

    op_type = "QLinearSigmoid"

    def _fn_np(self, node: Node, v):
        return (1.0 / (1.0 + np.exp(-v.astype(np.float64)))).astype(np.float32)

    def _fn_c(self, node: Node, v: str) -> str:
        return f"(1.0f / (1.0f + expf(-{v})))"


@register
class QLinearLeakyRelu(_QLinearUnary):
    """``com.microsoft.QLinearLeakyRelu`` (1): ``quantize(leaky_relu(dequantize(X)))``
    with attribute ``alpha`` (float, default 0.01); types as QLinearSigmoid."""

    op_type = "QLinearLeakyRelu"
    defaults = {"alpha": 0.01}

    def _alpha(self, node: Node) -> np.float32:
        return np.float32(self.attr(node, "alpha"))

    def _fn_np(self, node: Node, v):
        return np.where(v >= 0, v, v * self._alpha(node)).astype(np.float32)

    def _fn_c(self, node: Node, v: str) -> str:
        return f"({v} >= 0.0f ? {v} : {v} * {float(self._alpha(node))!r}f)"


class _QLinearBinary(Elementwise):
    """``A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?`` -> C (broadcast A, B)."""

    domain, since_version = MS, 1

    def infer(self, node: Node) -> list[OutType]:
        a, b = node.inputs[0], node.inputs[3]
        if a.dtype not in _Q8 or b.dtype != a.dtype:
            raise UnsupportedOpError(
                f"{self.op_type} node {node.name!r}: A is {a.dtype} and B {b.dtype}; expected both uint8 or both int8"
            )
        for i in (1, 4, 6):
            if node.inputs[i].size != 1 or node.inputs[i].dtype != np.float32:
                raise UnsupportedOpError(
                    f"{self.op_type} node {node.name!r}: input {i} must be a float32 scalar (per-tensor scale)"
                )
        for i in (2, 5, 7):
            z = node.input(i)
            if z is not None and z.size != 1:
                raise UnsupportedOpError(
                    f"{self.op_type} node {node.name!r}: zero point input {i} must be a scalar"
                )
        return super().infer(node)


@register
class QLinearAdd(_QLinearBinary):
    """``com.microsoft.QLinearAdd`` (1): ``C = quantize(dequantize(A) + dequantize(B))``
    in ORT's arithmetic (module docstring); A, B and C uint8 or int8 (one type)."""

    op_type = "QLinearAdd"

    @staticmethod
    def _swapped(node: Node) -> bool:
        """True when ORT hands A to its kernel as the scalar of each span (B first): A
        is broadcast along the innermost output dim that is not 1 and B is not. ORT's
        kernel takes its first operand as the vector, so the roles of A and B swap."""
        a, b = node.inputs[0].shape, node.inputs[3].shape
        rank = max(len(a), len(b))
        a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
        for da, db in zip(reversed(a), reversed(b)):
            if da != 1 or db != 1:
                return da == 1 and db != 1
        return False

    def np_fn(self, node: Node, a, sa, za, b, sb, zb, sc, zc=None):
        ra, rb = _f(sa) / _f(sc), _f(sb) / _f(sc)
        (x, rx, zx), (w, rw, zw) = ((a, ra, za), (b, rb, zb))
        if self._swapped(node):
            (x, rx, zx), (w, rw, zw) = (w, rw, zw), (x, rx, zx)
        zsum = np.float32(
            np.float64(rx) * np.float64(_zp_np(zx)) + np.float64(np.float32(rw * _zp_np(zw)))
        )
        fixed = np.float32(_zp_np(zc) - zsum)
        # fma: one rounding of an exact product plus a float32 (float64 holds it exactly)
        inner = (w.astype(np.float64) * np.float64(rw) + np.float64(fixed)).astype(np.float32)
        v = (x.astype(np.float64) * np.float64(rx) + inner.astype(np.float64)).astype(np.float32)
        return _saturate(np.rint(v), a.dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        a, sa, za, b, sb, zb, sc = args[:7]
        zc = args[7] if len(args) > 7 else ""
        x, rx, zx = a, f"({sa} / {sc})", _zp(za)  # ORT's vector operand
        w, rw, zw = b, f"({sb} / {sc})", _zp(zb)  # its other (or per-span scalar) operand
        if self._swapped(node):
            (x, rx, zx), (w, rw, zw) = (w, rw, zw), (x, rx, zx)
        # ORT's build contracts rx * zx + rw * zw to one fused multiply-add (seen at a tie
        # in a real model); written out, so this C gives it whatever the compiler does
        fixed = f"({_zp(zc)} - fmaf({rx}, {zx}, {rw} * {zw}))"
        v = f"fmaf((float)({x}), {rx}, fmaf((float)({w}), {rw}, {fixed}))"
        return _saturate_c(f"nearbyintf({v})", node.inputs[0].dtype)


@register
class QLinearMul(_QLinearBinary):
    """``com.microsoft.QLinearMul`` (1): ``C = quantize(dequantize(A) * dequantize(B))``
    in ORT's arithmetic (module docstring); types as QLinearAdd."""

    op_type = "QLinearMul"

    def np_fn(self, node: Node, a, sa, za, b, sb, zb, sc, zc=None):
        r = np.float32(_f(sa) * _f(sb)) / _f(sc)
        prod = (a.astype(np.int32) - np.int32(_zp_np(za))) * (
            b.astype(np.int32) - np.int32(_zp_np(zb))
        )
        return _saturate(
            np.rint((prod.astype(np.float32) * r).astype(np.float32) + _zp_np(zc)), a.dtype
        )

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        a, sa, za, b, sb, zb, sc = args[:7]
        zc = args[7] if len(args) > 7 else ""
        prod = f"(double)(((int32_t)({a}) - (int32_t){_zp(za)}) * ((int32_t)({b}) - (int32_t){_zp(zb)}))"
        # the product rounded to float32 on its own, then + C_zp (ORT: mul, then add; the
        # exact double product cast to float keeps the compiler from fusing them)
        scaled = f"(float)({prod} * (double)({sa} * {sb} / {sc}))"
        return _saturate_c(f"nearbyintf({scaled} + {_zp(zc)})", node.inputs[0].dtype)
