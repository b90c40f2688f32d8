"""``monolib::RoundedSoftmax``: ONNX ``Softmax`` (13+) on float16/bfloat16 data, rounded
where ONNX's reference rounds.

The frontend widens other ops on storage types to float32 and rounds each output once
(``frontend/storage.py``); for Softmax that differs by an ulp from ONNX's own
definition of the 16-bit result, its reference evaluator (``onnx.reference``, the
expected values of ONNX's node tests), which runs ``tmp = X - max(X); Y = exp(tmp);
Y /= sum(Y)`` on the 16-bit arrays, so NumPy rounds each step to the type:

* ``x - max`` and ``exp`` are computed in float32 and rounded to the type;
* the sum: bfloat16 (``ml_dtypes``) adds one element at a time, rounding each partial
  sum; float16 too along a strided axis, while along the last (contiguous) axis NumPy's
  half loop adds in float32 and rounds once;
* the quotient is rounded.

The frontend (``frontend/rounding.py``) imports a float16/bfloat16 ``Softmax`` as this
op, which reads and writes the 16-bit bits itself (it is not widened).
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import UnsupportedOpError
from ...backends.cstyle import storage_load, storage_store
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .softmax import softmax_view

__all__ = ["RoundedSoftmax"]

logger = logging.getLogger(__name__)

def _is16(dtype) -> bool:
    return np.dtype(dtype).name in ("float16", "bfloat16")


@register
class RoundedSoftmax(OpDef):
    """Softmax over ``axis`` (ONNX 13 semantics) of a float16/bfloat16 tensor, each step
    rounded as in ONNX's reference (module docstring).

    Raises
    ------
    UnsupportedOpError
        An input that is not float16/bfloat16.
    """

    op_type, domain, since_version = "RoundedSoftmax", "monolib", 1
    defaults = {"axis": -1}

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not _is16(x.dtype):
            raise UnsupportedOpError(
                f"RoundedSoftmax (node {node.name!r}): {x.dtype}, not float16/bfloat16")
        softmax_view(x.shape, self.attr(node, "axis"), False)
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        if x.size == 0:
            return [x]
        axis = self.attr(node, "axis")
        tmp = x - x.max(axis=axis, keepdims=True)  # NumPy on the 16-bit type: each step rounds
        y = np.exp(tmp)
        y /= y.sum(axis=axis, keepdims=True)
        return [y.astype(x.dtype)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if x.size == 0:
            return ""
        outer, n, inner = softmax_view(x.shape, self.attr(node, "axis"), False)
        dt = x.dtype
        o, c, j = ctx.unique("o"), ctx.unique("c"), ctx.unique("j")
        mx, s, v = ctx.unique("mx"), ctx.unique("s"), ctx.unique("v")
        buf = ctx.unique("e")
        at = f"(({o})*{n} + {j})*{inner} + {c}"
        xp, yp = ctx.ptr(x), ctx.ptr(y)

        def rnd(expr: str) -> str:  # round a float to the type and back
            return storage_load(storage_store(expr, dt), dt)

        # NumPy sums float16 in float32 along a contiguous axis (its pairwise loop), but
        # adds float16 rows (a strided axis) with a rounding per step, as ml_dtypes
        # always does for bfloat16
        per_step = dt.name == "bfloat16" or not (isinstance(inner, int) and inner == 1)
        xv = storage_load(f"{xp}[{at}]", dt)
        d = rnd(f"{xv} - {mx}")
        e = rnd(f"expf({v})")
        acc = f"{s} = " + rnd(f"{s} + {buf}[{j}]") + ";" if per_step else f"{s} += {buf}[{j}];"
        total = "" if per_step else f"{s} = {rnd(s)};\n"
        q = storage_store(f"{buf}[{j}] / {s}", dt)
        return (
            f"float* {buf} = (float*){ctx.scratch(4 * max(int(n), 1))};\n"
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) for (int64_t {c} = 0; {c} < {inner};"
            f" ++{c}) {{\n"
            f"float {mx} = -INFINITY, {s} = 0.0f;\n"
            f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {{ float {v} = {xv};\n"
            # NaN wins, as in NumPy's max
            f"  if ({v} > {mx} || {v} != {v} || {j} == 0) {mx} = {v}; }}\n"
            f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {{\n"
            f"  float {v} = {d};\n  {buf}[{j}] = {e};\n  {acc}\n}}\n"
            f"{total}"
            f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {yp}[{at}] = {q};\n}}"
        )
