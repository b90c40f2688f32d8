"""``TensorScatter`` (ONNX 24): write ``update`` into a copy of the KV cache
``past_cache`` along ``axis`` (the sequence dim) at each batch's ``write_indices[b]``
(0 when absent); ``mode="circular"`` wraps the index modulo the cache length. Follows
the ONNX spec's pseudocode. With ``mode="linear"`` a write past the cache end is
dropped (the spec leaves it undefined; nothing is written out of bounds)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import normalize_axis

__all__ = ["TensorScatter"]

logger = logging.getLogger(__name__)


@register
class TensorScatter(OpDef):
    """ONNX ``TensorScatter`` 24.

    Raises
    ------
    ShapeError
        ``update`` differing from the cache outside ``axis`` (or longer), an axis of
        0 (the batch) or out of range, ``write_indices`` not ``[batch]``.
    UnsupportedOpError
        A ``mode`` other than linear/circular.
    """

    op_type, since_version = "TensorScatter", 24

    def _geom(self, node: Node) -> tuple[int, int, int, int, int, int]:
        """(axis, batch, outer per batch, cache length, update length, inner)."""
        past, upd = node.inputs[0].shape, node.inputs[1].shape
        where = f"TensorScatter (node {node.name!r})"
        a = normalize_axis(node.attrs["axis"], len(past), where)
        if a == 0 or len(upd) != len(past) or any(
            p != u for i, (p, u) in enumerate(zip(past, upd)) if i != a
        ) or upd[a] > past[a]:
            raise ShapeError(f"{where}: update {list(upd)} does not fit cache {list(past)} on axis {a}")
        idx = node.input(2)
        if idx is not None and tuple(idx.shape) != (past[0],):
            raise ShapeError(f"{where}: write_indices {list(idx.shape)} must be [{past[0]}]")
        if node.attrs["mode"] not in ("linear", "circular"):
            raise UnsupportedOpError(f"{where}: mode {node.attrs['mode']!r}")
        outer = int(np.prod(past[1:a], dtype=np.int64))
        inner = int(np.prod(past[a + 1 :], dtype=np.int64))
        return a, past[0], outer, past[a], upd[a], inner

    def infer(self, node: Node) -> list[OutType]:
        self._geom(node)
        if node.inputs[1].dtype != node.inputs[0].dtype:
            raise ShapeError(f"TensorScatter (node {node.name!r}): update and cache dtypes differ")
        return [(node.inputs[0].shape, node.inputs[0].dtype)]

    def reference(self, node: Node, inputs):
        _, b, outer, n, m, inner = self._geom(node)
        out = inputs[0].copy().reshape(b, outer, n, inner)
        upd = inputs[1].reshape(b, outer, m, inner)
        idx = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros(b, np.int64)
        circ = node.attrs["mode"] == "circular"
        for bi in range(b):
            for s in range(m):
                pos = int(idx[bi]) + s
                pos = pos % n if circ else pos
                if 0 <= pos < n:
                    out[bi, :, pos] = upd[bi, :, s]
        return [out.reshape(inputs[0].shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        _, b_, outer, n, m, inner = self._geom(node)
        past, upd, y = node.inputs[0], node.inputs[1], node.outputs[0]
        if y.size == 0:
            return ""
        yp, pp, up = ctx.ptr(y), ctx.ptr(past), ctx.ptr(upd)
        idx = node.input(2)
        start = f"(int64_t){ctx.ptr(idx)}[{{b}}]" if idx is not None else "0"
        b, o, s, i = (ctx.unique(p) for p in "bosi")
        circ = node.attrs["mode"] == "circular"
        pos = f"(({start.format(b=b)} + {s}) % {n} + {n}) % {n}" if circ else f"{start.format(b=b)} + {s}"
        return "\n".join(
            [
                f"if ({yp} != {pp}) for (int64_t {i} = 0; {i} < {y.size}; ++{i}) {yp}[{i}] = {pp}[{i}];",
                f"for (int64_t {b} = 0; {b} < {b_}; ++{b}) for (int64_t {o} = 0; {o} < {outer}; ++{o})",
                f"for (int64_t {s} = 0; {s} < {m}; ++{s}) {{",
                f"  const int64_t pos = {pos};",
                f"  if (pos < 0 || pos >= {n}) continue;",
                f"  for (int64_t {i} = 0; {i} < {inner}; ++{i})",
                f"    {yp}[(({b}*{outer} + {o})*{n} + pos)*{inner} + {i}] = {up}[(({b}*{outer} + {o})*{m} + {s})*{inner} + {i}];",
                "}",
            ]
        )
