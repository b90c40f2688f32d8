"""StringSplit (ONNX 20): split each string at a delimiter, as ONNX's reference does
(Python's ``str.split``; ONNX Runtime 1.32 departs from it: it gives an empty string no
piece where a delimiter is given, splits at spaces only, and strips the trailing
whitespace of a ``maxsplit`` remainder).

X strings (any shape, ``S<w>``) -> Y ``[*X.shape, K]`` strings ``S<w>`` (a piece is
never longer than its string), padded with empty strings, and Z int64 ``X.shape``,
each string's number of pieces. K, the most pieces of any string, depends on the data:
for a run-time X it is a computed dim (issue 13) bounded from the width (a delimiter
of d bytes: at most ``w // d + 1`` pieces; whitespace: ``(w + 1) // 2``; and
``maxsplit + 1``). The kernel counts first (Z, K), then writes Y with row stride K.
Without a delimiter (or an empty one) strings split at runs of ASCII whitespace
(Python's ``bytes.split()``: space, ``\\t \\n \\v \\f \\r``; other Unicode spaces are
kept in the pieces).
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ...symbolic import Dim
from ..base import EmitContext, OpDef, OutType, register
from ..tensor._computed import count_dim, is_runtime
from ._common import byte_param, bytes_ptr, require_strings, width
from ....runtime.strings import to_utf8

__all__ = ["StringSplit"]

logger = logging.getLogger(__name__)


@register
class StringSplit(OpDef):
    """ONNX ``StringSplit`` (20): X strings -> Y the pieces ``[*X.shape, K]``, Z the
    number of pieces of each (int64, X's shape); see the module docstring.

    Raises
    ------
    ShapeError
        X is not a string tensor.
    """

    op_type, since_version = "StringSplit", 20
    defaults = {"delimiter": None, "maxsplit": None}

    def _args(self, node: Node) -> tuple[bytes, int]:
        require_strings(node, (0,))
        d = self.attr(node, "delimiter") or ""
        m = self.attr(node, "maxsplit")
        return d.encode("utf-8"), -1 if m is None or m < 0 else int(m)

    def _most(self, node: Node) -> int:
        delim, maxsplit = self._args(node)
        w = width(node.inputs[0])
        most = w // len(delim) + 1 if delim else (w + 1) // 2
        return most if maxsplit < 0 else min(most, maxsplit + 1)

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        self._args(node)
        if not is_runtime(x):
            y, z = self.reference(node, [x.const])
            return [(y.shape, y.dtype), (z.shape, z.dtype)]
        empty = any(isinstance(d, int) and d == 0 for d in x.shape)
        k = 0 if empty else count_dim(node, 0, len(x.shape), "pieces", self._most(node))
        return [((*x.shape, k), x.dtype), (tuple(x.shape), np.dtype(np.int64))]

    def reference(self, node: Node, inputs):
        delim, maxsplit = self._args(node)
        x = inputs[0]
        pieces = [bytes(s).split(delim or None, maxsplit) for s in x.reshape(-1).tolist()]
        k = max((len(p) for p in pieces), default=0)
        y = [p + [b""] * (k - len(p)) for p in pieces]
        flat = [s for row in y for s in row]
        out = to_utf8(flat, x.dtype.itemsize) if flat else np.zeros(0, x.dtype)
        z = np.array([len(p) for p in pieces], np.int64).reshape(x.shape)
        return [out.reshape(*x.shape, k), z]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        ctx.include("text.h")
        delim, maxsplit = self._args(node)
        x = node.inputs[0]
        y, z = node.outputs
        k = y.shape[-1]
        if not isinstance(k, Dim):
            return ""  # X is empty: nothing to split
        w, n = width(x), x.size
        px, py, pz = bytes_ptr(ctx, x), bytes_ptr(ctx, y, const=False), ctx.ptr(z)
        sep = byte_param(ctx, to_utf8([delim]), "delimiter") if delim else "(const uint8_t*)0"
        args = f"{sep}, {len(delim)}, {maxsplit}"
        return (f"{{\nint64_t most = 0;\n"
                f"for (int64_t i = 0; i < {n}; ++i) {{\n"
                f"const uint8_t* s = {px} + i * {w};\n"
                f"{pz}[i] = ml_split(s, ml_str_len(s, {w}), {args}, (uint8_t*)0, {w});\n"
                f"if ({pz}[i] > most) most = {pz}[i];\n}}\n"
                f"memset({py}, 0, (size_t)({n} * most * {w}));\n"
                f"for (int64_t i = 0; i < {n}; ++i) {{\n"
                f"const uint8_t* s = {px} + i * {w};\n"
                f"ml_split(s, ml_str_len(s, {w}), {args}, {py} + i * most * {w}, {w});\n}}\n"
                f"{ctx.set_symbol(k, 'most')}\n}}")
