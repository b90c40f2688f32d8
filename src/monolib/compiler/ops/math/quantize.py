"""Linear (de)quantization: ``QuantizeLinear`` and ``DequantizeLinear`` (10, 13, 19,
21, 23-25, 28), per tensor, per axis or blocked.

ONNX specs: ``DequantizeLinear``: ``y = (x - zero_point) * scale`` (float32 out);
``QuantizeLinear``: ``y = saturate(round_half_even(x / scale) + zero_point)`` into the
zero point's type (uint8 without one; ``output_dtype`` from 21). ``scale`` and
``zero_point`` are scalars, 1-D along ``axis`` (13+), or blocked (21+, ``block_size``
> 0): the shape of ``x`` with dim ``axis`` cut to ``ceil(x.shape[axis] / block_size)``,
element ``j`` of that dim serving ``x``'s indices ``j*block_size ..`` along it.

Types: the quantized side is int8/uint8/int16/uint16 (int32 for Dequantize), or a
storage type (``ops.base.is_storage``): int4/uint4/int2/uint2 (saturated to their range
like the others) and float8/float4 (``y = x / scale + zero_point`` converted with
round-to-nearest-even, out-of-range values following the ``saturate`` attribute as in
Cast). Scales are float32, float16, bfloat16 or float8e8m0 (24+); every computation is
in float32 and a float16/bfloat16 result (Dequantize's output follows its scale's type,
or ``output_dtype`` from 23) is rounded once at the end. 23's ``precision`` must be
float32 (or unset).

With constant inputs (QDQ models' weights) these fold at compile time; at run time
they are one loop over ``[outer, C, inner]``, like ONNX Runtime's kernels (division
for Quantize, ``nearbyint`` rounding in the default mode).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, compute_dtype, is_storage, register
from ...backends.cstyle import ctype, storage_load, storage_store
from ..tensor.loops import flat_index_exprs, normalize_axis
from .cast import onnx_dtype
from ..tensor.flat import flat_groups

__all__ = ["DequantizeLinear", "QuantizeLinear"]

logger = logging.getLogger(__name__)

_QTYPES = {np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32)}
_FLOATS = {np.dtype(np.float32)}  # plus the storage floats (float16, bfloat16, float8...)


def _int_like(dt: np.dtype) -> bool:
    """A quantized integer type (native or int4/uint4/int2/uint2 storage)."""
    return dt in _QTYPES or (is_storage(dt) and compute_dtype(dt) == np.int32)


def _float_like(dt: np.dtype) -> bool:
    """float32 or a storage float (float16, bfloat16, float8, float4)."""
    return dt in _FLOATS or (is_storage(dt) and compute_dtype(dt) == np.float32)


def _range(dt: np.dtype) -> tuple[int, int]:
    import ml_dtypes

    info = ml_dtypes.iinfo(dt) if is_storage(dt) else np.iinfo(dt)
    return int(info.min), int(info.max)


def _saturate_float(v: np.ndarray, dt: np.dtype, saturate: bool) -> np.ndarray:
    """float32 ``v`` converted to the storage float ``dt`` (RNE); with ``saturate``,
    out-of-range values (and infinities) become the largest finite value (Cast's rule)."""
    import ml_dtypes

    if saturate:
        big = float(ml_dtypes.finfo(dt).max)
        v = np.where(np.isnan(v), v, np.clip(v, -big, big))
    return v.astype(np.float32).astype(dt)


class _Linear(OpDef):
    """Shared shape logic: the per-axis view ``[outer, C, inner]``."""
    defaults = {"axis": 1, "block_size": 0}

    def _where(self, node: Node) -> str:
        return f"{self.op_type} (node {node.name!r})"

    def view(self, node: Node) -> tuple[int, int, int]:
        """``(outer, C, inner)``: x viewed as ``[outer, C, inner]`` with C the quantized
        axis (1 for per tensor)."""
        x, scale = node.inputs[0], node.inputs[1]
        if self.attr(node, "block_size"):
            return self._blocked_view(node)
        if scale.size == 1 and len(scale.shape) <= 1:
            return x.size, 1, 1
        if len(scale.shape) != 1:
            raise ShapeError(
                f"{self._where(node)}: scale must be a scalar or 1-D, got {list(scale.shape)}"
            )
        a = normalize_axis(self.attr(node, "axis"), len(x.shape), self._where(node))
        if x.shape[a] != scale.size:
            raise ShapeError(
                f"{self._where(node)}: {scale.size} scales for dim {a} of size {x.shape[a]}"
            )
        outer = int(np.prod(x.shape[:a], dtype=np.int64))
        inner = int(np.prod(x.shape[a + 1 :], dtype=np.int64))
        return outer, x.shape[a], inner

    def _blocked_view(self, node: Node) -> tuple[int, int, int]:
        x, scale = node.inputs[0], node.inputs[1]
        bs = int(node.attrs["block_size"])
        a = normalize_axis(self.attr(node, "axis"), len(x.shape), self._where(node))
        want = list(x.shape)
        want[a] = -(-x.shape[a] // bs) if bs > 0 else 0
        if bs < 0 or list(scale.shape) != want:
            raise ShapeError(
                f"{self._where(node)}: block_size {bs} along axis {a} of x {list(x.shape)} "
                f"needs a scale of shape {want}, got {list(scale.shape)}"
            )
        zp = node.input(2)
        if zp is not None and zp.shape != scale.shape:
            raise ShapeError(
                f"{self._where(node)}: zero_point {list(zp.shape)} != scale {list(scale.shape)}"
            )
        outer = int(np.prod(x.shape[:a], dtype=np.int64))
        inner = int(np.prod(x.shape[a + 1 :], dtype=np.int64))
        return outer, x.shape[a], inner

    def epilogue_groups(self, node: Node):
        return flat_groups(len(node.outputs[0].shape))

    def _params(self, node: Node, inputs):
        """x as ``[outer, C, inner]`` with scale and zero point (int64; float32 for a
        float8 one) broadcastable to it."""
        outer, c, inner = self.view(node)
        x = inputs[0].reshape(outer, c, inner)
        zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        if zp is not None:
            zp = zp.astype(np.int64 if _int_like(zp.dtype) else np.float32)
        bs = int(self.attr(node, "block_size") or 0)
        if bs:  # repeat each block's scale over its block, cut at the dim's end
            def expand(v):
                return np.repeat(v.reshape(outer, -1, inner), bs, axis=1)[:, :c]
            scale = expand(inputs[1])
            zp = np.zeros_like(x, np.int64) if zp is None else expand(zp)
            return x, scale, zp
        scale = inputs[1].reshape(1, c, 1)
        zp = np.zeros((1, c, 1), np.int64) if zp is None else zp.reshape(1, c, 1)
        return x, scale, zp

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, scale, y = node.inputs[0], node.inputs[1], node.outputs[0]
        if x.size == 0:
            return ""
        outer, c, inner = self.view(node)
        zp = node.input(2)
        o, k, i = ctx.unique("o"), ctx.unique("c"), ctx.unique("i")
        flat = f"({o}*{c} + {k})*{inner} + {i}"
        bs = int(self.attr(node, "block_size") or 0)
        # the scale/zero point element of x's element (o, k, i)
        si = f"({o}*{-(-c // bs)} + {k}/{bs})*{inner} + {i}" if bs else k
        xv, sv = f"{ctx.ptr(x)}[{flat}]", f"{ctx.ptr(scale)}[{si}]"
        zv = "0"
        if zp is not None:
            zl = storage_load(f"{ctx.ptr(zp)}[{si}]", zp.dtype)
            zv = f"(int32_t){zl}" if _int_like(zp.dtype) else f"({zl})"
        val = self._c_value(node, xv, sv, zv)
        store = ctx.output_expr(val, flat_index_exprs(flat, y.shape))
        return (
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) for (int64_t {k} = 0; {k} < {c}; ++{k})\n"
            f"for (int64_t {i} = 0; {i} < {inner}; ++{i}) {ctx.ptr(y)}[{flat}] = {store};"
        )

    def _c_value(self, node: Node, xv: str, sv: str, zv: str) -> str:
        raise NotImplementedError


@register
class DequantizeLinear(_Linear):
    """``DequantizeLinear``: int8/uint8/int16/uint16/int32 to float32."""

    op_type, since_version = "DequantizeLinear", 10
    #: 23 adds ``output_dtype`` (checked below: float32 only) and float4 inputs; 24,
    #: 25, 28 add float8e8m0 scales and int2/float6 inputs (all refused by type)
    also_versions = (23, 24, 25, 28)
    defaults = {**_Linear.defaults, "output_dtype": 0}

    def _out_dtype(self, node: Node) -> np.dtype:
        od = self.attr(node, "output_dtype") or 0
        return onnx_dtype(od, self._where(node)) if od else node.inputs[1].dtype

    def infer(self, node: Node) -> list[OutType]:
        x, scale = node.inputs[0], node.inputs[1]
        out = self._out_dtype(node)
        if not (_int_like(x.dtype) or _float_like(x.dtype)) or not _float_like(scale.dtype) \
                or not _float_like(out) or out.itemsize == 1:
            raise UnsupportedOpError(
                f"{self._where(node)}: x {x.dtype} / scale {scale.dtype} -> {out} is not "
                "supported (8/16/32-bit, 4-bit, 2-bit integers or float8/float4 in; float32, "
                "float16 or bfloat16 out)"
            )
        self.view(node)
        return [(x.shape, out)]

    def epilogue_groups(self, node: Node):
        # a fused chain computes in float32: only a float32 output takes one
        return super().epilogue_groups(node) if self._out_dtype(node) == np.float32 else None

    def reference(self, node: Node, inputs):
        x, scale, zp = self._params(node, inputs)
        if _int_like(node.inputs[0].dtype):
            d = (x.astype(np.int64) - zp).astype(np.float32)
        else:  # float8/float4 (zero point 0 by the spec; subtracted as given)
            d = x.astype(np.float32) - (zp.astype(np.float32) if zp is not None else 0)
        y = d * scale.astype(np.float32)
        return [y.astype(np.float32).astype(self._out_dtype(node)).reshape(node.inputs[0].shape)]

    def _c_value(self, node: Node, xv: str, sv: str, zv: str) -> str:
        x = node.inputs[0]
        s = storage_load(sv, node.inputs[1].dtype)
        if _int_like(x.dtype):
            val = f"((float)((int64_t){storage_load(xv, x.dtype)} - {zv}) * {s})"
        else:
            val = f"(({storage_load(xv, x.dtype)} - (float){zv}) * {s})"
        return storage_store(val, self._out_dtype(node))


@register
class QuantizeLinear(_Linear):
    """``QuantizeLinear``: float32 to int8/uint8 (int16/uint16 from 21), saturating."""

    op_type, since_version = "QuantizeLinear", 10
    #: 23 adds ``precision`` (checked below: float32 only) and more scale types; 24,
    #: 25, 28 add float8e8m0 scales and int2/float6 outputs (all refused by type)
    also_versions = (23, 24, 25, 28)
    defaults = {**_Linear.defaults, "output_dtype": 0, "precision": 0, "saturate": 1}

    def _out_dtype(self, node: Node) -> np.dtype:
        zp = node.input(2)
        if zp is not None:
            return zp.dtype
        od = self.attr(node, "output_dtype")
        return onnx_dtype(od, self._where(node)) if od else np.dtype(np.uint8)

    def infer(self, node: Node) -> list[OutType]:
        x, scale = node.inputs[0], node.inputs[1]
        if self.attr(node, "precision") not in (0, onnx.TensorProto.FLOAT):
            raise UnsupportedOpError(
                f"{self._where(node)}: precision {node.attrs['precision']} (float32 only)"
            )
        dt = self._out_dtype(node)
        quantized = (_int_like(dt) and dt != np.int32) or (is_storage(dt) and dt.itemsize == 1)
        if not quantized or not _float_like(x.dtype) or not _float_like(scale.dtype):
            raise UnsupportedOpError(
                f"{self._where(node)}: {x.dtype} -> {dt} with a {scale.dtype} scale is not supported"
            )
        self.view(node)
        return [(x.shape, dt)]

    def epilogue_groups(self, node: Node):
        return None  # the output is not float32

    def reference(self, node: Node, inputs):
        x, scale, zp = self._params(node, inputs)
        dt = self._out_dtype(node)
        v = x.astype(np.float32) / scale.astype(np.float32)
        if not _int_like(dt):  # float8/float4: no rounding to integers
            y = _saturate_float(v + zp.astype(np.float32), dt, bool(self.attr(node, "saturate")))
            return [y.reshape(node.inputs[0].shape)]
        lo, hi = _range(dt)
        q = np.clip(np.rint(v).astype(np.float64) + zp, lo, hi)
        return [q.astype(np.int64).astype(dt).reshape(node.inputs[0].shape)]

    def _c_value(self, node: Node, xv: str, sv: str, zv: str) -> str:
        dt = self._out_dtype(node)
        x, s = storage_load(xv, node.inputs[0].dtype), storage_load(sv, node.inputs[1].dtype)
        if not _int_like(dt):
            sat = bool(self.attr(node, "saturate"))
            return storage_store(f"({x} / {s} + (float){zv})", dt, saturate=sat)
        lo, hi = _range(dt)
        q = f"(nearbyintf({x} / {s}) + (float)({zv}))"
        clamped = f"({q} < {lo}.0f ? {lo}.0f : ({q} > {hi}.0f ? {hi}.0f : {q}))"
        return storage_store(f"(int64_t){clamped}", dt) if is_storage(dt) else f"(({ctype(dt)}){clamped})"
