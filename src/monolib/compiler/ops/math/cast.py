"""ONNX ``Cast`` (6 to 28) and ``CastLike`` (15 to 25) between the numeric
types, bool and the storage types (float16, bfloat16, float8 e4m3fn/e4m3fnuz/e5m2/
e5m2fnuz/e8m0fnu, float4 e2m1fn, int4/uint4, int2/uint2).

Float to integer truncates toward zero (C conversion, NumPy ``astype``); anything to
bool is ``x != 0``; bool to a number is 0 or 1. A storage type is read as float32
(int32 for the small ints) and written with the conversions of
``backends/c/kernels/types.h``: round to nearest even; float8 follows the spec's
``saturate`` table (default on: out of range and Inf become the largest finite value),
float8e8m0 its ``round_mode`` (default ``"up"``); small ints keep the low bits.
Strings are not supported (a clear :class:`UnsupportedOpError`). The reference is
ONNX's own (``onnx.reference.ops.op_cast.cast_to``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnx.helper

from ....errors import UnsupportedOpError
from ...ir import Node
from ...symbolic import is_dim
from ..base import OpDef, compute_dtype, is_storage, register
from ...backends.cstyle import ctype, storage_load, storage_store
from .elementwise import Elementwise, cast_expr

__all__ = ["Cast", "CastLike", "onnx_dtype"]

logger = logging.getLogger(__name__)


def onnx_dtype(elem_type: int, where: str = "") -> np.dtype:
    """The NumPy dtype of an ONNX ``TensorProto`` element type, restricted to the
    types the C backend has.

    Raises
    ------
    UnsupportedOpError
        For strings, complex numbers, float6 and other types without a C type here.
    """
    try:
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(elem_type)))
        ctype(dt)
    except (KeyError, TypeError, UnsupportedOpError):
        name = (
            onnx.TensorProto.DataType.Name(int(elem_type))
            if elem_type in onnx.TensorProto.DataType.values()
            else elem_type
        )
        raise UnsupportedOpError(
            f"{where or 'Cast'}: element type {name} is not supported"
        ) from None
    return dt


_ROUND_MODES = {"up": 0, "down": 1, "nearest": 2}


def _convert(op: OpDef, node: Node, arg: str, src: np.dtype, dst: np.dtype) -> str:
    """C expression of ``arg`` (a ``src`` element) converted to ``dst``: storage
    types go through their compute type (float32 or int32)."""
    if src == dst:
        return arg
    value, vtype = storage_load(arg, src), compute_dtype(src)
    saturate = bool(op.attr(node, "saturate"))
    if dst.name == "float8_e8m0fnu":
        mode = op.attr(node, "round_mode")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode not in _ROUND_MODES:
            raise UnsupportedOpError(f"Cast (node {node.name!r}): round_mode {mode!r}")
        return f"ml_to_float8_e8m0fnu_r((float)({value}), {int(saturate)}, {_ROUND_MODES[mode]})"
    if is_storage(dst):
        if vtype == np.bool_:
            value = f"(({value}) != 0)"
        return storage_store(value, dst, saturate)
    if vtype == dst:
        return value
    return cast_expr(value, dst)


def _reference(op: OpDef, node: Node, x: np.ndarray, dst: np.dtype) -> np.ndarray:
    from onnx.reference.ops.op_cast import cast_to

    mode = op.attr(node, "round_mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    to = onnx.helper.np_dtype_to_tensor_dtype(dst)
    return np.asarray(cast_to(x, to, bool(op.attr(node, "saturate")), mode)).astype(dst)


@register
class Cast(Elementwise):
    """``Cast``: convert to the type named by attribute ``to``."""

    op_type, since_version = "Cast", 6
    # later versions add element types only (23 float4e2m1, 24 float8e8m0 and its
    # round_mode, 25 int2/uint2: all handled here; 28 float6, refused by onnx_dtype)
    also_versions = (23, 24, 25, 28)
    #: saturate came in 19, round_mode (float8e8m0's rounding) in 24
    defaults = {"saturate": 1, "round_mode": "up"}

    def out_dtype(self, node: Node) -> np.dtype:
        return onnx_dtype(node.attrs["to"], f"Cast (node {node.name!r})")

    def np_fn(self, node: Node, x):
        return _reference(self, node, x, self.out_dtype(node))

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        """As :meth:`Elementwise.reference`, except for a shape computed from run-time dims
        (an ``object`` array holding Dims) cast to an integer type whose range holds every
        in-bound value: it keeps its Dims, so ``Shape -> Cast -> ... -> Reshape`` still folds
        (Magika's one-hot batch)."""
        dst = self.out_dtype(node)
        cells = np.asarray(inputs[0]).reshape(-1)
        if cells.dtype == object and dst.kind in "iu" and any(is_dim(d) for d in cells):
            info = np.iinfo(dst)
            bounds = [(d.lo, d.hi) if is_dim(d) else (d, d) for d in cells]
            if all(info.min <= lo and hi <= info.max for lo, hi in bounds):
                return [np.array(inputs[0], dtype=object)]
        return super().reference(node, inputs)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return _convert(self, node, args[0], node.inputs[0].dtype, node.outputs[0].dtype)


@register
class CastLike(Elementwise):
    """``CastLike``: convert input 0 to the type of input 1 (``target_type``).

    Not marked ``elementwise``: the fusion pass broadcasts every input of an
    elementwise node to the output, and ``target_type`` is only read for its dtype. It
    runs as its own loop (the inherited ``emit`` honours ``data_inputs``)."""

    op_type, since_version = "CastLike", 15
    also_versions = (23, 24, 25)  # as Cast: new element types (and e8m0's round_mode)
    defaults = Cast.defaults
    elementwise = False
    data_inputs = (0,)

    def out_dtype(self, node: Node) -> np.dtype:
        return node.inputs[1].dtype

    def np_fn(self, node: Node, x, like):
        return _reference(self, node, x, like.dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return _convert(self, node, args[0], node.inputs[0].dtype, node.outputs[0].dtype)

