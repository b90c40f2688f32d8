"""Helpers of the string ops: slot widths, byte pointers, broadcast loops."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from ....errors import ShapeError
from ...ir import Node, Value
from ..base import EmitContext
from ..tensor.loops import broadcast_shape, broadcast_strides, emit_loops, linear_offset

__all__ = ["TEXT_DOMAIN", "broadcast_loops", "byte_param", "bytes_ptr",
           "require_strings",
           "string_dtype", "width"]

logger = logging.getLogger(__name__)

#: monolib's own domain for string forms of ONNX ops (``frontend/strings.py``).
TEXT_DOMAIN = "monolib.text"


def string_dtype(width: int) -> np.dtype:
    """``S<width>`` (at least 1 byte: NumPy's ``S0`` holds nothing)."""
    return np.dtype(f"S{max(1, int(width))}")


def width(v: Value) -> int:
    """Bytes per element of string value ``v``."""
    return int(v.dtype.itemsize)


def require_strings(node: Node, indices: Sequence[int]) -> None:
    """Raise :class:`ShapeError` naming the node unless inputs ``indices`` are strings."""
    for i in indices:
        v = node.inputs[i]
        if v is None or v.dtype.kind != "S":
            what = "missing" if v is None else f"{v.dtype}"
            raise ShapeError(f"{node.op_type} (node {node.name!r}): input {i} must be a "
                             f"string tensor, got {what}")


def bytes_ptr(ctx: EmitContext, v: Value, const: bool = True) -> str:
    """``v``'s data as a ``(const) uint8_t*`` C expression."""
    return f"(({'const ' if const else ''}uint8_t*){ctx.ptr(v)})"


def byte_param(ctx: EmitContext, arr: np.ndarray, hint: str) -> str:
    """A compile-time array (a string table: ``S<n>`` slots) in the params blob, as a
    ``const uint8_t*`` C expression (stored as its bytes, so its width needs no C
    type)."""
    raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return f"((const uint8_t*){ctx.param(raw if raw.size else np.zeros(1, np.uint8), hint)})"


def broadcast_loops(ctx: EmitContext, node: Node, body: Callable[[str, list[str]], str]) -> str:
    """Loops over output 0's elements (inputs broadcast, ONNX multidirectional
    broadcasting) around ``body(out_index, [input_index, ...])``: C element indices."""
    ins = [v for v in node.inputs]
    out = node.outputs[0]
    shape = broadcast_shape(*[v.shape for v in ins], where=f"{node.op_type} {node.name!r}")
    out_strides = broadcast_strides(out.shape, shape)
    in_strides = [broadcast_strides(v.shape, shape) for v in ins]

    def inner(vars_: list[str]) -> str:
        return body(linear_offset(vars_, out_strides),
                    [linear_offset(vars_, st) for st in in_strides])

    if len(shape) == 0:
        return "{\n" + inner([]) + "\n}"
    return emit_loops(ctx, shape, inner)

