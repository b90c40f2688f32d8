"""ONNX ``ScatterElements`` (11, 13, 16, 18) and ``ScatterND`` (11, 13, 16, 18): a copy
of ``data`` with ``updates`` written (or combined with ``reduction`` ``add``, ``mul``,
``max``, ``min``) at the positions ``indices`` name. Negative indices count from the
end; out-of-range runtime indices are clamped (C cannot raise). Duplicate indices with
``reduction="none"`` keep the last update, as in the reference."""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ..base import EmitContext, OpDef, OutType, register
from .loops import contiguous_strides, emit_loops, linear_offset, normalize_axis

__all__ = ["ScatterElements", "ScatterND"]

logger = logging.getLogger(__name__)

_COMBINE = {
    "none": lambda a, b: b,
    "add": lambda a, b: f"{a} + {b}",
    "mul": lambda a, b: f"{a} * {b}",
    "max": lambda a, b: f"({b} > {a} ? {b} : {a})",
    "min": lambda a, b: f"({b} < {a} ? {b} : {a})",
}
_NP = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _clamp(var: str, dim: int) -> str:
    return f"if ({var} < 0) {var} += {dim};\nif ({var} < 0) {var} = 0; else if ({var} >= {dim}) {var} = {dim - 1};"


class _Scatter(OpDef):
    where_: ClassVar[str] = ""
    defaults = {"reduction": "none"}

    def _reduction(self, node: Node) -> str:
        r = self.attr(node, "reduction")
        if r not in _COMBINE:
            raise UnsupportedOpError(f"{self.op_type} (node {node.name!r}): reduction {r!r}")
        return r

    def infer(self, node: Node) -> list[OutType]:
        self._reduction(node)
        self._check(node)
        x = node.inputs[0]
        return [(x.shape, x.dtype)]

    def _check(self, node: Node) -> None:
        raise NotImplementedError

    def _copy(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        i = ctx.unique("i")
        return (
            f"for (int64_t {i} = 0; {i} < {x.size}; ++{i}) {ctx.ptr(y)}[{i}] = {ctx.ptr(x)}[{i}];"
        )


@register
class ScatterElements(_Scatter):
    """``ScatterElements``: ``out[.., idx[p], ..] = updates[p]`` along ``axis``.

    Raises
    ------
    ShapeError
        When indices and updates differ in shape or rank.
    """

    op_type, since_version = "ScatterElements", 11

    def _check(self, node: Node) -> None:
        x, idx, upd = node.inputs[:3]
        if idx.shape != upd.shape or len(idx.shape) != len(x.shape):
            raise ShapeError(f"ScatterElements (node {node.name!r}): indices {list(idx.shape)}, "
                             f"updates {list(upd.shape)}, data {list(x.shape)}")  # fmt: skip
        normalize_axis(node.attrs["axis"], len(x.shape), f"ScatterElements (node {node.name!r})")

    def reference(self, node: Node, inputs):
        x, idx, upd = inputs
        a = normalize_axis(node.attrs["axis"], x.ndim)
        out = np.array(x, copy=True)
        idx = np.where(idx < 0, idx + x.shape[a], idx)
        fn = _NP[self._reduction(node)]
        for p in np.ndindex(*idx.shape):
            q = list(p)
            q[a] = int(idx[p])
            q = tuple(q)
            out[q] = upd[p] if fn is None else fn(out[q], upd[p])
        return [out]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, idx, upd = node.inputs[:3]
        y = node.outputs[0]
        a = normalize_axis(node.attrs["axis"], len(x.shape))
        comb = _COMBINE[self._reduction(node)]
        xs, us = contiguous_strides(x.shape), contiguous_strides(upd.shape)

        def body(p: list[str]) -> str:
            t = ctx.unique("ix")
            q = [t if d == a else v for d, v in enumerate(p)]
            dst = f"{ctx.ptr(y)}[{linear_offset(q, xs)}]"
            u = f"{ctx.ptr(upd)}[{linear_offset(p, us)}]"
            return (f"int64_t {t} = (int64_t){ctx.ptr(idx)}[{linear_offset(p, us)}];\n"
                    f"{_clamp(t, x.shape[a])}\n{dst} = {comb(dst, u)};")  # fmt: skip

        return self._copy(node, ctx) + "\n" + emit_loops(ctx, upd.shape, body)


@register
class ScatterND(_Scatter):
    """``ScatterND``: ``out[idx[p]] = updates[p]`` where each ``idx[p]`` is a tuple of
    ``q = indices.shape[-1]`` leading coordinates (a slice of ``data.shape[q:]``).

    Raises
    ------
    ShapeError
        When ``updates.shape != indices.shape[:-1] + data.shape[q:]``.
    """

    op_type, since_version = "ScatterND", 11

    def _check(self, node: Node) -> None:
        x, idx, upd = node.inputs[:3]
        q = idx.shape[-1] if idx.shape else 0
        want = idx.shape[:-1] + x.shape[q:]
        if not idx.shape or q > len(x.shape) or upd.shape != want:
            raise ShapeError(f"ScatterND (node {node.name!r}): updates {list(upd.shape)}, "
                             f"expected {list(want)}")  # fmt: skip

    def reference(self, node: Node, inputs):
        x, idx, upd = inputs
        out = np.array(x, copy=True)
        fn = _NP[self._reduction(node)]
        for p in np.ndindex(*idx.shape[:-1]):
            t = tuple(int(v) + (x.shape[d] if v < 0 else 0) for d, v in enumerate(idx[p]))
            out[t] = upd[p] if fn is None else fn(out[t], upd[p])
        return [out]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, idx, upd = node.inputs[:3]
        y = node.outputs[0]
        q = idx.shape[-1]
        comb = _COMBINE[self._reduction(node)]
        xs = contiguous_strides(x.shape)
        inner = int(np.prod(x.shape[q:], dtype=np.int64))
        n = idx.size // max(q, 1)
        p, j, base = ctx.unique("p"), ctx.unique("j"), ctx.unique("base")
        lines = [f"for (int64_t {p} = 0; {p} < {n}; ++{p}) {{", f"int64_t {base} = 0;"]
        for d in range(q):
            t = ctx.unique("ix")
            lines += [f"int64_t {t} = (int64_t){ctx.ptr(idx)}[{p}*{q} + {d}];", _clamp(t, x.shape[d]),
                      f"{base} += {t}*{xs[d]};"]  # fmt: skip
        dst = f"{ctx.ptr(y)}[{base} + {j}]"
        u = f"{ctx.ptr(upd)}[{p}*{inner} + {j}]"
        lines += [f"for (int64_t {j} = 0; {j} < {inner}; ++{j}) {dst} = {comb(dst, u)};", "}"]
        return self._copy(node, ctx) + "\n" + "\n".join(lines)
