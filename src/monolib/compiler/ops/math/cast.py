"""ONNX ``Cast`` (6, 9, 13, 19, 21) and ``CastLike`` (15, 19, 21) between the numeric
types and bool.

Float to integer truncates toward zero (C conversion, NumPy ``astype``); anything to
bool is ``x != 0``; bool to a number is 0 or 1. String and 8/4-bit float types are not
supported (a clear :class:`UnsupportedOpError`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import onnx.helper

from ....runtime.errors import UnsupportedOpError
from ...ir import Node
from ..base import ctype, register
from .elementwise import Elementwise, cast_expr

__all__ = ["Cast", "CastLike", "onnx_dtype"]

logger = logging.getLogger(__name__)


def onnx_dtype(elem_type: int, where: str = "") -> np.dtype:
    """The NumPy dtype of an ONNX ``TensorProto`` element type, restricted to the
    types the C backend has.

    Raises
    ------
    UnsupportedOpError
        For strings, float16/bfloat16/float8 and other types without a C type here.
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


def _convert(node: Node, arg: str, src: np.dtype, dst: np.dtype) -> str:
    if src == dst:
        return arg
    return cast_expr(arg, dst)


@register
class Cast(Elementwise):
    """``Cast``: convert to the type named by attribute ``to``."""

    op_type, since_version = "Cast", 6
    # 23, 25, 28 add float4/int2/float6 types only; 24 adds float8e8m0 and round_mode,
    # which only applies to float8e8m0 (a dtype monolib refuses)
    also_versions = (23, 24, 25, 28)

    def out_dtype(self, node: Node) -> np.dtype:
        return onnx_dtype(node.attrs["to"], f"Cast (node {node.name!r})")

    def np_fn(self, node: Node, x):
        return x.astype(self.out_dtype(node))

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return _convert(node, args[0], node.inputs[0].dtype, node.outputs[0].dtype)


@register
class CastLike(Elementwise):
    """``CastLike``: convert input 0 to the type of input 1 (``target_type``).

    Not marked ``elementwise``: the fusion pass broadcasts every input of an
    elementwise node to the output, and ``target_type`` is only read for its dtype. It
    runs as its own loop (the inherited ``emit`` honours ``data_inputs``)."""

    op_type, since_version = "CastLike", 15
    also_versions = (23, 24, 25)  # as Cast: new types; round_mode is for float8e8m0
    elementwise = False
    data_inputs = (0,)

    def out_dtype(self, node: Node) -> np.dtype:
        return node.inputs[1].dtype

    def np_fn(self, node: Node, x, like):
        return x.astype(like.dtype)

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        return _convert(node, args[0], node.inputs[0].dtype, node.outputs[0].dtype)
